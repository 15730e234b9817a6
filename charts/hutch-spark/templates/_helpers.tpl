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

{{/* amqp://<broker>.<ns>.svc.<domain>:5672/<vhost>; credentials come from the Secret. With TLS,
     amqps://<broker>.<ns>.svc:5671/<vhost>: the name the operator itself verifies the broker's
     certificate against (docs/operator.md, "TLS"), so any certificate that works for the
     operator works for the job. */}}
{{- define "hutch-spark.amqpUri" -}}
{{- $b := .Values.broker -}}
{{- $ns := include "hutch-spark.brokerNamespace" . -}}
{{- if $b.tls.enabled -}}
{{- printf "amqps://%s.%s.svc:%d/%s" $b.name $ns (int $b.tls.amqpsPort) ($b.vhost | urlquery) -}}
{{- else -}}
{{- printf "amqp://%s.%s.svc.%s:%d/%s" $b.name $ns $b.clusterDomain (int $b.amqpPort) ($b.vhost | urlquery) -}}
{{- end -}}
{{- end -}}

{{/* Required, no default: a job that silently ran as the Broker's administrator could delete
     any queue or vhost on it (docs/spark.md, "Credentials"). */}}
{{- define "hutch-spark.secret" -}}
{{- $b := .Values.broker -}}
{{- if not $b.credentialsSecret -}}
{{- fail (printf "broker.credentialsSecret is required: the Secret <user>-user-credentials of the job's own User CR in namespace %s, with a Permission to read queue %q on vhost %q (examples/spark-user.yaml, docs/spark.md). The administrator's Secret %s-default-user also works if named explicitly, but gives the job every right on the broker" .Release.Namespace (.Values.queue | default "") $b.vhost $b.name) -}}
{{- end -}}
{{- $b.credentialsSecret -}}
{{- end -}}

{{/* The broker's CA certificate, as a file in the Pods (broker.tls). */}}
{{- define "hutch-spark.caFile" -}}
{{- printf "%s/%s" (.Values.broker.tls.mountPath | trimSuffix "/") .Values.broker.tls.caKey -}}
{{- end -}}

{{/* Pod-template volume of the CA: only the CA key of the Secret is projected, because the
     Secret may be the broker's kubernetes.io/tls Secret, whose tls.key must not reach the
     job's Pods (Spark's own spark.kubernetes.*.secrets.* conf would mount every key). */}}
{{- define "hutch-spark.caVolume" -}}
- name: hutch-ca
  secret:
    secretName: {{ required "broker.tls.caSecret is required with broker.tls.enabled: a Secret in the release namespace holding the CA that issued the broker's certificate" .Values.broker.tls.caSecret }}
    items:
      - key: {{ .Values.broker.tls.caKey }}
        path: {{ .Values.broker.tls.caKey }}
{{- end -}}

{{- define "hutch-spark.caMount" -}}
- name: hutch-ca
  mountPath: {{ .Values.broker.tls.mountPath }}
  readOnly: true
{{- end -}}

{{- define "hutch-spark.claim" -}}
{{- .Values.checkpoint.existingClaim | default (printf "%s-checkpoint" (include "hutch-spark.name" .)) -}}
{{- end -}}

{{/* A job of the user's own: its ConfigMap as a Pod-template volume, in the driver and the
     executors (Spark's volume confs take no ConfigMaps; its pod templates keep any volume). */}}
{{- define "hutch-spark.jobVolume" -}}
- name: hutch-user-job
  configMap:
    name: {{ .Values.job.configMap }}
{{- end -}}

{{- define "hutch-spark.jobMount" -}}
- name: hutch-user-job
  mountPath: {{ .Values.job.filesPath }}
  readOnly: true
{{- end -}}
