//! Capstan's install source: every object an installation consists of, from one set of
//! [`Values`]. `capstan install` applies them, `capstan install --print` writes them,
//! `deploy/install.yaml` is their output with the default values, and the chart at `deploy/chart`
//! renders the same objects from its values (a test compares the three).
//!
//! Two workloads, each with its own ServiceAccount and roles:
//! - `capstan-controller` syncs Applications. For itself it needs its kinds, Secrets, ConfigMaps,
//!   Events and Leases in its namespace (Role `capstan-controller`); to deploy what Applications
//!   hold it needs every kind everywhere (ClusterRole `capstan-controller-deploy`, as Argo CD's
//!   application controller has). An AppProject narrows what a team may deploy.
//! - `capstan-server` serves the API, the web UI and webhooks. It reads what the UI shows
//!   (ClusterRole `capstan-server`: get, list, watch on every kind, and `patch` for the server-side
//!   dry runs of diffs, as Argo CD's server has) and writes only Capstan's own kinds (and the
//!   operation requests they carry) and its Secret in its namespace (Role `capstan-server`). It
//!   never holds create, delete, escalate, bind or impersonate outside its namespace.

use capstan_api::{GROUP, NAMESPACE};
use serde_json::{Value, json};

/// The controller's name (Deployment, ServiceAccount, roles).
pub const CONTROLLER: &str = "capstan-controller";
/// The server's name (Deployment, ServiceAccount, roles, Service).
pub const SERVER: &str = "capstan-server";
/// The port the server listens on inside its Pod.
pub const SERVER_PORT: u16 = 8080;
/// The port of the controller's health and metrics endpoints inside its Pod.
pub const CONTROLLER_HEALTH_PORT: u16 = 8081;

/// What an installation may vary.
#[derive(Debug, Clone)]
pub struct Values {
    /// Capstan's namespace (its Applications, Secrets and workloads).
    pub namespace: String,
    /// The image both workloads run (`REPOSITORY:TAG` or `REPOSITORY@DIGEST`).
    pub image: String,
    /// Replicas of the server.
    pub server_replicas: u32,
    /// Replicas of the controller (they share the Applications through Leases).
    pub controller_replicas: u32,
}

impl Default for Values {
    fn default() -> Self {
        Values {
            namespace: NAMESPACE.to_string(),
            image: format!("capstan:{}", env!("CARGO_PKG_VERSION")),
            server_replicas: 2,
            controller_replicas: 1,
        }
    }
}

/// Every object of an installation, in the order they are applied: the namespace, the CRDs, then
/// the rest.
pub fn all(values: &Values) -> Vec<Value> {
    let ns = values.namespace.as_str();
    let mut objects = vec![namespace(ns)];
    for (_, crd) in capstan_api::crd::all() {
        objects.push(serde_json::to_value(crd).unwrap_or(Value::Null));
    }
    objects.extend([
        service_account(ns, CONTROLLER),
        service_account(ns, SERVER),
        role(ns, CONTROLLER, controller_own_rules()),
        role_binding(ns, CONTROLLER),
        cluster_role(
            &format!("{CONTROLLER}-deploy"),
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["get"]},
            ]),
        ),
        cluster_role_binding(ns, &format!("{CONTROLLER}-deploy"), CONTROLLER),
        role(ns, SERVER, server_own_rules()),
        role_binding(ns, SERVER),
        cluster_role(
            SERVER,
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch", "patch"]}]),
        ),
        cluster_role_binding(ns, SERVER, SERVER),
        controller_deployment(values),
        server_deployment(values),
        server_service(ns),
        pod_disruption_budget(ns, SERVER),
        network_policy(
            ns,
            SERVER,
            json!([{"ports": [{"protocol": "TCP", "port": SERVER_PORT}]}]),
        ),
        network_policy(
            ns,
            CONTROLLER,
            json!([{"ports": [{"protocol": "TCP", "port": CONTROLLER_HEALTH_PORT}]}]),
        ),
    ]);
    objects
}

/// The objects as one YAML stream (`---` before each document). A long one-line string (an image
/// pinned to its digest, say) stays on its line: folded (`>-`), it would be hard to find and edit
/// in Git, where a bootstrapped hub keeps these objects.
pub fn to_yaml(objects: &[Value]) -> Result<String, serde_saphyr::SerializeError> {
    let mut options = serde_saphyr::SerializerOptions::default();
    options.folded_wrap_chars = usize::MAX;
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string_with_options(object, options.clone())?);
    }
    Ok(out)
}

fn labels(name: &str) -> Value {
    json!({"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "capstan"})
}

fn namespace(ns: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": ns, "labels": {"app.kubernetes.io/part-of": "capstan"}},
    })
}

fn service_account(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": ns, "labels": labels(name)},
    })
}

const CAPSTAN_KINDS: [&str; 14] = [
    "applications",
    "applications/status",
    "applicationsets",
    "applicationsets/status",
    "appprojects",
    "imageupdaters",
    "imageupdaters/status",
    "promotionpipelines",
    "promotionpipelines/status",
    "appprojects/status",
    "policies",
    "policies/status",
    "notificationchannels",
    "notificationchannels/status",
];

const ALL_VERBS: [&str; 7] = ["get", "list", "watch", "create", "update", "patch", "delete"];

/// What the controller needs for itself, in its namespace.
fn controller_own_rules() -> Value {
    json!([
        {"apiGroups": [GROUP], "resources": CAPSTAN_KINDS, "verbs": ALL_VERBS},
        {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ALL_VERBS},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ALL_VERBS},
    ])
}

/// What the server writes, in its namespace: Capstan's kinds (operation requests are annotations
/// on Applications), its Secret (accounts), Events of what users asked for.
fn server_own_rules() -> Value {
    json!([
        {"apiGroups": [GROUP], "resources": CAPSTAN_KINDS, "verbs": ALL_VERBS},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch", "create", "update", "patch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
    ])
}

fn role(ns: &str, name: &str, rules: Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": ns, "labels": labels(name)},
        "rules": rules,
    })
}

/// Binds the Role `name` to the ServiceAccount of the same name.
fn role_binding(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns, "labels": labels(name)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
    })
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels(name)},
        "rules": rules,
    })
}

/// Binds the ClusterRole `role` to the ServiceAccount `account` of `ns`. The binding is named after
/// the role in Capstan's default namespace, and after the role and the namespace in any other, so
/// that installations into several namespaces of one cluster do not take it from each other (the
/// ClusterRoles themselves are the same for all).
fn cluster_role_binding(ns: &str, role: &str, account: &str) -> Value {
    let name = if ns == NAMESPACE {
        role.to_string()
    } else {
        format!("{role}-{ns}")
    };
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": labels(role)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
    })
}

/// The container settings both workloads share: non-root, read-only root file system, no
/// privilege escalation, every capability dropped, the runtime's default seccomp profile; scratch
/// space (Git caches, renders) in an `emptyDir` at `/var/cache/capstan`.
fn container(name: &str, values: &Values, args: Value, port: u16, resources: Value) -> Value {
    json!({
        "name": name,
        "image": values.image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "env": [
            {"name": "CAPSTAN_CACHE", "value": "/var/cache/capstan"},
            {"name": "HOME", "value": "/var/cache/capstan"},
            // The controller's replica identity (its Lease); the server does not use it.
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "http"},
            "periodSeconds": 5, "timeoutSeconds": 5,
        },
        "resources": resources,
        "securityContext": {
            "runAsNonRoot": true,
            "readOnlyRootFilesystem": true,
            "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "cache", "mountPath": "/var/cache/capstan"},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    })
}

fn deployment(ns: &str, name: &str, replicas: u32, container: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels(name)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {
                "metadata": {"labels": labels(name)},
                "spec": {
                    "serviceAccountName": name,
                    "automountServiceAccountToken": true,
                    "securityContext": {
                        "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                    "volumes": [
                        {"name": "cache", "emptyDir": {"sizeLimit": "4Gi"}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                    ],
                },
            },
        },
    })
}

fn controller_deployment(values: &Values) -> Value {
    let args = json!([
        "controller",
        "--namespace",
        values.namespace,
        "--health-listen",
        format!("0.0.0.0:{CONTROLLER_HEALTH_PORT}"),
    ]);
    let resources = json!({
        "requests": {"cpu": "250m", "memory": "256Mi"},
        "limits": {"memory": "1Gi"},
    });
    let container = container(CONTROLLER, values, args, CONTROLLER_HEALTH_PORT, resources);
    // Several replicas share the Applications through Leases (docs/replicas.md).
    deployment(&values.namespace, CONTROLLER, values.controller_replicas, container)
}

fn server_deployment(values: &Values) -> Value {
    let args = json!([
        "server",
        "--namespace",
        values.namespace,
        "--listen",
        format!("0.0.0.0:{SERVER_PORT}"),
    ]);
    let resources = json!({
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"memory": "512Mi"},
    });
    let container = container(SERVER, values, args, SERVER_PORT, resources);
    deployment(&values.namespace, SERVER, values.server_replicas, container)
}

fn server_service(ns: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SERVER, "namespace": ns, "labels": labels(SERVER)},
        "spec": {
            "selector": {"app.kubernetes.io/name": SERVER},
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    })
}

fn pod_disruption_budget(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns, "labels": labels(name)},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": name}}},
    })
}

/// Only the workload's own port is open to others; what it calls out to is not restricted (Git
/// hosts, registries and clusters are the users').
fn network_policy(ns: &str, name: &str, ingress: Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": ns, "labels": labels(name)},
        "spec": {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    })
}
