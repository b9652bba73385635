{{/*
The controllers this release runs, as a JSON list of names. A controller runs
unless its main CRD exists without this chart's label
(fleeet.dev/installed-by: fleet-agent): such a CRD belongs to a Flux installed
some other way, whose controller the agent then uses. helm install creates the
chart's crds/ before it renders the templates (and leaves a CRD that exists
alone), so on a cluster without Flux the look-ups find this chart's own CRDs;
helm template, which cannot look anything up, renders every controller.
*/}}
{{- define "flux.controllers" -}}
{{- $run := list -}}
{{- range $name, $crd := include "flux.mainCRDs" . | fromJson -}}
{{- $found := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" $crd -}}
{{- if or (not $found) (eq (dig "metadata" "labels" "fleeet.dev/installed-by" "" $found) "fleet-agent") -}}
{{- $run = append $run $name -}}
{{- end -}}
{{- end -}}
{{- toJson $run -}}
{{- end }}

{{/* Each controller's main CRD, whose owner says whose controller runs. */}}
{{- define "flux.mainCRDs" -}}
{{- toJson (dict
  "source-controller" "gitrepositories.source.toolkit.fluxcd.io"
  "kustomize-controller" "kustomizations.kustomize.toolkit.fluxcd.io"
  "helm-controller" "helmreleases.helm.toolkit.fluxcd.io") -}}
{{- end }}

{{/* Each controller's block of values. */}}
{{- define "flux.valuesKey" -}}
{{- get (dict "source-controller" "sourceController" "kustomize-controller" "kustomizeController" "helm-controller" "helmController") . -}}
{{- end }}

{{/* Labels of a controller's objects: {top, name, version}. */}}
{{- define "flux.labels" -}}
{{ include "flux.selectorLabels" . }}
app.kubernetes.io/part-of: flux
app.kubernetes.io/component: {{ .name }}
app.kubernetes.io/version: {{ .version | quote }}
app.kubernetes.io/managed-by: {{ .top.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .top.Chart.Name .top.Chart.Version }}
{{- end }}

{{/* Labels that select a controller's pods: {top, name}. */}}
{{- define "flux.selectorLabels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .top.Release.Name }}
{{- end }}
