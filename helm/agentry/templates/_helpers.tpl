{{/* Names and labels. */}}
{{- define "agentry.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agentry.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "agentry.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agentry.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agentry.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "agentry.labels" -}}
helm.sh/chart: {{ include "agentry.chart" . }}
{{ include "agentry.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "agentry.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "agentry.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The chart's own Secret, holding the values given in plain text. */}}
{{- define "agentry.secretName" -}}
{{- include "agentry.fullname" . }}
{{- end }}

{{/* Whether the chart creates its Secret: any secret value given in plain text. */}}
{{- define "agentry.createSecret" -}}
{{- if or .Values.auth.adminKey .Values.externalDatabase.url .Values.externalRedis.url .Values.llm.apiKey .Values.mcp.encryptionKey .Values.metrics.token .Values.otel.headers -}}
true
{{- end }}
{{- end }}

{{/* Whether Redis is configured (by URL or by an existing Secret). */}}
{{- define "agentry.hasRedis" -}}
{{- if or .Values.externalRedis.url .Values.externalRedis.existingSecret -}}
true
{{- end }}
{{- end }}

{{/* Whether an external database is configured. */}}
{{- define "agentry.hasDatabase" -}}
{{- if or .Values.externalDatabase.url .Values.externalDatabase.existingSecret -}}
true
{{- end }}
{{- end }}

{{/* The most replicas that can run at once. */}}
{{- define "agentry.maxReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ .Values.autoscaling.maxReplicas }}{{ else }}{{ .Values.replicaCount }}{{ end }}
{{- end }}

{{/*
Refuse what cannot work: more than one replica needs Redis (sessions are owned through Redis
leases) and a shared database (SQLite lives on one pod's volume).
*/}}
{{- define "agentry.validate" -}}
{{- $max := include "agentry.maxReplicas" . | int }}
{{- if and (gt $max 1) (not (include "agentry.hasRedis" .)) }}
{{- fail (printf "replicaCount/autoscaling.maxReplicas is %d, but more than one replica requires Redis: set externalRedis.url or externalRedis.existingSecret, or run one replica" $max) }}
{{- end }}
{{- if and (gt $max 1) (not (include "agentry.hasDatabase" .)) }}
{{- fail (printf "replicaCount/autoscaling.maxReplicas is %d, but more than one replica requires a shared database: set externalDatabase.url or externalDatabase.existingSecret (PostgreSQL or MySQL)" $max) }}
{{- end }}
{{- end }}

{{/* One secret-backed environment variable: from an existing Secret, else from the chart's. */}}
{{- define "agentry.secretEnv" -}}
{{- $v := index . 0 }}{{- $name := index . 1 }}{{- $chartKey := index . 2 }}{{- $root := index . 3 }}
{{- if $v.existingSecret }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $v.existingSecret }}
      key: {{ $v.existingSecretKey }}
{{- else if index $v $chartKey }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "agentry.secretName" $root }}
      key: {{ $v.existingSecretKey }}
{{- end }}
{{- end }}
