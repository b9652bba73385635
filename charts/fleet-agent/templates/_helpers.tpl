{{/* Common labels of every object this chart creates. */}}
{{- define "fleet-agent.labels" -}}
app.kubernetes.io/name: fleet-agent
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- /* helm-controller appends +<digest> to the version of a chart it pulls from OCI; + is no label character. */}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the fleet-agent pods. */}}
{{- define "fleet-agent.selectorLabels" -}}
app.kubernetes.io/name: fleet-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The values an enrolment string carries, as JSON: `fleeet1.` and then base64
JSON of {token, management: {url, namespace, caBundle}}, as `fleetctl token
create` prints it. A bare bearer token (no `fleeet1.` prefix) carries only
itself. A damaged string fails the release saying what is wrong, never
quoting the string: it holds the bearer token.
*/}}
{{- define "fleet-agent.enrolment" -}}
{{- $token := .token | default "" -}}
{{- if not (hasPrefix "fleeet1." $token) -}}
{{- toJson (dict "token" $token "management" dict) -}}
{{- else -}}
{{- $raw := trimPrefix "fleeet1." $token -}}
{{- if not (regexMatch "^[A-Za-z0-9+/]+={0,2}$" $raw) -}}
{{- fail (printf "%s: not a whole enrolment string: after fleeet1. it must be base64, and it is not; copy the whole string fleetctl token create printed" .field) -}}
{{- end -}}
{{- $json := $raw | b64dec -}}
{{- if hasPrefix "illegal base64" $json -}}
{{- fail (printf "%s: the enrolment string is cut short (its base64 ends mid-way); copy the whole string fleetctl token create printed" .field) -}}
{{- end -}}
{{- $e := $json | fromJson -}}
{{- if hasKey $e "Error" -}}
{{- fail (printf "%s: the enrolment string is cut short or damaged (what it carries does not parse); copy the whole string fleetctl token create printed" .field) -}}
{{- end -}}
{{- $m := $e.management | default dict -}}
{{- range $key := list "url" "namespace" -}}
{{- if not (get $m $key) -}}
{{- fail (printf "%s: the enrolment string carries no management.%s; create the token again with fleetctl token create" $.field $key) -}}
{{- end -}}
{{- end -}}
{{- if not $e.token -}}
{{- fail (printf "%s: the enrolment string carries no bearer token; create the token again with fleetctl token create" .field) -}}
{{- end -}}
{{- toJson $e -}}
{{- end -}}
{{- end }}

{{/*
The name of this cluster's Remotes when clusterName is unset: cluster- and the
UID of the kube-system namespace, stable for the life of the cluster and
unique across clusters. It is looked up at install, so helm template and
--dry-run=client, which cannot look it up, need clusterName set.
*/}}
{{- define "fleet-agent.defaultClusterName" -}}
{{- $uid := dig "metadata" "uid" "" (lookup "v1" "Namespace" "" "kube-system") -}}
{{- if not $uid -}}
{{- fail "clusterName: not set, and the kube-system namespace cannot be read to name this cluster after its UID (helm template and --dry-run=client cannot look it up); set clusterName" -}}
{{- end -}}
{{- printf "cluster-%s" $uid -}}
{{- end }}

{{/*
The tenants this cluster registers into, as a JSON list: the top-level values
first, then .Values.tenants. A tenant's own values win; what it leaves unset
comes from its token's enrolment string, then from the top-level values (and
the top-level token's enrolment string). Its downstream namespace is resolved.
A downstream namespace equal to the release namespace fails the release: a
tenant's syncs and bindings could reach the other tenants' credentials there.
*/}}
{{- define "fleet-agent.tenants" -}}
{{- $top := include "fleet-agent.enrolment" (dict "token" .Values.token "field" "token") | fromJson -}}
{{- $topM := merge (deepCopy .Values.management) $top.management -}}
{{- $primary := dict "token" .Values.token "management" .Values.management "labels" .Values.labels "namespace" .Values.namespace "clusterName" .Values.clusterName "field" "token" -}}
{{- $out := list -}}
{{- range $i, $t := prepend .Values.tenants $primary -}}
{{- $field := $t.field | default (printf "tenants[%d].token" (sub $i 1)) -}}
{{- $e := include "fleet-agent.enrolment" (dict "token" $t.token "field" $field) | fromJson -}}
{{- $m := merge (deepCopy ($t.management | default dict)) $e.management $topM -}}
{{- if not $m.url -}}
{{- fail (printf "%s: a bare registration token needs management.url; pass the enrolment string fleetctl token create prints, which carries it" $field) -}}
{{- end -}}
{{- if not $m.namespace -}}
{{- fail (printf "%s: a bare registration token needs management.namespace; pass the enrolment string fleetctl token create prints, which carries it" $field) -}}
{{- end -}}
{{- $namespace := $t.namespace | default $m.namespace -}}
{{- if eq $namespace $.Release.Namespace -}}
{{- fail (printf "tenant %s: its downstream namespace %s is the release namespace, where the agent keeps every tenant's credential and token Secrets; give the tenant a namespace of its own (namespace, or tenants[].namespace)" $m.namespace $namespace) -}}
{{- end -}}
{{- $clusterName := $t.clusterName | default $.Values.clusterName -}}
{{- if not $clusterName -}}
{{- $clusterName = include "fleet-agent.defaultClusterName" $ -}}
{{- end -}}
{{- $out = append $out (dict
  "name" $m.namespace
  "token" $e.token
  "url" $m.url
  "caBundle" ($m.caBundle | default "")
  "recoveryURL" ($m.recoveryURL | default "")
  "recoveryCABundle" ($m.recoveryCABundle | default "")
  "managementNamespace" $m.namespace
  "clusterName" $clusterName
  "labels" ($t.labels | default dict)
  "namespace" $namespace
) -}}
{{- end -}}
{{- toJson $out -}}
{{- end }}

{{/*
The tenants whose plans the fleet-manager pushes here (push mode), as a JSON
list of {namespace, labels, clusterName}: the top-level values first, then
.Values.tenants. The manager writes a tenant's Assemblage into the namespace
named after its management namespace, so that is the downstream namespace;
a different one, a token, or the release namespace (which holds the push
identity's token Secret) fails the release.
*/}}
{{- define "fleet-agent.pushTenants" -}}
{{- $primary := dict "token" .Values.token "management" .Values.management "labels" .Values.labels "namespace" .Values.namespace "clusterName" .Values.clusterName -}}
{{- $out := list -}}
{{- range $i, $t := prepend .Values.tenants $primary -}}
{{- $field := ternary "" (printf "tenants[%d]." (sub $i 1)) (eq $i 0) -}}
{{- if $t.token -}}
{{- fail (printf "%stoken: push mode takes no token: the fleet-manager reaches this cluster through the kubeconfig the release notes show how to make; unset it, or install with mode=pull" $field) -}}
{{- end -}}
{{- $namespace := dig "namespace" "" ($t.management | default dict) -}}
{{- if not $namespace -}}
{{- fail (printf "%smanagement.namespace: required in push mode: the tenant namespace in the management cluster whose plans the fleet-manager pushes here, into the namespace of the same name" $field) -}}
{{- end -}}
{{- if and $t.namespace (ne $t.namespace $namespace) -}}
{{- fail (printf "%snamespace: push mode writes tenant %s's Assemblage into the namespace of the same name, not %s; leave it unset" $field $namespace $t.namespace) -}}
{{- end -}}
{{- if eq $namespace $.Release.Namespace -}}
{{- fail (printf "tenant %s: its downstream namespace is the release namespace, where the chart keeps the push identity's token Secret; install the release into a namespace of its own" $namespace) -}}
{{- end -}}
{{- $out = append $out (dict "namespace" $namespace "labels" ($t.labels | default dict) "clusterName" ($t.clusterName | default $.Values.clusterName)) -}}
{{- end -}}
{{- toJson $out -}}
{{- end }}

{{/*
The values that make this release this cluster's, as YAML, for the upgrade
ConfigMap: each tenant's management API, namespace, Remote name, labels and
downstream namespace as resolved at install (from the enrolment strings and
the kube-system UID), and the chart's tenancy settings. No token: a
registered cluster needs none, and the ConfigMap is no Secret. Everything
else (image, Flux, resources) is the same across a fleet and comes from the
upgrading Module's values or the new chart's defaults.
*/}}
{{- define "fleet-agent.clusterValues" -}}
{{- $out := list -}}
{{- if eq .Values.mode "push" -}}
{{- range include "fleet-agent.pushTenants" . | fromJsonArray -}}
{{- $t := dict "management" (dict "namespace" .namespace) "labels" .labels -}}
{{- with .clusterName }}{{ $_ := set $t "clusterName" . }}{{ end -}}
{{- $out = append $out $t -}}
{{- end -}}
{{- else -}}
{{- range include "fleet-agent.tenants" . | fromJsonArray -}}
{{- $m := dict "url" .url "namespace" .managementNamespace -}}
{{- with .caBundle }}{{ $_ := set $m "caBundle" . }}{{ end -}}
{{- with .recoveryURL }}{{ $_ := set $m "recoveryURL" . }}{{ end -}}
{{- with .recoveryCABundle }}{{ $_ := set $m "recoveryCABundle" . }}{{ end -}}
{{- $out = append $out (dict "management" $m "clusterName" .clusterName "labels" .labels "namespace" .namespace) -}}
{{- end -}}
{{- end -}}
{{- $values := merge (first $out) (pick .Values "mode" "createNamespaces" "tenantServiceAccount" "upgrade") -}}
{{- $_ := set $values "tenants" (rest $out) -}}
{{- toYaml $values -}}
{{- end }}

{{/* The tenants' downstream namespaces, sorted and unique, comma-separated. */}}
{{- define "fleet-agent.namespaces" -}}
{{- $ns := list -}}
{{- $tenants := ternary "fleet-agent.pushTenants" "fleet-agent.tenants" (eq .Values.mode "push") -}}
{{- range include $tenants . | fromJsonArray -}}
{{- $ns = append $ns .namespace -}}
{{- end -}}
{{- $ns | uniq | sortAlpha | join "," -}}
{{- end }}

{{/*
The Remote name the release notes suggest for this cluster in push mode:
clusterName, else cluster-<kube-system UID> where it can be looked up, else a
placeholder to fill in.
*/}}
{{- define "fleet-agent.pushClusterName" -}}
{{- $uid := dig "metadata" "uid" "" (lookup "v1" "Namespace" "" "kube-system") -}}
{{- .clusterName | default (ternary (printf "cluster-%s" $uid) "<cluster-name>" (ne $uid "")) -}}
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

{{/* The Pod security context of every Pod the chart runs: non-root (the
images' user 65532) under the runtime's default seccomp profile. */}}
{{- define "fleet-agent.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The security context of every container the chart runs: no privilege
escalation, a read-only root filesystem, no capabilities. */}}
{{- define "fleet-agent.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}

{{/*
The Secrets the agent keeps in its own namespace (pull mode), as a JSON list:
each Upstream's credential Secret, `<upstream>-credential`, and, while the
values carry the tenant's token, its registration token Secret. They are all
it reads or writes there, by name; in push mode there are none.
*/}}
{{- define "fleet-agent.ownSecrets" -}}
{{- $names := list -}}
{{- if ne .Values.mode "push" -}}
{{- range include "fleet-agent.tenants" . | fromJsonArray -}}
{{- $names = append $names (printf "%s-credential" .name) -}}
{{- if .token -}}
{{- $names = append $names (printf "%s-%s-token" $.Release.Name .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $names -}}
{{- end }}
