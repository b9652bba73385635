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
