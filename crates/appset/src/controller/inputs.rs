//! Gathering what generation reads from the outside world: registered clusters (cluster Secrets)
//! and checkouts of the Git repositories the generators name, with repository credentials.

use std::path::PathBuf;
use std::sync::Arc;

use capstan_api::cluster::{CLUSTER_SECRET_TYPE, IN_CLUSTER_NAME};
use capstan_api::labels::SECRET_TYPE_LABEL;
use capstan_cluster::ClusterSecret;
use capstan_source::{Credentials, RepoCache};
use k8s_openapi::api::core::v1::Secret;

use crate::{ClusterInfo, GitSource};

/// The clusters the clusters generator sees, from cluster Secrets, sorted by name. Secrets that
/// cannot be read are left out (the Application controller reports them). `in-cluster` is added by
/// the generator itself unless a Secret describes it (then with that Secret's labels).
pub fn clusters(secrets: &[Arc<Secret>]) -> Vec<ClusterInfo> {
    let mut out: Vec<ClusterInfo> = secrets
        .iter()
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SECRET_TYPE_LABEL))
                .map(String::as_str)
                == Some(CLUSTER_SECRET_TYPE)
        })
        .filter_map(|s| match ClusterSecret::from_secret(s) {
            Ok(c) => Some(c),
            Err(err) => {
                tracing::warn!(%err, "cluster Secret ignored by ApplicationSet generators");
                None
            }
        })
        .map(|c| {
            // A Secret that only adds metadata to the cluster Capstan runs in keeps its usual name.
            let name = if c.is_in_cluster() && c.name == c.server {
                IN_CLUSTER_NAME.to_string()
            } else {
                c.name.clone()
            };
            ClusterInfo {
                name,
                server: c.server,
                labels: c.labels,
                annotations: c.annotations,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.server.cmp(&b.server)));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// A checkout of `source` (resolved now when `force`, else from refs at most a poll interval old),
/// with the credentials of the repository Secret matching its URL. The error says which repository
/// and revision, never a credential.
pub async fn checkout(
    client: &kube::Client,
    namespace: &str,
    repos: &RepoCache,
    source: &GitSource,
    force: bool,
) -> Result<PathBuf, String> {
    let creds = capstan_controller::credentials::for_repo(client, namespace, &source.repo_url)
        .await
        .unwrap_or_else(Credentials::none);
    let resolved = repos
        .resolve(&source.repo_url, &source.revision, &creds, force)
        .await
        .map_err(|e| e.to_string())?;
    repos
        .checkout(&source.repo_url, &resolved.sha)
        .await
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::cluster::IN_CLUSTER_SERVER;
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    fn secret(name: &str, cluster: &str, server: &str, labels: &[(&str, &str)]) -> Arc<Secret> {
        let mut l: std::collections::BTreeMap<String, String> =
            labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        l.insert(SECRET_TYPE_LABEL.into(), CLUSTER_SECRET_TYPE.into());
        let mut data = std::collections::BTreeMap::new();
        if !cluster.is_empty() {
            data.insert("name".to_string(), ByteString(cluster.as_bytes().to_vec()));
        }
        data.insert("server".to_string(), ByteString(server.as_bytes().to_vec()));
        Arc::new(Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(l),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        })
    }

    #[test]
    fn cluster_secrets_become_cluster_infos_without_the_type_label() {
        let list = clusters(&[
            secret("b", "prod", "https://prod.example:6443", &[("env", "production")]),
            secret("a", "", IN_CLUSTER_SERVER, &[("env", "hub")]),
            secret("c", "broken", "not-a-url", &[]),
        ]);
        let names: Vec<&str> = list.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["in-cluster", "prod"], "unreadable Secrets are left out");
        assert_eq!(list[0].labels.get("env").map(String::as_str), Some("hub"));
        assert!(!list[1].labels.contains_key(SECRET_TYPE_LABEL));
        assert_eq!(list[1].server, "https://prod.example:6443");
    }
}
