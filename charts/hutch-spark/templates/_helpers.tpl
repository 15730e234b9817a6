{{/* The object name: the release name, trimmed to what Spark allows in pod names. */}}
{{- define "hutch-spark.name" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "hutch-spark.labels" -}}
app.kubernetes.io/name: hutch-spark
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
hutch.dev/broker: {{ required "broker.name is required" .Values.broker.name }}
{{- end -}}

{{- define "hutch-spark.brokerNamespace" -}}
{{- .Values.broker.namespace | default .Release.Namespace -}}
{{- end -}}

{{/* amqp://<broker>.<ns>.svc.<domain>:5672/<vhost>; credentials come from the Secret. */}}
{{- define "hutch-spark.amqpUri" -}}
{{- $b := .Values.broker -}}
{{- printf "amqp://%s.%s.svc.%s:%d/%s" $b.name (include "hutch-spark.brokerNamespace" .) $b.clusterDomain (int $b.amqpPort) ($b.vhost | urlquery) -}}
{{- end -}}

{{- define "hutch-spark.secret" -}}
{{- .Values.broker.credentialsSecret | default (printf "%s-default-user" .Values.broker.name) -}}
{{- end -}}

{{- define "hutch-spark.claim" -}}
{{- .Values.checkpoint.existingClaim | default (printf "%s-checkpoint" (include "hutch-spark.name" .)) -}}
{{- end -}}
