package chart

// chartCase is one way to install the chart: the values, and the
// namespaces that must exist first besides the release's own.
type chartCase struct {
	name       string // also the release's name
	values     string
	namespaces []string // allowedNamespaces, made first
	ns, sa     string   // the release's namespace and the agent's ServiceAccount, if not the usual
}

func (c chartCase) namespace() string {
	if c.ns != "" {
		return c.ns
	}
	return "ns-" + c.name
}

func (c chartCase) serviceAccount() string {
	if c.sa != "" {
		return c.sa
	}
	return c.name + "-agent"
}

const (
	agentValues = `
mode: agent
agent:
  hubUrl: https://tether.example.com
  tokenSecret: agent-token
`
	hubValues = `
mode: hub
hub:
  publicUrl: https://tether.example.com
  usersSecret: tether-users
`
)

// podOptions are the values that shape the pod in either mode (SPEC section
// 6: image, extraEnv, podSecurityContext, securityContext, nodeSelector,
// tolerations, affinity, priorityClassName); checkPodOptions checks that
// each arrives in the rendered Deployment.
const podOptions = `
image:
  repository: registry.example.com/tether
  digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  pullPolicy: Always
imagePullSecrets: [{name: registry}]
extraEnv:
  - name: HTTPS_PROXY
    value: http://proxy.example.com:3128
  - name: TETHER_TOKEN_REREAD_SECONDS
    valueFrom:
      configMapKeyRef: {name: agent-settings, key: reread, optional: true}
podAnnotations: {example.com/owner: platform}
podLabels: {team: platform}
podSecurityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile: {type: RuntimeDefault}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
  runAsGroup: 10001
nodeSelector: {kubernetes.io/os: linux}
tolerations:
  - {key: dedicated, operator: Equal, value: infra, effect: NoSchedule}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
priorityClassName: system-cluster-critical
`

// cases are the option combinations every test runs: both modes, and each
// option that changes what is rendered.
var cases = []chartCase{
	{name: "agent", values: agentValues},
	{name: "agent-no-rbac", values: agentValues + `
rbac:
  create: false
`},
	{name: "agent-pinned", values: agentValues + `
rbac:
  impersonate:
    groups: [dev, ops]
    users: [alice, bob]
`},
	{name: "agent-namespaces", namespaces: []string{"team-a", "team-b"}, values: agentValues + `
allowedNamespaces: [team-a, team-b]
`},
	// strictMode with allowedNamespaces: the ceiling's Roles in each, and
	// access bindings (cluster-admin and system:aggregate-to-view have
	// rules without a controller manager to aggregate them).
	{name: "agent-strict", namespaces: []string{"strict-a", "strict-b"}, values: agentValues + `
strictMode: true
allowedNamespaces: [strict-a, strict-b]
access:
  - {group: platform, clusterRole: cluster-admin, namespaces: [strict-a]}
  - {group: sre, user: bob, clusterRole: "system:aggregate-to-view"}
`},
	// strictMode cluster-wide, people pinned, a narrower ceiling.
	{name: "agent-strict-cluster", values: agentValues + `
strictMode: true
rbac:
  impersonate:
    groups: [dev]
    users: [alice]
ceiling:
  rules:
    - apiGroups: [""]
      resources: [configmaps, pods, pods/log]
      verbs: [get, list, watch]
  clusterRules:
    - apiGroups: [""]
      resources: [nodes]
      verbs: [get, list]
access:
  - {user: alice, clusterRole: "system:aggregate-to-view"}
`},
	// The proxy off (decision 030): the impersonation RBAC stays, for
	// the hub's access reviews.
	{name: "agent-proxy-off", values: agentValues + `
proxy:
  enabled: false
`},
	// Names YAML 1.1 reads as booleans (as Kubernetes' YAML does) stay
	// text: the chart quotes every name it is given.
	{name: "no", ns: "on", sa: "yes", namespaces: []string{"y", "off"}, values: `
mode: agent
clusterName: "true"
agent:
  hubUrl: https://tether.example.com
  tokenSecret: "n"
  hubCAConfigMap: "no"
allowedNamespaces: ["y", "off"]
serviceAccount:
  name: "yes"
`},
	{name: "agent-options", sa: "edge-agent", values: `
mode: agent
clusterName: edge-1
agent:
  hubUrl: https://tether.example.com/base
  tokenSecret: agent-token
  hubCAConfigMap: hub-ca
  resources:
    requests: {cpu: 20m, memory: 48Mi}
    limits: {memory: 256Mi}
logFormat: json
serviceAccount:
  name: edge-agent
  annotations: {example.com/role: tether}
` + podOptions},
	{name: "hub", values: hubValues},
	{name: "hub-full", values: `
mode: hub
hub:
  publicUrl: https://tether.example.com/tether
  basePath: /tether
  tls:
    secretName: hub-tls
  usersSecret: tether-users
  oidc:
    issuer: https://login.example.com
    clientId: tether
    usernameClaim: preferred_username
    groupsClaim: roles
    caConfigMap: oidc-ca
  authProxy:
    userHeader: X-Forwarded-User
    groupsHeader: X-Forwarded-Groups
    trustedCIDRs: [10.0.0.0/8, 192.168.1.1]
  signingKeySecret: hub-signing-key
  kubeconfigTTL: 8h
  impersonateUserPrefix: "tether:"
  impersonateGroupPrefix: "tether:"
  shutdownGraceSeconds: 60
fleet:
  agentsSecret: tether-agents
  clustersSecret: tether-clusters
service:
  type: LoadBalancer
  annotations: {example.com/lb: internal}
ingress:
  enabled: true
  className: nginx
  host: tether.example.com
  annotations:
    nginx.ingress.kubernetes.io/proxy-read-timeout: "3600"
    nginx.ingress.kubernetes.io/proxy-send-timeout: "3600"
    nginx.ingress.kubernetes.io/backend-protocol: HTTPS
  tls:
    - secretName: tether-example-com
      hosts: [tether.example.com]
networkPolicy:
  enabled: true
  from:
    - namespaceSelector:
        matchLabels: {kubernetes.io/metadata.name: ingress-nginx}
  metricsFrom:
    - namespaceSelector:
        matchLabels: {kubernetes.io/metadata.name: monitoring}
` + podOptions},
	{name: "hub-plain", values: hubValues + `
hub:
  publicUrl: http://tether.internal
  usersSecret: tether-users
  metrics:
    enabled: false
service:
  port: 8080
ingress:
  enabled: true
networkPolicy:
  enabled: true
`},
	// Replicas coordinating through Leases (SPEC section 8): the Role,
	// the PodDisruptionBudget and the peer port's NetworkPolicy rule.
	{name: "hub-replicas", values: hubValues + `  signingKeySecret: hub-signing-key
  replicas: 3
networkPolicy:
  enabled: true
`},
}
