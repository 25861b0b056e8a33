//! Destination clusters as Capstan stores them: a Secret in Capstan's namespace labelled
//! `capstan.dev/secret-type: cluster`, in Argo CD's layout (`name`, `server`, `config`,
//! `namespaces`). The Secret's labels and annotations are the cluster's metadata.

use serde::{Deserialize, Serialize};

/// Value of [`crate::labels::SECRET_TYPE_LABEL`] on cluster Secrets.
pub const CLUSTER_SECRET_TYPE: &str = "cluster";
/// Value of [`crate::labels::SECRET_TYPE_LABEL`] on repository Secrets.
pub const REPOSITORY_SECRET_TYPE: &str = "repository";
/// The server URL that names the cluster Capstan runs in.
pub const IN_CLUSTER_SERVER: &str = "https://kubernetes.default.svc";
/// The name of the cluster Capstan runs in.
pub const IN_CLUSTER_NAME: &str = "in-cluster";

/// The `config` key of a cluster Secret: how to authenticate to the cluster. Its `Debug` form hides
/// the credentials.
#[derive(Deserialize, Serialize, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfig {
    /// Bearer token (a service account token, usually).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bearer_token: String,
    /// Basic auth user name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub username: String,
    /// Basic auth password.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub password: String,
    /// TLS settings.
    #[serde(default)]
    pub tls_client_config: TlsClientConfig,
}

/// TLS settings of a cluster connection; `*Data` fields are base64-encoded PEM, as in a kubeconfig.
#[derive(Deserialize, Serialize, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsClientConfig {
    /// Skip verifying the server's certificate.
    #[serde(default)]
    pub insecure: bool,
    /// The CA certificate(s) the server's certificate must chain to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ca_data: String,
    /// Client certificate.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cert_data: String,
    /// Client key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key_data: String,
    /// Server name to verify instead of the URL's host.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server_name: String,
}

/// `"<hidden>"` for a set secret, `""` for an empty one.
fn hidden(value: &str) -> &'static str {
    if value.is_empty() { "" } else { "<hidden>" }
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("bearer_token", &hidden(&self.bearer_token))
            .field("username", &self.username)
            .field("password", &hidden(&self.password))
            .field("tls_client_config", &self.tls_client_config)
            .finish()
    }
}

impl std::fmt::Debug for TlsClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClientConfig")
            .field("insecure", &self.insecure)
            .field("ca_data", &self.ca_data)
            .field("cert_data", &self.cert_data)
            .field("key_data", &hidden(&self.key_data))
            .field("server_name", &self.server_name)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_credentials() {
        let mut c = ClusterConfig {
            bearer_token: "tok3n-value".into(),
            password: "pa55word".into(),
            ..Default::default()
        };
        c.tls_client_config.key_data = "S2V5LWRhdGE=".into();
        let text = format!("{c:?}");
        assert!(
            !text.contains("tok3n") && !text.contains("pa55") && !text.contains("S2V5"),
            "{text}"
        );
        assert!(text.contains("<hidden>"));
    }
}
