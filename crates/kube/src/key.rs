//! The identity of an object: group, kind, namespace and name.

use std::fmt;

use serde_json::Value;

use crate::{KubeError, Result};

/// Identifies one object in one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// API group (empty for the core group).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// The key of a manifest. `generateName` objects get `name` = the prefix (hooks only).
    pub fn of(obj: &Value) -> Result<ObjectKey> {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let meta = obj.get("metadata");
        let name = meta
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .or_else(|| meta.and_then(|m| m.get("generateName")).and_then(Value::as_str))
            .unwrap_or("");
        if api_version.is_empty() || kind.is_empty() || name.is_empty() {
            return Err(KubeError::InvalidObject {
                what: format!("{kind}/{name}"),
                message: "apiVersion, kind and metadata.name (or generateName) are required".into(),
            });
        }
        let namespace = meta
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .unwrap_or("");
        Ok(ObjectKey {
            group: group_of(api_version).to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    /// Parse `group/kind/namespace/name` (the form used by `--resource` selections).
    pub fn parse(text: &str) -> Option<ObjectKey> {
        let parts: Vec<&str> = text.split('/').collect();
        match parts.as_slice() {
            [group, kind, namespace, name] => Some(ObjectKey {
                group: (*group).into(),
                kind: (*kind).into(),
                namespace: (*namespace).into(),
                name: (*name).into(),
            }),
            _ => None,
        }
    }
}

/// The group part of an apiVersion (`apps/v1` → `apps`, `v1` → ``).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}/{}", self.group, self.kind, self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_of_core_grouped_and_cluster_scoped_objects() {
        let k = ObjectKey::of(
            &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "prod"}}),
        )
        .expect("key");
        assert_eq!(k.to_string(), "apps/Deployment/prod/web");
        let k = ObjectKey::of(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}))
            .expect("key");
        assert_eq!(k.to_string(), "/Namespace//prod");
        assert_eq!(ObjectKey::parse(&k.to_string()), Some(k));
        assert!(ObjectKey::of(&json!({"kind": "ConfigMap", "metadata": {"name": "x"}})).is_err());
    }
}
