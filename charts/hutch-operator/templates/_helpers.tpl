{{- define "hutch-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hutch-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else if hasPrefix .Release.Name .Chart.Name -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hutch-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hutch-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hutch-operator.labels" -}}
{{ include "hutch-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hutch
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "hutch-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hutch-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The least-privilege rules of docs/contracts/operator.md#rbac; shared by the ClusterRole and each Role. */}}
{{- define "hutch-operator.rules" -}}
- apiGroups: [hutch.dev]
  resources: [brokers, queues, exchanges, bindings, policies, operatorpolicies, vhosts, users, permissions, topicpermissions]
  verbs: [get, list, watch, patch]
- apiGroups: [hutch.dev]
  resources: [brokers/status, queues/status, exchanges/status, bindings/status, policies/status, operatorpolicies/status, vhosts/status, users/status, permissions/status, topicpermissions/status]
  verbs: [get, patch]
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  verbs: [get, list, watch, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch]
- apiGroups: [""]
  resources: [configmaps, services]
  verbs: [get, create, patch]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, delete]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch]
{{- end -}}
