{{/*
tether.ceilingUser is the user the agent impersonates to learn, at start,
whether the API server enforces constrained impersonation (a GET /version
as it): it is never given any rights.
*/}}
{{- define "tether.ceilingUser" -}}tether:ceiling-check{{- end -}}

{{/*
tether.requestIdExtra is the user extra that carries the hub's request id
under strictMode. Constrained impersonation accepts only domain-prefixed
extra keys, so it can't be the plain tether-request-id (decision 027).
*/}}
{{- define "tether.requestIdExtra" -}}tetherhq.github.io/request-id{{- end -}}

{{/*
tether.impersonateOn renders ceiling rules as RBAC rules: each of a person's
verbs becomes impersonate-on:user-info:<verb>. RBAC has no verb wildcard
for these: the schema refuses "*".
*/}}
{{- define "tether.impersonateOn" -}}
{{- range . }}
{{- if .nonResourceURLs }}
- nonResourceURLs: {{ toJson .nonResourceURLs }}
{{- else }}
- apiGroups: {{ toJson .apiGroups }}
  resources: {{ toJson .resources }}
  {{- with .resourceNames }}
  resourceNames: {{ toJson . }}
  {{- end }}
{{- end }}
  verbs:
  {{- range .verbs }}
    - {{ printf "impersonate-on:user-info:%s" . | quote }}
  {{- end }}
{{- end }}
{{- end -}}

{{/*
tether.strictImpersonation is the agent's ClusterRole under strictMode
(Kubernetes 1.36 constrained impersonation, KEP-5284), called with dict
"root" (the chart's context) and "name".
*/}}
{{- define "tether.strictImpersonation" -}}
{{- $v := .root.Values }}
{{- if not $v.proxy.enabled }}
# strictMode with the proxy off: no one's requests go through Tether, so
# the agent may act as a person for the hub's access reviews alone (they
# filter the inventory), and GET /version as tether:ceiling-check (its
# check that constrained impersonation holds). Even a hub that marks a
# person's request as its own gets nothing else past the API server.
{{- else }}
# strictMode: the agent may act as a person only for what the
# impersonate-on:user-info:<verb> rules below and in the allowed
# namespaces' <release>-ceiling Roles grant, never with the plain
# impersonate verb, which would let it act as anyone for anything.
{{- end }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .name }}
  labels:
    {{- include "tether.labels" .root | nindent 4 }}
rules:
  # Whom: any person, or those pinned, and the one user extra, the hub's
  # request id.
  - apiGroups: [authentication.k8s.io]
    resources: [users]
    verbs: ["impersonate:user-info"]
    {{- with $v.rbac.impersonate.users }}
    resourceNames: {{ toJson (append . (include "tether.ceilingUser" $)) }}
    {{- end }}
  - apiGroups: [authentication.k8s.io]
    resources: [groups]
    verbs: ["impersonate:user-info"]
    {{- with $v.rbac.impersonate.groups }}
    resourceNames: {{ toJson . }}
    {{- end }}
  {{- if $v.proxy.enabled }}
  - apiGroups: [authentication.k8s.io]
    resources: [{{ printf "userextras/%s" (include "tether.requestIdExtra" $) | quote }}]
    verbs: ["impersonate:user-info"]
  {{- end }}
  # What Tether asks as the person wherever the ceiling lies: the hub's
  # access reviews, kubectl auth can-i and whoami (each tells a person only
  # their own rights), and discovery. Anything else cluster-wide comes
  # from ceiling.clusterRules.
  {{- if not $v.proxy.enabled }}
  - apiGroups: [authorization.k8s.io]
    resources: [selfsubjectaccessreviews]
    verbs: ["impersonate-on:user-info:create"]
  - nonResourceURLs: [/version]
    verbs: ["impersonate-on:user-info:get"]
  {{- else }}
  - apiGroups: [authorization.k8s.io]
    resources: [selfsubjectaccessreviews, selfsubjectrulesreviews]
    verbs: ["impersonate-on:user-info:create"]
  - apiGroups: [authentication.k8s.io]
    resources: [selfsubjectreviews]
    verbs: ["impersonate-on:user-info:create"]
  - nonResourceURLs: [/api, /api/*, /apis, /apis/*, /version, /openapi, /openapi/*]
    verbs: ["impersonate-on:user-info:get"]
  {{- with $v.ceiling.clusterRules }}
  {{- include "tether.impersonateOn" . | trim | nindent 2 }}
  {{- end }}
  {{- if not $v.allowedNamespaces }}
  # No allowedNamespaces: the ceiling's rules hold cluster-wide.
  {{- include "tether.impersonateOn" $v.ceiling.rules | trim | nindent 2 }}
  {{- end }}
  {{- end }}
{{- end -}}

{{/*
tether.accessSubjects are the subjects of one access entry's bindings: its
group and its user, as the API server sees them (the hub's prefixes
included).
*/}}
{{- define "tether.accessSubjects" -}}
{{- with .group }}
- kind: Group
  apiGroup: rbac.authorization.k8s.io
  name: {{ . | quote }}
{{- end }}
{{- with .user }}
- kind: User
  apiGroup: rbac.authorization.k8s.io
  name: {{ . | quote }}
{{- end }}
{{- end -}}
