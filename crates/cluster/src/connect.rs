//! A Kubernetes client for a registered cluster, built from its Secret.
//!
//! The Secret's credentials are turned into an in-memory kubeconfig so that kube-rs does the
//! certificate parsing and authentication exactly as it does for a kubeconfig file.

use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

use crate::{ClusterError, ClusterSecret};

/// How long connecting to a destination may take: an unreachable cluster must fail fast, not hold a
/// worker for the default 30 s.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The client configuration for `cluster`.
pub async fn config(cluster: &ClusterSecret) -> Result<kube::Config, ClusterError> {
    let c = &cluster.config;
    let tls = &c.tls_client_config;
    let mut kcluster = json!({"server": cluster.server});
    if tls.insecure {
        kcluster["insecure-skip-tls-verify"] = json!(true);
    }
    if !tls.ca_data.is_empty() {
        kcluster["certificate-authority-data"] = json!(tls.ca_data);
    }
    if !tls.server_name.is_empty() {
        kcluster["tls-server-name"] = json!(tls.server_name);
    }
    let mut user = json!({});
    if !c.bearer_token.is_empty() {
        user["token"] = json!(c.bearer_token);
    }
    if !c.username.is_empty() {
        user["username"] = json!(c.username);
        user["password"] = json!(c.password);
    }
    if !tls.cert_data.is_empty() {
        user["client-certificate-data"] = json!(tls.cert_data);
    }
    if !tls.key_data.is_empty() {
        user["client-key-data"] = json!(tls.key_data);
    }
    let kubeconfig: Kubeconfig = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": kcluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }))
    .map_err(|e| invalid(cluster, e))?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| invalid(cluster, e))?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    Ok(config)
}

/// A client for `cluster` (not yet checked to be reachable).
pub async fn client(cluster: &ClusterSecret) -> Result<kube::Client, ClusterError> {
    let config = config(cluster).await?;
    capstan_metrics::counted_client(config).map_err(|e| invalid(cluster, e))
}

fn invalid(cluster: &ClusterSecret, e: impl std::fmt::Display) -> ClusterError {
    ClusterError::InvalidSecret {
        secret: cluster.secret_name.clone(),
        message: format!("cannot build a client for {}: {e}", cluster.server),
    }
}
