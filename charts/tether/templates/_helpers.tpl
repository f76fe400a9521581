{{/*
tether.component is the name of what this release runs: <release>-agent or
<release>-hub. The Deployment, its ServiceAccount and the hub's Service are
named so.
*/}}
{{- define "tether.component" -}}
{{- printf "%s-%s" .Release.Name .Values.mode | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tether.selectorLabels" -}}
app.kubernetes.io/name: tether
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: {{ .Values.mode }}
{{- end -}}

{{- define "tether.labels" -}}
{{ include "tether.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "tether.serviceAccountName" -}}
{{- if .Values.serviceAccount.name -}}
{{- .Values.serviceAccount.name -}}
{{- else if .Values.serviceAccount.create -}}
{{- include "tether.component" . -}}
{{- else -}}
{{- fail "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" -}}
{{- end -}}
{{- end -}}

{{- define "tether.image" -}}
{{- $repo := .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
tether.podCommon is what the agent's and the hub's pod specs share: the
service account, pull secrets, security context and scheduling.
*/}}
{{- define "tether.podCommon" -}}
serviceAccountName: {{ include "tether.serviceAccountName" . | quote }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- else }}
{{- if include "tether.hubReplicated" . }}
# One replica per node where it can be, so losing a node loses one
# replica; ScheduleAnyway, so fewer nodes than replicas still run them
# all.
# pod-template-hash counts only the pods of the same revision, so a
# rolling update spreads the new pods too.
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "tether.selectorLabels" . | nindent 8 }}
    matchLabelKeys: [pod-template-hash]
{{- end }}
{{- end }}
{{- end -}}

{{- define "tether.podMetadata" -}}
labels:
  {{- include "tether.selectorLabels" . | nindent 2 }}
  {{- with .Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* tether.hubPort is the Service's port: service.port, or 443 with TLS, else 80. */}}
{{- define "tether.hubPort" -}}
{{- if .Values.service.port -}}
{{- .Values.service.port -}}
{{- else if .Values.hub.tls.secretName -}}
443
{{- else -}}
80
{{- end -}}
{{- end -}}

{{- define "tether.hubPortName" -}}
{{- if .Values.hub.tls.secretName }}https{{ else }}http{{ end -}}
{{- end -}}

{{/*
tether.hubReplicated is "true" for a hub of more than one replica, which
coordinates through Kubernetes, and empty otherwise.
*/}}
{{- define "tether.hubReplicated" -}}
{{- if and (eq .Values.mode "hub") (gt (int .Values.hub.replicas) 1) }}true{{ end -}}
{{- end -}}

{{/*
tether.checkRemoved fails the render on a value the chart no longer has,
saying what replaced it: the schema lets it through so that this message,
not a bare "additional properties", is what people read.
*/}}
{{- define "tether.checkRemoved" -}}
{{- if hasKey .Values "replicaCount" }}
{{- fail "replicaCount is gone: set hub.replicas for the hub's replicas (above 1 they coordinate through Kubernetes and need hub.signingKeySecret); the agent always runs one" }}
{{- end }}
{{- end -}}

{{/* tether.peerPort is the port hub replicas reach each other on (TETHER_PEER_LISTEN_ADDR). */}}
{{- define "tether.peerPort" -}}8444{{- end -}}
