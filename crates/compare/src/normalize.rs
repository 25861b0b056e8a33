//! Preparing rendered objects for a destination: the destination namespace for namespaced objects
//! that name none, no namespace on cluster-scoped ones, and Capstan's tracking label and annotation.

use capstan_api::labels::TRACKING_LABEL;
use serde_json::{Map, Value};

use capstan_kube::KindInfo;

/// Annotation naming the owning Application as `NAMESPACE/NAME`; the label carries a shortened form.
pub const TRACKING_ANNOTATION: &str = "capstan.dev/tracking-id";

/// Which Application owns an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracking {
    /// Namespace of the Application.
    pub app_namespace: String,
    /// Name of the Application.
    pub app_name: String,
}

impl Tracking {
    /// Tracking for Application `namespace/name`.
    pub fn new(app_namespace: &str, app_name: &str) -> Self {
        Self {
            app_namespace: app_namespace.into(),
            app_name: app_name.into(),
        }
    }

    /// The tracking annotation's value.
    pub fn id(&self) -> String {
        format!("{}/{}", self.app_namespace, self.app_name)
    }

    /// The tracking label's value: the Application's name, or a shortened, hashed form when it is
    /// longer than a label value may be.
    pub fn label_value(&self) -> String {
        label_value(&self.app_name)
    }

    /// The label selector matching this Application's objects.
    pub fn selector(&self) -> String {
        format!("{TRACKING_LABEL}={}", self.label_value())
    }

    /// Whether `obj` is tracked by this Application.
    pub fn owns(&self, obj: &Value) -> bool {
        owner(obj).as_deref() == Some(self.id().as_str())
    }
}

/// The tracking id of the Application that owns `obj`, if any.
pub fn owner(obj: &Value) -> Option<String> {
    obj.get("metadata")?
        .get("annotations")?
        .get(TRACKING_ANNOTATION)?
        .as_str()
        .map(str::to_string)
}

/// A valid label value for `name` (≤ 63 characters).
pub fn label_value(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    let hash = {
        use std::hash::Hasher;
        let mut h = fnv::FnvHasher::default();
        h.write(name.as_bytes());
        h.finish()
    };
    format!("{}-{hash:016x}", name[..46].trim_end_matches(['-', '.', '_']))
}

/// Set namespace and tracking metadata on a rendered object, and drop its `status`.
pub fn prepare(obj: &mut Value, info: &KindInfo, destination_namespace: &str, tracking: &Tracking) {
    default_port_protocols(obj);
    let Some(map) = obj.as_object_mut() else { return };
    map.remove("status");
    let meta = map.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else { return };
    if info.namespaced {
        let has_ns = meta
            .get("namespace")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if !has_ns {
            let ns = if destination_namespace.is_empty() {
                "default"
            } else {
                destination_namespace
            };
            meta.insert("namespace".into(), Value::String(ns.into()));
        }
    } else {
        meta.remove("namespace");
    }
    let labels = meta.entry("labels").or_insert_with(|| Value::Object(Map::new()));
    if !labels.is_object() {
        *labels = Value::Object(Map::new());
    }
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(TRACKING_LABEL.into(), Value::String(tracking.label_value()));
    }
    let annotations = meta.entry("annotations").or_insert_with(|| Value::Object(Map::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(Map::new());
    }
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(TRACKING_ANNOTATION.into(), Value::String(tracking.id()));
    }
}

/// Fill `protocol: TCP` into Service ports and container ports that omit it, as the API server
/// would. Server-side apply in Kubernetes before 1.21 rejects such ports ("associative list with keys
/// has an element that omits key field protocol"), although plain manifests routinely omit it.
pub fn default_port_protocols(obj: &mut Value) {
    let is_service = obj.get("kind").and_then(Value::as_str) == Some("Service");
    if is_service && let Some(ports) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
        fill_protocol(ports);
    }
    walk_containers(obj);
}

fn walk_containers(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if matches!(key.as_str(), "containers" | "initContainers" | "ephemeralContainers")
                    && let Some(containers) = child.as_array_mut()
                {
                    for c in containers {
                        if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                            fill_protocol(ports);
                        }
                    }
                } else {
                    walk_containers(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(walk_containers),
        _ => {}
    }
}

fn fill_protocol(ports: &mut [Value]) {
    for port in ports {
        if let Some(p) = port.as_object_mut() {
            p.entry("protocol").or_insert_with(|| Value::String("TCP".into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::GroupVersionKind;
    use kube::discovery::ApiResource;
    use serde_json::json;

    fn info(namespaced: bool) -> KindInfo {
        KindInfo {
            resource: ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")),
            namespaced,
            status_subresource: None,
        }
    }

    #[test]
    fn defaults_namespace_and_adds_tracking() {
        let t = Tracking::new("capstan", "guestbook");
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "status": {"x": 1}});
        prepare(&mut cm, &info(true), "prod", &t);
        assert_eq!(cm["metadata"]["namespace"], "prod");
        assert_eq!(cm["metadata"]["labels"][TRACKING_LABEL], "guestbook");
        assert_eq!(cm["metadata"]["annotations"][TRACKING_ANNOTATION], "capstan/guestbook");
        assert!(cm.get("status").is_none());
        assert!(t.owns(&cm));
        assert!(!Tracking::new("capstan", "other").owns(&cm));

        let mut explicit =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}});
        prepare(&mut explicit, &info(true), "prod", &t);
        assert_eq!(explicit["metadata"]["namespace"], "x", "an explicit namespace is kept");

        let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "namespace": "junk"}});
        prepare(&mut ns, &info(false), "prod", &t);
        assert!(
            ns["metadata"].get("namespace").is_none(),
            "cluster-scoped objects have no namespace"
        );
    }

    #[test]
    fn ports_get_the_default_protocol() {
        let mut svc = json!({"kind": "Service", "spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}});
        default_port_protocols(&mut svc);
        assert_eq!(svc["spec"]["ports"][0]["protocol"], "TCP");
        assert_eq!(svc["spec"]["ports"][1]["protocol"], "UDP");
        let mut deploy = json!({"kind": "Deployment", "spec": {"template": {"spec": {
            "containers": [{"name": "a", "ports": [{"containerPort": 8080}]}],
            "initContainers": [{"name": "b", "ports": [{"containerPort": 9000}]}]}}}});
        default_port_protocols(&mut deploy);
        assert_eq!(
            deploy.pointer("/spec/template/spec/containers/0/ports/0/protocol"),
            Some(&json!("TCP"))
        );
        assert_eq!(
            deploy.pointer("/spec/template/spec/initContainers/0/ports/0/protocol"),
            Some(&json!("TCP"))
        );
    }

    #[test]
    fn long_names_get_valid_label_values() {
        let long = "a".repeat(100);
        let v = label_value(&long);
        assert!(v.len() <= 63, "{v}");
        assert_ne!(v, label_value(&"a".repeat(101)));
        assert_eq!(label_value("short"), "short");
    }
}
