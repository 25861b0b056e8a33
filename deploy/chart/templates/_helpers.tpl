{{/* The image reference of both workloads. */}}
{{- define "capstan.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* Labels of the object named by the argument. */}}
{{- define "capstan.labels" -}}
app.kubernetes.io/name: {{ . }}
app.kubernetes.io/part-of: capstan
{{- end -}}

{{/* The container settings both workloads share: non-root, read-only root file system, no
privilege escalation, no capabilities, the runtime's seccomp profile, scratch space in emptyDirs.
Argument: a dict with name, root (the chart's context), args, port, resources. */}}
{{- define "capstan.container" -}}
- name: {{ .name }}
  image: {{ include "capstan.image" .root }}
  imagePullPolicy: {{ .root.Values.image.pullPolicy }}
  args:
    {{- toYaml .args | nindent 4 }}
  env:
    - name: CAPSTAN_CACHE
      value: /var/cache/capstan
    - name: HOME
      value: /var/cache/capstan
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
  ports:
    - name: http
      containerPort: {{ .port }}
      protocol: TCP
  livenessProbe:
    httpGet:
      path: /healthz
      port: http
    periodSeconds: 10
    timeoutSeconds: 5
    failureThreshold: 6
  readinessProbe:
    httpGet:
      path: /readyz
      port: http
    periodSeconds: 5
    timeoutSeconds: 5
  resources:
    {{- toYaml .resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    - name: cache
      mountPath: /var/cache/capstan
    - name: tmp
      mountPath: /tmp
{{- end -}}

{{/* The Pod settings both workloads share. Argument: the workload's name. */}}
{{- define "capstan.podSpec" -}}
serviceAccountName: {{ . }}
automountServiceAccountToken: true
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  fsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
terminationGracePeriodSeconds: 30
volumes:
  - name: cache
    emptyDir:
      sizeLimit: 4Gi
  - name: tmp
    emptyDir:
      sizeLimit: 1Gi
{{- end -}}

{{/* The name of a ClusterRoleBinding of the role given: the role's own name in the namespace
`capstan`, suffixed with the namespace in any other (installations into several namespaces share
the ClusterRoles, not the bindings). Argument: (list $ "role-name"). */}}
{{- define "capstan.clusterBindingName" -}}
{{- $root := index . 0 -}}
{{- $role := index . 1 -}}
{{- if eq $root.Release.Namespace "capstan" -}}
{{ $role }}
{{- else -}}
{{ $role }}-{{ $root.Release.Namespace }}
{{- end -}}
{{- end -}}
