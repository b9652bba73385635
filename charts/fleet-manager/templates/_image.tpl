{{/*
The container image. With image.digest the reference is repository:tag@digest:
the runtime pulls exactly that digest, and the tag stays for whoever reads it.
*/}}
{{- define "fleet-manager.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}
