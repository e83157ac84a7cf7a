{{/*
Chart name, truncated to 63 characters (DNS label limit).
*/}}
{{- define "slice-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name. If the release name already contains the chart name it is used as is.
*/}}
{{- define "slice-operator.fullname" -}}
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

{{/*
Chart name and version, as used by the helm.sh/chart label.
*/}}
{{- define "slice-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "slice-operator.labels" -}}
helm.sh/chart: {{ include "slice-operator.chart" . }}
{{ include "slice-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: slice-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels (immutable once installed).
*/}}
{{- define "slice-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slice-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
ServiceAccount name.
*/}}
{{- define "slice-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "slice-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Container image: repository:tag, tag defaulting to the chart appVersion.
*/}}
{{- define "slice-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Metrics/health listen address.
*/}}
{{- define "slice-operator.metricsAddr" -}}
{{- printf "0.0.0.0:%d" (int .Values.metrics.port) }}
{{- end }}

{{/*
Validate value combinations the JSON schema cannot express clearly.
*/}}
{{- define "slice-operator.validate" -}}
{{- if and .Values.rbac.namespaced (not .Values.watchNamespace) }}
{{- fail "rbac.namespaced=true requires watchNamespace to be set (the namespace whose TrainClusters the operator manages); set --set watchNamespace=<namespace> or rbac.namespaced=false" }}
{{- end }}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicas > 1 requires leaderElection.enabled=true (otherwise several operators would reconcile the same TrainClusters); set replicas=1 or leaderElection.enabled=true" }}
{{- end }}
{{- if and .Values.apiPriority.flowSchemas (eq (include "slice-operator.serviceAccountName" .) "default") }}
{{- fail "apiPriority.flowSchemas=true with the namespace's default ServiceAccount would raise the priority of every pod that runs as it; set serviceAccount.create=true or serviceAccount.name, or apiPriority.flowSchemas=false" }}
{{- end }}
{{- end }}

{{/*
RBAC rules for the objects the operator manages (TrainClusters, pods, services, events).
Exactly the verbs the operator uses; no wildcards.
*/}}
{{- define "slice-operator.workloadRules" -}}
- apiGroups: ["slices.dev"]
  resources: ["trainclusters"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["slices.dev"]
  resources: ["trainclusters/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete", "patch"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
# spec.provisioning.mode Queued: a PodTemplate and a ProvisioningRequest per request.
- apiGroups: [""]
  resources: ["podtemplates"]
  verbs: ["get", "create", "delete"]
- apiGroups: ["autoscaling.x-k8s.io"]
  resources: ["provisioningrequests"]
  verbs: ["get", "list", "create", "delete"]
{{- end }}
