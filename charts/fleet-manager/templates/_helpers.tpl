{{/* Common labels of every object this chart creates. */}}
{{- define "fleet-manager.labels" -}}
app.kubernetes.io/name: fleet-manager
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* Labels that select the fleet-manager pods. */}}
{{- define "fleet-manager.selectorLabels" -}}
app.kubernetes.io/name: fleet-manager
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The user the fleet-manager's ServiceAccount is to the apiserver. */}}
{{- define "fleet-manager.username" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ .Release.Name }}
{{- end }}

{{/* Name of the Secret holding the webhook serving certificate. */}}
{{- define "fleet-manager.webhookCertSecret" -}}
{{- if .Values.webhook.certManager.enabled -}}
{{ .Release.Name }}-webhook-cert
{{- else -}}
{{ required "webhook.certSecret is required when webhook.certManager.enabled is false" .Values.webhook.certSecret }}
{{- end -}}
{{- end }}

{{/* Labels of the dashboard's objects; its pods are not the manager's. */}}
{{- define "fleet-manager.dashboardLabels" -}}
{{ include "fleet-manager.dashboardSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* Labels that select the dashboard's pods. */}}
{{- define "fleet-manager.dashboardSelectorLabels" -}}
app.kubernetes.io/name: fleet-manager-dashboard
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* How a ServiceMonitor endpoint reaches the metrics: with metrics.secure,
https, authenticated by the bearer token of Prometheus's own ServiceAccount,
the certificate checked as metrics.serviceMonitor.tlsConfig says (skipped when
that is empty: the default certificate is self-signed, new at each start). */}}
{{- define "fleet-manager.metricsEndpointAuth" -}}
{{- if .Values.metrics.secure -}}
scheme: https
bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
tlsConfig:
  {{- toYaml (.Values.metrics.serviceMonitor.tlsConfig | default (dict "insecureSkipVerify" true)) | nindent 2 }}
{{- else -}}
scheme: http
{{- end -}}
{{- end }}

{{/* The Pod security context of every Pod the chart runs: non-root (the
images' user 65532) under the runtime's default seccomp profile. */}}
{{- define "fleet-manager.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The security context of every container the chart runs: no privilege
escalation, a read-only root filesystem, no capabilities. */}}
{{- define "fleet-manager.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}
