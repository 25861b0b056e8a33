{{/* The name of every object: the release name (the Application's name). */}}
{{- define "service.fullname" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select the Pods: stable across upgrades. */}}
{{- define "service.selectorLabels" -}}
app.kubernetes.io/name: {{ include "service.fullname" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* All labels. */}}
{{- define "service.labels" -}}
{{ include "service.selectorLabels" . }}
app.kubernetes.io/version: {{ regexReplaceAll "[^A-Za-z0-9_.-]" (include "service.tag" .) "-" | trunc 63 | trimAll "-_." | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The image tag: `image.tag`, else the chart's appVersion. */}}
{{- define "service.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion | toString -}}
{{- end -}}
