{{/*
Names, labels and the pieces every pod shares. The services are rendered from one template
(services.yaml) by ranging over "queueflow.services"; each gets a dict with its name and values.
*/}}

{{- define "queueflow.services" -}}
api janitor workflow worker pusher
{{- end }}

{{/* Each service's pool ceiling when neither its maxDbConnections nor config's is set. */}}
{{- define "queueflow.poolSizes" -}}
api: 10
janitor: 4
workflow: 9
worker: 12
pusher: 6
{{- end }}

{{- define "queueflow.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release "queueflow" (or any name containing the chart's) gives queueflow-api, ... */}}
{{- define "queueflow.fullname" -}}
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

{{- define "queueflow.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of the whole release; a component's add app.kubernetes.io/component. */}}
{{- define "queueflow.selectorLabels" -}}
app.kubernetes.io/name: {{ include "queueflow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "queueflow.labels" -}}
helm.sh/chart: {{ include "queueflow.chart" . }}
{{ include "queueflow.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: queueflow
{{- end }}

{{- define "queueflow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "queueflow.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "queueflow.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
The Secret the chart renders when database.existingSecret or auth.existingSecret is empty. Not
the fullname: with the default release name that is "queueflow", the existing Secret's default.
*/}}
{{- define "queueflow.chartSecretName" -}}
{{- include "queueflow.fullname" . }}-credentials
{{- end }}

{{/* "true" when the chart's Secret has something to hold (the api's credentials only with an api). */}}
{{- define "queueflow.renderSecret" -}}
{{- if or (not .Values.database.existingSecret) (and .Values.api.enabled (not .Values.auth.existingSecret)) }}true{{ end }}
{{- end }}

{{/* DATABASE_URL from the existing Secret or the chart's. */}}
{{- define "queueflow.databaseUrlEnv" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- if .Values.database.existingSecret }}
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.existingSecretKey }}
      {{- else }}
      name: {{ include "queueflow.chartSecretName" . }}
      key: DATABASE_URL
      {{- end }}
{{- end }}

{{/*
The api's credentials. From an existing Secret every key but the worker token is optional (the
chart cannot know which of API keys and JWT secret it holds); from the chart's Secret only the
keys that were given are referenced. The OIDC client's secret only with single sign-on on.
*/}}
{{- define "queueflow.authEnv" -}}
{{- $auth := .Values.auth }}
{{- if $auth.existingSecret }}
- name: QUEUEFLOW_WORKER_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $auth.existingSecret }}
      key: {{ $auth.existingSecretKeys.workerToken }}
- name: QUEUEFLOW_API_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ $auth.existingSecret }}
      key: {{ $auth.existingSecretKeys.apiKeys }}
      optional: true
- name: QUEUEFLOW_JWT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $auth.existingSecret }}
      key: {{ $auth.existingSecretKeys.jwtSecret }}
      optional: true
{{- else }}
{{- $secret := include "queueflow.chartSecretName" . }}
- name: QUEUEFLOW_WORKER_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: QUEUEFLOW_WORKER_TOKEN
{{- if $auth.apiKeys }}
- name: QUEUEFLOW_API_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: QUEUEFLOW_API_KEYS
{{- end }}
{{- if $auth.jwtSecret }}
- name: QUEUEFLOW_JWT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: QUEUEFLOW_JWT_SECRET
{{- end }}
{{- end }}
{{- if include "queueflow.oidcEnabled" . }}
{{- if $auth.existingSecret }}
{{- /* Optional: a public client has no secret. */}}
- name: QUEUEFLOW_OIDC_CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $auth.existingSecret }}
      key: {{ $auth.existingSecretKeys.oidcClientSecret }}
      optional: true
{{- else if $auth.oidcClientSecret }}
- name: QUEUEFLOW_OIDC_CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ include "queueflow.chartSecretName" . }}
      key: QUEUEFLOW_OIDC_CLIENT_SECRET
{{- end }}
{{- end }}
{{- end }}

{{/* "true" when single sign-on is on and there is an api to use it. */}}
{{- define "queueflow.oidcEnabled" -}}
{{- if and .Values.oidc.enabled .Values.api.enabled }}true{{ end }}
{{- end }}

{{/*
One egress rule of networkPolicy.egress (database, otlp, oidc) as a NetworkPolicyEgressRule: its
ports (TCP), and its peers (cidrs as ipBlocks, then `to`) when any; none: any address.
*/}}
{{- define "queueflow.egressRule" -}}
{{- $ports := list }}
{{- range .ports }}{{ $ports = append $ports (dict "port" (int .) "protocol" "TCP") }}{{ end }}
{{- $peers := list }}
{{- range .cidrs }}{{ $peers = append $peers (dict "ipBlock" (dict "cidr" .)) }}{{ end }}
{{- $peers = concat $peers (.to | default list) }}
{{- $rule := dict "ports" $ports }}
{{- with $peers }}{{ $_ := set $rule "to" . }}{{ end }}
{{- toYaml $rule }}
{{- end }}

{{/* Fail early on values that would render pods the server refuses to run. */}}
{{- define "queueflow.validate" -}}
{{- if and (not .Values.database.existingSecret) (not .Values.database.url) }}
{{- fail "database: set existingSecret (a Secret holding the URL) or url" }}
{{- end }}
{{- if and .Values.api.enabled (not .Values.auth.existingSecret) }}
{{- if not .Values.auth.workerToken }}
{{- fail "auth: set existingSecret, or workerToken (the api refuses to start without one)" }}
{{- end }}
{{- if and (not .Values.auth.apiKeys) (not .Values.auth.jwtSecret) (not .Values.oidc.enabled) }}
{{- fail "auth: set existingSecret, or apiKeys and/or jwtSecret, or enable oidc (the api refuses to start with none)" }}
{{- end }}
{{- end }}
{{- if include "queueflow.oidcEnabled" . }}
{{- range $key := list "issuer" "clientId" }}
{{- if not (index $.Values.oidc $key) }}
{{- fail (printf "oidc.enabled: set oidc.%s (the api refuses to start without it)" $key) }}
{{- end }}
{{- end }}
{{- if not .Values.config.publicUrl }}
{{- fail "oidc.enabled: set config.publicUrl, the URL operators open the console at (the sign-in's redirect is {publicUrl}/ui/auth/callback)" }}
{{- end }}
{{- end }}
{{- range $name := splitList " " (include "queueflow.services" .) }}
{{- $svc := index $.Values $name }}
{{- $pdb := $svc.podDisruptionBudget }}
{{- if and $svc.enabled $pdb.enabled }}
{{- if eq (include "queueflow.isSet" $pdb.minAvailable) (include "queueflow.isSet" $pdb.maxUnavailable) }}
{{- fail (printf "%s.podDisruptionBudget: set exactly one of minAvailable and maxUnavailable (the other \"\")" $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* "true" for a PDB bound that is given: not null and not "" (0 is a value). */}}
{{- define "queueflow.isSet" -}}
{{- if not (or (kindIs "invalid" .) (and (kindIs "string" .) (eq . ""))) }}true{{ end }}
{{- end }}

{{- define "queueflow.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "queueflow.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}
