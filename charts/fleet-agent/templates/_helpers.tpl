{{/* Common labels of every object this chart creates. */}}
{{- define "fleet-agent.labels" -}}
app.kubernetes.io/name: fleet-agent
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* Labels that select the fleet-agent pods. */}}
{{- define "fleet-agent.selectorLabels" -}}
app.kubernetes.io/name: fleet-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The tenants this cluster registers into, as a JSON list: the top-level values
first, then .Values.tenants, each with the top-level url, caBundle and
clusterName filled in where unset and its downstream namespace resolved.
A downstream namespace equal to the release namespace fails the release: a
tenant's syncs and bindings could reach the other tenants' credentials there.
*/}}
{{- define "fleet-agent.tenants" -}}
{{- $primary := dict "token" .Values.token "management" .Values.management "labels" .Values.labels "namespace" .Values.namespace "clusterName" .Values.clusterName -}}
{{- $out := list -}}
{{- range prepend .Values.tenants $primary -}}
{{- $m := .management | default dict -}}
{{- $namespace := .namespace | default $m.namespace -}}
{{- if eq $namespace $.Release.Namespace -}}
{{- fail (printf "tenant %s: its downstream namespace %s is the release namespace, where the agent keeps every tenant's credential and token Secrets; give the tenant a namespace of its own (namespace, or tenants[].namespace)" $m.namespace $namespace) -}}
{{- end -}}
{{- $out = append $out (dict
  "name" $m.namespace
  "token" .token
  "url" ($m.url | default $.Values.management.url)
  "caBundle" ($m.caBundle | default $.Values.management.caBundle)
  "managementNamespace" $m.namespace
  "clusterName" (.clusterName | default $.Values.clusterName)
  "labels" (.labels | default dict)
  "namespace" $namespace
) -}}
{{- end -}}
{{- toJson $out -}}
{{- end }}

{{/* The tenants' downstream namespaces, sorted and unique, comma-separated. */}}
{{- define "fleet-agent.namespaces" -}}
{{- $ns := list -}}
{{- range include "fleet-agent.tenants" . | fromJsonArray -}}
{{- $ns = append $ns .namespace -}}
{{- end -}}
{{- $ns | uniq | sortAlpha | join "," -}}
{{- end }}

{{/* How a ServiceMonitor endpoint reaches the metrics: with metrics.secure,
https, authenticated by the bearer token of Prometheus's own ServiceAccount,
the certificate checked as metrics.serviceMonitor.tlsConfig says (skipped when
that is empty: the default certificate is self-signed, new at each start). */}}
{{- define "fleet-agent.metricsEndpointAuth" -}}
{{- if .Values.metrics.secure -}}
scheme: https
bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
tlsConfig:
  {{- toYaml (.Values.metrics.serviceMonitor.tlsConfig | default (dict "insecureSkipVerify" true)) | nindent 2 }}
{{- else -}}
scheme: http
{{- end -}}
{{- end }}
