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
