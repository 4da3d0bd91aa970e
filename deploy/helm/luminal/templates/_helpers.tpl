{{/* <release>-luminal, or the release name when it already says luminal; at most 63 characters. */}}
{{- define "luminal.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "luminal.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "luminal.labels" -}}
{{ include "luminal.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: luminal
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "luminal.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The image of GPU deployments' workers: the platform's wheel with CuPy on CUDA. */}}
{{- define "luminal.gpuWorkerImage" -}}
{{ .Values.gpuWorkerImage.repository }}:{{ .Values.gpuWorkerImage.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret of the shared service URLs: gateway and workers read it. */}}
{{- define "luminal.servicesSecret" -}}
{{- .Values.secrets.existingServicesSecret | default (printf "%s-services" (include "luminal.fullname" .)) -}}
{{- end -}}

{{/* The Secret of the gateway's keys and tokens: workers never read it. */}}
{{- define "luminal.keysSecret" -}}
{{- printf "%s-keys" (include "luminal.fullname" .) -}}
{{- end -}}

{{- define "luminal.serviceAccount" -}}
{{- .Values.provisioner.serviceAccount.name | default (printf "%s-provisioner" (include "luminal.fullname" .)) -}}
{{- end -}}

{{/* Settings every Luminal process of the release shares (the URLs come from the services Secret). */}}
{{- define "luminal.commonEnv" -}}
- name: LUMINAL_QUEUE_NAMESPACE
  value: {{ .Values.externalServices.redis.namespace | quote }}
- name: LUMINAL_DATA_DIR
  value: /var/lib/luminal
{{- end -}}

{{/* Containers run as an unprivileged user on a read-only root; state goes to the data volume. */}}
{{- define "luminal.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 10001
capabilities:
  drop: [ALL]
{{- end -}}
