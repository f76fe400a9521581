package chart

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/inventory"
	"github.com/tetherhq/tether/internal/testutil/helmtest"
)

func TestLintAndRender(t *testing.T) {
	h := helmtest.New(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vf := helmtest.ValuesFile(t, c.values)
			out, err := h.Run("lint", "--strict", h.Chart, "-f", vf)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Errorf("helm lint:\n%s", out)
			}
			objs := render(t, h, c.name, c.namespace(), c.values)
			if len(objs) == 0 {
				t.Fatal("rendered nothing")
			}
			for _, o := range objs {
				if o.Name() == "" || o.Kind() == "" {
					t.Errorf("an object without kind or name: %v", o)
				}
			}
		})
	}
}

// The schema refuses unknown keys, at any depth, and values of the wrong
// type, naming where.
func TestSchemaRefuses(t *testing.T) {
	h := helmtest.New(t)
	for _, tc := range []struct {
		name, values, want string
	}{
		{"misspelled key", agentValues + "rbac:\n  creat: false\n", `at '/rbac': additional properties 'creat' not allowed`},
		{"misspelled nested key", "mode: agent\nagent:\n  hubURL: https://tether.example.com\n", `at '/agent': additional properties 'hubURL' not allowed`},
		{"unknown top-level key", agentValues + "replicas: 2\n", `additional properties 'replicas' not allowed`},
		{"misspelled key in a list", agentValues + "tolerations:\n  - {key: a, operatr: Exists}\n", `at '/tolerations/0': additional properties 'operatr' not allowed`},
		{"misspelled key in a security context", agentValues + "securityContext:\n  readOnlyRootFilesytem: true\n", `additional properties 'readOnlyRootFilesytem' not allowed`},
		{"text for a boolean", agentValues + "rbac:\n  create: \"yes\"\n", `at '/rbac/create': got string, want boolean`},
		{"text for a number", hubValues + "  replicas: \"3\"\n", `at '/hub/replicas': got string, want integer`},
		{"no replicas", hubValues + "  replicas: 0\n", `at '/hub/replicas'`},
		{"a negative drain delay", hubValues + "  drainDelaySeconds: -1\n", `at '/hub/drainDelaySeconds'`},
		{"a misspelled spread constraint", agentValues + "topologySpreadConstraints:\n  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway, labelSelecter: {}}\n", `additional properties 'labelSelecter' not allowed`},
		{"a string for a list", agentValues + "allowedNamespaces: team-a\n", `at '/allowedNamespaces': got string, want array`},
		{"a number for a user id", agentValues + "podSecurityContext:\n  runAsUser: root\n", `at '/podSecurityContext/runAsUser': got string, want integer`},
		{"unknown mode", "mode: relay\n", `at '/mode'`},
		{"cluster name not a DNS label", agentValues + "clusterName: Private_EU\n", `at '/clusterName'`},
		{"a wildcard verb in the ceiling", agentValues + "strictMode: true\nceiling:\n  rules:\n    - {apiGroups: [\"\"], resources: [pods], verbs: [\"*\"]}\n", `at '/ceiling/rules/0/verbs/0'`},
		{"a ceiling rule without resources", agentValues + "ceiling:\n  rules:\n    - {apiGroups: [\"\"], verbs: [get]}\n", `at '/ceiling/rules/0'`},
		{"access without a subject", agentValues + "access:\n  - {clusterRole: view}\n", `at '/access/0'`},
		{"access without a role", agentValues + "access:\n  - {group: dev}\n", `at '/access/0'`},
		{"access with a misspelled key", agentValues + "access:\n  - {group: dev, clusterRole: view, namespace: [a]}\n", `additional properties 'namespace' not allowed`},
		{"a string for strictMode", agentValues + "strictMode: \"yes\"\n", `at '/strictMode': got string, want boolean`},
		{"hub URL without a scheme", "mode: agent\nagent:\n  hubUrl: tether.example.com\n  tokenSecret: t\n", `at '/agent/hubUrl'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.Template("t", "default", tc.values)
			if err == nil {
				t.Fatalf("helm template accepted:\n%s", tc.values)
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant the schema's error with %q", err, tc.want)
			}
			// helm lint checks the schema too.
			if _, err := h.Run("lint", h.Chart, "-f", helmtest.ValuesFile(t, tc.values)); err == nil {
				t.Errorf("helm lint accepted:\n%s", tc.values)
			}
		})
	}
}

// What the schema can't say (this depends on that) the templates check,
// with a message that says what to set.
func TestRequiredValues(t *testing.T) {
	h := helmtest.New(t)
	for _, tc := range []struct {
		name, values, want string
	}{
		{"agent without a hub", "mode: agent\nagent:\n  tokenSecret: t\n", "agent.hubUrl must be set to the hub's address"},
		{"agent without a token", "mode: agent\nagent:\n  hubUrl: https://tether.example.com\n", "agent.tokenSecret must name a Secret whose key `token`"},
		{"hub without its address", "mode: hub\nhub:\n  usersSecret: u\n", "hub.publicUrl must be set"},
		{"hub without sign-in", "mode: hub\nhub:\n  publicUrl: https://tether.example.com\n", "hub mode needs a way for people to sign in"},
		{"OIDC without a client", hubValues + "  oidc:\n    issuer: https://login.example.com\n", "hub.oidc.clientId must be set with hub.oidc.issuer"},
		{"auth proxy trusted from nowhere", "mode: hub\nhub:\n  publicUrl: https://tether.example.com\n  authProxy:\n    userHeader: X-User\n", "hub.authProxy.trustedCIDRs must list"},
		{"access outside allowedNamespaces", agentValues + "allowedNamespaces: [team-a, team-b]\naccess:\n  - {group: dev, clusterRole: view, namespaces: [team-a]}\n  - {group: ops, clusterRole: edit, namespaces: [team-b, kube-system]}\n",
			`access[1] names namespace "kube-system", which allowedNamespaces (team-a, team-b) doesn't list`},
		{"no ServiceAccount", agentValues + "serviceAccount:\n  create: false\n", "serviceAccount.name must name an existing ServiceAccount"},
		// replicaCount is gone (SPEC section 8): once it made independent
		// hubs, each with some of the agents. Any value fails, 1 too.
		{"replicaCount on a hub", hubValues + "replicaCount: 3\n", "replicaCount is gone: set hub.replicas"},
		{"replicaCount 1", hubValues + "replicaCount: 1\n", "replicaCount is gone: set hub.replicas"},
		{"replicaCount on an agent", agentValues + "replicaCount: 1\n", "replicaCount is gone: set hub.replicas"},
		{"replicas without a signing key", hubValues + "  replicas: 3\n", "hub.signingKeySecret must name a Secret whose key `signing-key.pem`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.Template("t", "default", tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestAgentDeployment(t *testing.T) {
	h := helmtest.New(t)
	for _, c := range cases {
		if !strings.HasPrefix(c.name, "agent") {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			// Whatever hub.replicas says, the agent runs one replica.
			objs := render(t, h, c.name, "tether", c.values+"\nhub:\n  replicas: 3\n")
			for _, o := range objs {
				if o.Kind() == "Service" || o.Kind() == "Ingress" {
					t.Errorf("agent mode renders a %s %q; the agent has none", o.Kind(), o.Name())
				}
			}
			var d deployment
			decode(t, only(t, objs, "Deployment"), &d)
			if d.Metadata.Name != c.name+"-agent" {
				t.Errorf("Deployment %q, want %q", d.Metadata.Name, c.name+"-agent")
			}
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
				t.Errorf("replicas %s, want 1", js(d.Spec.Replicas))
			}
			if d.Spec.Strategy.Type != "Recreate" {
				t.Errorf("strategy %q, want Recreate", d.Spec.Strategy.Type)
			}
			pod := d.Spec.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(pod.Containers))
			}
			ctr := pod.Containers[0]
			if !slices.Equal(ctr.Args, []string{"agent"}) {
				t.Errorf("args %q, want [agent]", ctr.Args)
			}
			if p := ctr.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Port != 8081 || p.HTTPGet.Path != "/healthz" {
				t.Errorf("readiness probe %s, want GET /healthz on 8081", js(p))
			}
			if p := ctr.LivenessProbe; p == nil || p.TCPSocket == nil || p.TCPSocket.Port != 8081 {
				t.Errorf("liveness probe %s, want port 8081", js(p))
			}
			if env(ctr, "TETHER_HEALTH_ADDR") != ":8081" {
				t.Errorf("TETHER_HEALTH_ADDR %q, want :8081", env(ctr, "TETHER_HEALTH_ADDR"))
			}
			if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
				t.Error("the agent's pod doesn't mount its service account token, which it relays with")
			}
			ref := ctr.envVar("TETHER_AGENT_TOKEN")
			if ref == nil || ref.ValueFrom == nil || ref.ValueFrom.SecretKeyRef == nil || ref.ValueFrom.SecretKeyRef.Key != "token" || ref.ValueFrom.SecretKeyRef.Name != "agent-token" {
				t.Errorf("TETHER_AGENT_TOKEN %s, want the key token of Secret agent-token", js(ref))
			}
			if c.name == "agent-options" {
				// Values that change the resources replace the defaults.
				checkResources(t, ctr, "20m", "48Mi", "256Mi")
				if env(ctr, "TETHER_AGENT_NAME") != "edge-1" || env(ctr, "TETHER_HUB_CA") != "/etc/tether/hub-ca/ca.crt" {
					t.Errorf("env %s", js(ctr.Env))
				}
				if pod.ServiceAccountName != "edge-agent" {
					t.Errorf("serviceAccountName %q, want edge-agent", pod.ServiceAccountName)
				}
				checkPodOptions(t, d)
				return
			}
			checkResources(t, ctr, "10m", "32Mi", "128Mi")
			if env(ctr, "TETHER_AGENT_NAME") != "in-cluster" || env(ctr, "TETHER_HUB_URL") != "https://tether.example.com" {
				t.Errorf("env %s", js(ctr.Env))
			}
			if ctr.Image != "ghcr.io/tetherhq/tether:"+appVersion(t, h) {
				t.Errorf("image %q, want ghcr.io/tetherhq/tether at the chart's appVersion", ctr.Image)
			}
			want := strings.Join(c.namespaces, ",")
			if got := env(ctr, "TETHER_ALLOWED_NAMESPACES"); got != want {
				t.Errorf("TETHER_ALLOWED_NAMESPACES %q, want %q", got, want)
			}
			strict := ""
			if strings.HasPrefix(c.name, "agent-strict") {
				strict = "true"
			}
			if got := env(ctr, "TETHER_STRICT_MODE"); got != strict {
				t.Errorf("TETHER_STRICT_MODE %q, want %q", got, strict)
			}
		})
	}
}

// checkPodOptions checks that each of podOptions arrives in the rendered
// Deployment d, as given: the values replace the chart's defaults.
func checkPodOptions(t *testing.T, d deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec
	ctr := pod.Containers[0]
	if ctr.Image != "registry.example.com/tether@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" {
		t.Errorf("image %q, want image.repository at image.digest", ctr.Image)
	}
	if ctr.ImagePullPolicy != "Always" {
		t.Errorf("imagePullPolicy %q, want image.pullPolicy's Always", ctr.ImagePullPolicy)
	}
	if len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "registry" {
		t.Errorf("imagePullSecrets %s, want [registry]", js(pod.ImagePullSecrets))
	}
	// extraEnv comes after the chart's own settings, as given, valueFrom
	// included.
	if n := len(ctr.Env); n < 2 {
		t.Errorf("env %s, want extraEnv's two at the end", js(ctr.Env))
	} else {
		proxy, reread := ctr.Env[n-2], ctr.Env[n-1]
		if proxy.Name != "HTTPS_PROXY" || proxy.Value != "http://proxy.example.com:3128" || proxy.ValueFrom != nil {
			t.Errorf("the next to last env var %s, want extraEnv's HTTPS_PROXY", js(proxy))
		}
		if r := reread.ValueFrom; reread.Name != "TETHER_TOKEN_REREAD_SECONDS" || r == nil || r.ConfigMapKeyRef == nil ||
			r.ConfigMapKeyRef.Name != "agent-settings" || r.ConfigMapKeyRef.Key != "reread" || r.ConfigMapKeyRef.Optional == nil || !*r.ConfigMapKeyRef.Optional {
			t.Errorf("the last env var %s, want extraEnv's TETHER_TOKEN_REREAD_SECONDS from ConfigMap agent-settings", js(reread))
		}
	}
	for _, f := range []struct {
		what string
		got  any
		want string // JSON
	}{
		{"the pod's securityContext", pod.SecurityContext, `{"runAsNonRoot": true, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}}`},
		{"the container's securityContext", ctr.SecurityContext, `{"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}, "runAsGroup": 10001}`},
		{"nodeSelector", pod.NodeSelector, `{"kubernetes.io/os": "linux"}`},
		{"tolerations", pod.Tolerations, `[{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]`},
		{"affinity", pod.Affinity, `{"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]}]}}}`},
		{"priorityClassName", pod.PriorityClassName, `"system-cluster-critical"`},
		{"the pod's annotations", d.Spec.Template.Metadata.Annotations, `{"example.com/owner": "platform"}`},
	} {
		var want any
		if err := json.Unmarshal([]byte(f.want), &want); err != nil {
			t.Fatal(err)
		}
		if got := js(f.got); got != js(want) {
			t.Errorf("%s %s, want %s", f.what, got, js(want))
		}
	}
	if d.Spec.Template.Metadata.Labels["team"] != "platform" {
		t.Errorf("the pod's labels %s, want podLabels' team=platform among them", js(d.Spec.Template.Metadata.Labels))
	}
}

func checkResources(t *testing.T, c container, cpu, memory, limit string) {
	t.Helper()
	r := c.Resources
	if r.Requests["cpu"] != cpu || r.Requests["memory"] != memory || r.Limits["memory"] != limit {
		t.Errorf("resources %s, want requests %s CPU and %s, limit %s", js(r), cpu, memory, limit)
	}
}

func TestHubDeployment(t *testing.T) {
	h := helmtest.New(t)
	objs := render(t, h, "hub-full", "tether", caseValues(t, "hub-full"))
	var d deployment
	decode(t, only(t, objs, "Deployment"), &d)
	pod := d.Spec.Template.Spec
	ctr := pod.Containers[0]
	if !slices.Equal(ctr.Args, []string{"hub"}) {
		t.Errorf("args %q, want [hub]", ctr.Args)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas %s, want 1 by default", js(d.Spec.Replicas))
	}
	checkPodOptions(t, d)
	// Each file the hub reloads is in a directory mounted from its Secret,
	// never through subPath, which would freeze it: Kubernetes updates a
	// Secret's files by swapping the directory's ..data symlink.
	for setting, volume := range map[string]string{
		"TETHER_FLEET_AGENTS_FILE": "tether-agents",
		"TETHER_TLS_CERT_FILE":     "hub-tls",
		"TETHER_TLS_KEY_FILE":      "hub-tls",
		"TETHER_USERS_FILE":        "tether-users",
	} {
		path := env(ctr, setting)
		m := mountOf(ctr, path)
		if m == nil {
			t.Errorf("%s=%q is in no mounted volume", setting, path)
			continue
		}
		if m.SubPath != "" {
			t.Errorf("%s is mounted with subPath %q: it would never see updates", setting, m.SubPath)
		}
		v := pod.volume(m.Name)
		if v == nil || v.Secret == nil || v.Secret.SecretName != volume {
			t.Errorf("%s's volume %s, want Secret %s", setting, js(v), volume)
		}
	}
	// The clusters the hub reaches itself: the list from the Secret's
	// clusters.yaml, and its files in a directory the entries can name.
	if e := ctr.envVar("TETHER_FLEET_CLUSTERS"); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
		e.ValueFrom.SecretKeyRef.Name != "tether-clusters" || e.ValueFrom.SecretKeyRef.Key != "clusters.yaml" {
		t.Errorf("TETHER_FLEET_CLUSTERS %s, want the key clusters.yaml of Secret tether-clusters", js(e))
	}
	if m := mountOf(ctr, "/etc/tether/clusters/staging-ca.crt"); m == nil || m.SubPath != "" {
		t.Errorf("/etc/tether/clusters is mounted as %s, want the whole Secret as a directory", js(m))
	} else if v := pod.volume(m.Name); v == nil || v.Secret == nil || v.Secret.SecretName != "tether-clusters" {
		t.Errorf("the clusters' volume %s, want Secret tether-clusters", js(v))
	}
	for k, want := range map[string]string{
		"TETHER_PUBLIC_URL":               "https://tether.example.com/tether",
		"TETHER_BASE_PATH":                "/tether",
		"TETHER_OIDC_ISSUER":              "https://login.example.com",
		"TETHER_OIDC_CLIENT_ID":           "tether",
		"TETHER_AUTH_PROXY_TRUSTED_CIDRS": "10.0.0.0/8,192.168.1.1",
		"TETHER_TOKEN_SIGNING_KEY_FILE":   "/etc/tether/signing-key/signing-key.pem",
		"TETHER_SHUTDOWN_GRACE_SECONDS":   "60",
		"TETHER_METRICS_ADDR":             ":9090",
	} {
		if got := env(ctr, k); got != want {
			t.Errorf("%s %q, want %q", k, got, want)
		}
	}
	if ctr.ReadinessProbe == nil || ctr.ReadinessProbe.HTTPGet == nil || ctr.ReadinessProbe.HTTPGet.Scheme != "HTTPS" || ctr.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %s, want GET /readyz over HTTPS", js(ctr.ReadinessProbe))
	}
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds <= 60 {
		t.Errorf("terminationGracePeriodSeconds %s, want more than the 60 s the hub lets requests finish in", js(pod.TerminationGracePeriodSeconds))
	}
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.Kind()] = true
	}
	for _, k := range []string{"Service", "Ingress", "NetworkPolicy", "ServiceAccount"} {
		if !kinds[k] {
			t.Errorf("hub mode with its options renders no %s", k)
		}
	}
	for _, k := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if kinds[k] {
			t.Errorf("hub mode renders a %s: the hub needs no RBAC in its own cluster", k)
		}
	}

	// Without TLS and with metrics off, the ports follow.
	objs = render(t, h, "hub-plain", "tether", caseValues(t, "hub-plain"))
	decode(t, only(t, objs, "Deployment"), &d)
	ctr = d.Spec.Template.Spec.Containers[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("hub replicas %s, want 1 by default", js(d.Spec.Replicas))
	}
	if env(ctr, "TETHER_METRICS_ADDR") != "0" || env(ctr, "TETHER_TLS_CERT_FILE") != "" || ctr.ReadinessProbe.HTTPGet.Scheme != "HTTP" {
		t.Errorf("hub-plain: env %s, probe %s", js(ctr.Env), js(ctr.ReadinessProbe))
	}
	svc := only(t, objs, "Service")
	if b, _ := json.Marshal(svc["spec"]); !strings.Contains(string(b), `"port":8080`) {
		t.Errorf("Service %s, want port 8080", b)
	}
}

// appVersion reads the chart's appVersion, the image's default tag.
func appVersion(t *testing.T, h *helmtest.Helm) string {
	t.Helper()
	out, err := h.Run("show", "chart", h.Chart)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatalf("no appVersion in:\n%s", out)
	return ""
}

func caseValues(t *testing.T, name string) string {
	t.Helper()
	for _, c := range cases {
		if c.name == name {
			return c.values
		}
	}
	t.Fatalf("no case %q", name)
	return ""
}

// The chart grants read access to exactly the kinds the agent watches
// (internal/inventory), no more and no fewer: cluster-wide, or in each
// allowed namespace for the namespaced ones.
func TestInventoryRulesMatchTheAgent(t *testing.T) {
	h := helmtest.New(t)
	type rule struct {
		APIGroups, Resources, Verbs, ResourceNames []string
	}
	granted := func(o helmtest.Object) []string {
		var r struct{ Rules []rule }
		decode(t, o, &r)
		var out []string
		for _, ru := range r.Rules {
			if !slices.Equal(ru.Verbs, []string{"get", "list", "watch"}) || len(ru.ResourceNames) > 0 {
				t.Errorf("%s %s: rule %+v, want get, list and watch, on every name", o.Kind(), o.Name(), ru)
			}
			for _, g := range ru.APIGroups {
				for _, res := range ru.Resources {
					out = append(out, res+"."+g)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	var all, namespaced []string
	for _, k := range inventory.Kinds {
		all = append(all, k.Name+"."+k.Group)
		if k.Namespaced {
			namespaced = append(namespaced, k.Name+"."+k.Group)
		}
	}
	slices.Sort(all)
	slices.Sort(namespaced)

	for _, o := range render(t, h, "t", "tether", agentValues) {
		if o.Kind() == "ClusterRole" && o.Name() == "t-inventory" {
			if got := granted(o); !slices.Equal(got, all) {
				t.Errorf("the inventory ClusterRole grants %q, the agent watches %q", got, all)
			}
		}
	}
	roles := 0
	for _, o := range render(t, h, "t", "tether", agentValues+"allowedNamespaces: [a, b]\n") {
		if o.Kind() == "ClusterRole" && o.Name() != "t-impersonate" {
			t.Errorf("with allowedNamespaces, ClusterRole %s", o.Name())
		}
		if o.Kind() == "Role" {
			roles++
			if got := granted(o); !slices.Equal(got, namespaced) {
				t.Errorf("Role %s in %s grants %q, the agent watches %q there", o.Name(), o.Namespace(), got, namespaced)
			}
		}
	}
	if roles != 2 {
		t.Errorf("%d Roles for two allowed namespaces", roles)
	}
}
