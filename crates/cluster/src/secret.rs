//! The cluster Secret: `name`, `server`, `config` (JSON, see [`ClusterConfig`]), optional
//! `namespaces` (comma separated: Capstan may only manage these) and `clusterResources`
//! (`"true"` lets a namespace-limited cluster manage cluster-scoped objects too). The Secret's
//! labels and annotations are the cluster's metadata, as the clusters generator sees it.

use std::collections::BTreeMap;

use capstan_api::cluster::{CLUSTER_SECRET_TYPE, ClusterConfig, IN_CLUSTER_NAME, IN_CLUSTER_SERVER};
use capstan_api::labels::{LAST_APPLIED, SECRET_TYPE_LABEL};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;

use crate::ClusterError;

/// A registered cluster as stored in its Secret.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterSecret {
    /// Name of the Secret.
    pub secret_name: String,
    /// The cluster's name (what `destination.name` refers to).
    pub name: String,
    /// API server URL (what `destination.server` refers to).
    pub server: String,
    /// How to authenticate.
    pub config: ClusterConfig,
    /// Namespaces Capstan may manage (empty: all).
    pub namespaces: Vec<String>,
    /// With `namespaces` set: whether cluster-scoped objects may be managed too.
    pub cluster_resources: bool,
    /// The Secret's labels, minus Capstan's own type label.
    pub labels: BTreeMap<String, String>,
    /// The Secret's annotations.
    pub annotations: BTreeMap<String, String>,
}

impl ClusterSecret {
    /// Read a cluster Secret.
    pub fn from_secret(secret: &Secret) -> Result<ClusterSecret, ClusterError> {
        let secret_name = secret.metadata.name.clone().unwrap_or_default();
        let invalid = |message: String| ClusterError::InvalidSecret {
            secret: secret_name.clone(),
            message,
        };
        let field = |key: &str| -> Result<Option<String>, ClusterError> {
            if let Some(v) = secret.string_data.as_ref().and_then(|d| d.get(key)) {
                return Ok(Some(v.clone()));
            }
            match secret.data.as_ref().and_then(|d| d.get(key)) {
                Some(bytes) => String::from_utf8(bytes.0.clone())
                    .map(Some)
                    .map_err(|_| invalid(format!("key {key:?} is not UTF-8"))),
                None => Ok(None),
            }
        };
        let server = field("server")?
            .map(|s| s.trim().trim_end_matches('/').to_string())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| invalid("key \"server\" is missing".into()))?;
        if !(server.starts_with("https://") || server.starts_with("http://")) {
            return Err(invalid(format!("server {server:?} is not an http(s) URL")));
        }
        let name = field("name")?
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| server.clone());
        if name == IN_CLUSTER_NAME && server != IN_CLUSTER_SERVER {
            return Err(invalid(format!(
                "the name {IN_CLUSTER_NAME:?} is reserved for the cluster Capstan runs in (server {IN_CLUSTER_SERVER}), not {server}"
            )));
        }
        let name = if server == IN_CLUSTER_SERVER {
            IN_CLUSTER_NAME.to_string()
        } else {
            name
        };
        let config = match field("config")? {
            Some(text) if !text.trim().is_empty() => serde_json::from_str::<ClusterConfig>(&text)
                .map_err(|e| invalid(format!("key \"config\" is not valid cluster config JSON: {e}")))?,
            _ => ClusterConfig::default(),
        };
        let namespaces = field("namespaces")?
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        let cluster_resources = field("clusterResources")?.is_some_and(|v| v.trim() == "true");
        let mut labels = secret.metadata.labels.clone().unwrap_or_default();
        labels.remove(SECRET_TYPE_LABEL);
        let annotations = secret.metadata.annotations.clone().unwrap_or_default();
        Ok(ClusterSecret {
            secret_name,
            name,
            server,
            config,
            namespaces,
            cluster_resources,
            labels,
            annotations,
        })
    }

    /// The Secret describing this cluster, in `namespace`.
    pub fn to_secret(&self, namespace: &str) -> Secret {
        let mut labels = self.labels.clone();
        labels.insert(SECRET_TYPE_LABEL.into(), CLUSTER_SECRET_TYPE.into());
        let mut data = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            data.insert(k.to_string(), ByteString(v.into_bytes()));
        };
        put("name", self.name.clone());
        put("server", self.server.clone());
        put(
            "config",
            serde_json::to_string(&self.config).unwrap_or_else(|_| "{}".into()),
        );
        if !self.namespaces.is_empty() {
            put("namespaces", self.namespaces.join(","));
            if self.cluster_resources {
                put("clusterResources", "true".into());
            }
        }
        Secret {
            metadata: ObjectMeta {
                name: Some(self.secret_name.clone()),
                namespace: Some(namespace.to_string()),
                labels: Some(labels),
                annotations: (!self.annotations.is_empty()).then(|| self.annotations.clone()),
                ..Default::default()
            },
            type_: Some("Opaque".into()),
            data: Some(data),
            ..Default::default()
        }
    }

    /// The annotations that may be shown: all but [`LAST_APPLIED`], `kubectl apply`'s copy of the
    /// whole Secret, credentials included.
    pub fn shown_annotations(&self) -> BTreeMap<String, String> {
        let mut shown = self.annotations.clone();
        shown.remove(LAST_APPLIED);
        shown
    }

    /// Whether this Secret describes the cluster Capstan runs in (it only adds metadata to it).
    /// Recognised by its server alone: the name `in-cluster` with another server is refused when read.
    pub fn is_in_cluster(&self) -> bool {
        self.server == IN_CLUSTER_SERVER
    }

    /// Whether objects in `namespace` (`None`: cluster-scoped) may be managed on this cluster.
    pub fn permits(&self, namespace: Option<&str>) -> bool {
        match namespace {
            _ if self.namespaces.is_empty() => true,
            Some(ns) => self.namespaces.iter().any(|n| n == ns),
            None => self.cluster_resources,
        }
    }
}

/// The name of the Secret for a cluster called `name`: `cluster-<name>`, made a valid object name.
pub fn secret_name_for(name: &str) -> String {
    let mut out: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    out = out.trim_matches(|c: char| c == '-' || c == '.').to_string();
    out.truncate(240);
    format!("cluster-{out}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(data: &[(&str, &str)], labels: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("cluster-a".into()),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn reads_argo_layout_and_round_trips() {
        let s = secret(
            &[
                ("name", "spoke-a"),
                ("server", "https://127.0.0.1:6443/"),
                (
                    "config",
                    r#"{"bearerToken":"t0k","tlsClientConfig":{"insecure":false,"caData":"Q0E="}}"#,
                ),
                ("namespaces", "a, b"),
            ],
            &[("capstan.dev/secret-type", "cluster"), ("env", "staging")],
        );
        let c = ClusterSecret::from_secret(&s).expect("valid");
        assert_eq!(c.name, "spoke-a");
        assert_eq!(c.server, "https://127.0.0.1:6443", "trailing slash dropped");
        assert_eq!(c.config.bearer_token, "t0k");
        assert_eq!(c.config.tls_client_config.ca_data, "Q0E=");
        assert_eq!(c.namespaces, vec!["a", "b"]);
        assert_eq!(c.labels.get("env").map(String::as_str), Some("staging"));
        assert!(!c.labels.contains_key("capstan.dev/secret-type"));
        assert!(c.permits(Some("a")) && !c.permits(Some("c")) && !c.permits(None));
        let back = ClusterSecret::from_secret(&c.to_secret("capstan")).expect("round trip");
        assert_eq!(back, c);
    }

    #[test]
    fn malformed_secrets_name_the_problem() {
        let err = ClusterSecret::from_secret(&secret(&[("name", "x")], &[])).unwrap_err();
        assert!(err.to_string().contains("\"server\" is missing"), "{err}");
        let err = ClusterSecret::from_secret(&secret(&[("server", "ftp://x")], &[])).unwrap_err();
        assert!(err.to_string().contains("not an http(s) URL"), "{err}");
        let err =
            ClusterSecret::from_secret(&secret(&[("server", "https://x"), ("config", "{nope")], &[])).unwrap_err();
        assert!(
            err.to_string().contains("cluster-a") && err.to_string().contains("config"),
            "{err}"
        );
    }

    #[test]
    fn in_cluster_is_recognised_by_server_only() {
        let err = ClusterSecret::from_secret(&secret(&[("name", "in-cluster"), ("server", "https://spoke:1")], &[]))
            .unwrap_err();
        assert!(err.to_string().contains("reserved"), "{err}");
        let c =
            ClusterSecret::from_secret(&secret(&[("name", "hub"), ("server", IN_CLUSTER_SERVER)], &[])).expect("valid");
        assert!(c.is_in_cluster());
        assert_eq!(c.name, IN_CLUSTER_NAME, "the local cluster keeps its well-known name");
    }

    #[test]
    fn name_defaults_to_server_and_secret_names_are_valid() {
        let c = ClusterSecret::from_secret(&secret(&[("server", "https://x:1")], &[])).expect("valid");
        assert_eq!(c.name, "https://x:1");
        assert_eq!(secret_name_for("Prod_EU"), "cluster-prod-eu");
    }
}
