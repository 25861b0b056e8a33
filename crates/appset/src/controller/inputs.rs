//! Gathering what generation reads from the outside world: registered clusters (cluster Secrets)
//! and checkouts of the Git repositories the generators name, with repository credentials.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use capstan_api::cluster::CLUSTER_SECRET_TYPE;
use capstan_api::labels::SECRET_TYPE_LABEL;
use capstan_cluster::ClusterSecret;
use capstan_source::{Credentials, RepoCache};
use k8s_openapi::api::core::v1::Secret;

use crate::{ClusterInfo, GitSource};

/// Why the registered clusters cannot be listed for the clusters generator. Generation stops (and
/// every existing Application stays as it is) rather than acting on a partial or ambiguous list:
/// leaving a cluster out would delete its Applications.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClustersError {
    /// A cluster Secret cannot be read.
    #[error("{message} (fix or delete the Secret; until then no Application of a clusters generator is changed)")]
    InvalidClusterSecret {
        /// The Secret's name.
        secret: String,
        /// What is wrong with it, naming the Secret.
        message: String,
    },
    /// Two cluster Secrets describe the same cluster (by name or by server).
    #[error(
        "cluster Secrets {first:?} and {second:?} both describe {what}: keep one of them (until then no \
         Application of a clusters generator is changed)"
    )]
    DuplicateCluster {
        /// The first Secret (by name).
        first: String,
        /// The second Secret.
        second: String,
        /// What they share (`cluster name "prod"`, `server https://...`).
        what: String,
    },
}

impl ClustersError {
    /// A short CamelCase reason for a status condition.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidClusterSecret { .. } => "InvalidClusterSecret",
            Self::DuplicateCluster { .. } => "DuplicateCluster",
        }
    }
}

/// The clusters the clusters generator sees, from the cluster Secrets (those labelled
/// `capstan.dev/secret-type: cluster`), sorted by name. A Secret whose server is `in-cluster`'s
/// (`https://kubernetes.default.svc`) describes `in-cluster` (it adds labels and annotations to it) and
/// is named `in-cluster` whatever its `name` says; the generator adds `in-cluster` itself when no Secret
/// describes it.
///
/// Every labelled Secret must be readable and describe a cluster no other Secret describes (by name or
/// by server): otherwise this is an error, never a shorter list.
pub fn clusters(secrets: &[Arc<Secret>]) -> Result<Vec<ClusterInfo>, ClustersError> {
    let mut labelled: Vec<&Secret> = secrets
        .iter()
        .map(Arc::as_ref)
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SECRET_TYPE_LABEL))
                .map(String::as_str)
                == Some(CLUSTER_SECRET_TYPE)
        })
        .collect();
    labelled.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut parsed: Vec<ClusterSecret> = Vec::with_capacity(labelled.len());
    for secret in labelled {
        // `from_secret` gives `in-cluster` its name and refuses the name with another server.
        let cluster = ClusterSecret::from_secret(secret).map_err(|e| ClustersError::InvalidClusterSecret {
            secret: secret.metadata.name.clone().unwrap_or_default(),
            message: hide_values(&e.to_string()),
        })?;
        if let Some(other) = parsed
            .iter()
            .find(|o| o.name == cluster.name || o.server == cluster.server)
        {
            return Err(ClustersError::DuplicateCluster {
                first: other.secret_name.clone(),
                second: cluster.secret_name.clone(),
                what: if other.name == cluster.name {
                    format!("cluster name {:?}", cluster.name)
                } else {
                    format!("server {}", capstan_source::redact(&cluster.server, &[]))
                },
            });
        }
        parsed.push(cluster);
    }
    let mut out: Vec<ClusterInfo> = parsed
        .into_iter()
        .map(|c| ClusterInfo {
            name: c.name,
            server: c.server,
            labels: c.labels,
            annotations: c.annotations,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.server.cmp(&b.server)));
    Ok(out)
}

/// A cluster Secret's parse error without the values it quotes: a JSON error names what it could not
/// read (`invalid type: string "...", expected ...`), which may be a credential, and the condition it
/// ends up in is readable by anyone who can read the ApplicationSet.
fn hide_values(message: &str) -> String {
    let Some(at) = message.find("JSON: ") else {
        return message.to_string();
    };
    let (head, tail) = message.split_at(at + "JSON: ".len());
    let mut out = String::from(head);
    let mut chars = tail.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '"' || c == '`' {
            out.push_str("***");
            let mut escaped = false;
            for d in chars.by_ref() {
                match d {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    _ if d == c => break,
                    _ => {}
                }
            }
            out.push(c);
        }
    }
    out
}

/// Why a generator's repository could not be checked out.
#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    /// A local path inside Capstan's own cache.
    #[error("repoURL {0:?} points into Capstan's own cache, which may hold other Applications' repositories")]
    InCache(String),
    /// Resolving or checking out failed.
    #[error(transparent)]
    Source(#[from] capstan_source::SourceError),
}

/// Refuse a repository URL naming a local path (`file://...` or an absolute path) inside Capstan's own
/// cache root `cache_root`, where other Applications' and sets' repositories are checked out. Paths
/// are compared after resolving symbolic links, `.` and `..` ([`normalize`]), so neither hides it.
pub fn check_not_in_cache(repo_url: &str, cache_root: &Path) -> Result<(), CheckoutError> {
    let url = repo_url.trim();
    let local = url.strip_prefix("file://").or(url.starts_with('/').then_some(url));
    match local {
        Some(path) if normalize(Path::new(path)).starts_with(normalize(cache_root)) => {
            Err(CheckoutError::InCache(url.to_string()))
        }
        _ => Ok(()),
    }
}

/// `path` with symbolic links resolved as the file system would, component by component (so
/// `link/..` is the parent of the link's target); components that do not exist are kept as written,
/// and a `..` after one removes it.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => {
                out.push(other);
                if let Ok(canonical) = std::fs::canonicalize(&out) {
                    out = canonical;
                }
            }
        }
    }
    out
}

/// A checkout of `source` (resolved now when `force`, else from refs at most a poll interval old),
/// with the credentials of the repository Secret matching its URL. A local repository inside
/// `cache_root` is refused ([`check_not_in_cache`]). The error says which repository and revision,
/// never a credential.
pub async fn checkout(
    client: &kube::Client,
    namespace: &str,
    repos: &RepoCache,
    cache_root: &Path,
    source: &GitSource,
    force: bool,
) -> Result<capstan_source::Checkout, CheckoutError> {
    check_not_in_cache(&source.repo_url, cache_root)?;
    let creds = capstan_cluster::repository::for_repo(client, namespace, &source.repo_url)
        .await
        .unwrap_or_else(Credentials::none);
    let resolved = repos.resolve(&source.repo_url, &source.revision, &creds, force).await?;
    Ok(repos.checkout(&source.repo_url, &resolved.sha).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::cluster::{IN_CLUSTER_NAME, IN_CLUSTER_SERVER};
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    fn secret_with(name: &str, data: &[(&str, &str)], labels: &[(&str, &str)]) -> Arc<Secret> {
        let mut l: std::collections::BTreeMap<String, String> =
            labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        l.insert(SECRET_TYPE_LABEL.into(), CLUSTER_SECRET_TYPE.into());
        let data = data
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect();
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

    fn secret(name: &str, cluster: &str, server: &str, labels: &[(&str, &str)]) -> Arc<Secret> {
        let mut data = vec![("server", server), ("config", "{}")];
        if !cluster.is_empty() {
            data.push(("name", cluster));
        }
        secret_with(name, &data, labels)
    }

    #[test]
    fn cluster_secrets_become_cluster_infos_without_the_type_label() {
        let mut unlabelled = (*secret("z", "other", "not-a-url", &[])).clone();
        unlabelled.metadata.labels = None;
        let list = clusters(&[
            secret("b", "prod", "https://prod.example:6443", &[("env", "production")]),
            secret("a", "", IN_CLUSTER_SERVER, &[("env", "hub")]),
            Arc::new(unlabelled),
        ])
        .expect("readable");
        let names: Vec<&str> = list.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["in-cluster", "prod"],
            "Secrets without the type label are not clusters"
        );
        assert_eq!(list[0].labels.get("env").map(String::as_str), Some("hub"));
        assert!(!list[1].labels.contains_key(SECRET_TYPE_LABEL));
        assert_eq!(list[1].server, "https://prod.example:6443");
    }

    #[test]
    fn an_unreadable_cluster_secret_is_an_error_not_a_missing_cluster() {
        let good = secret("a-prod", "prod", "https://prod.example:6443", &[("env", "production")]);
        for (data, problem) in [
            (
                vec![
                    ("name", "staging"),
                    ("server", "https://staging.example:6443"),
                    ("config", "{not json"),
                ],
                "config",
            ),
            (vec![("name", "staging"), ("server", "not-a-url")], "not-a-url"),
            (
                vec![
                    ("name", "staging"),
                    ("server", "https://staging.example:6443"),
                    ("config", r#"{"tlsClientConfig": "s3cr3t \" value"}"#),
                ],
                "invalid type: string \"***\", expected",
            ),
            (vec![("name", "staging")], "server"),
        ] {
            let broken = secret_with("cluster-staging", &data, &[("env", "staging")]);
            let err = clusters(&[good.clone(), broken]).unwrap_err();
            assert_eq!(err.reason(), "InvalidClusterSecret");
            let message = err.to_string();
            assert!(
                message.contains("\"cluster-staging\"") && message.contains(problem),
                "names the Secret and the problem: {message}"
            );
            assert!(!message.contains("s3cr3t") && !message.contains("value"), "{message}");
        }
    }

    #[test]
    fn two_secrets_for_one_cluster_are_an_error_naming_both() {
        let err = clusters(&[
            secret("b", "prod", "https://prod-2.example:6443", &[]),
            secret("a", "prod", "https://prod.example:6443", &[]),
            secret("c", "staging", "https://staging.example:6443", &[]),
        ])
        .unwrap_err();
        assert_eq!(err.reason(), "DuplicateCluster");
        let message = err.to_string();
        assert!(
            message.contains("\"a\" and \"b\"") && message.contains("cluster name \"prod\""),
            "{message}"
        );

        let err = clusters(&[
            secret("one", "prod", "https://prod.example:6443", &[]),
            secret("two", "prod-again", "https://prod.example:6443", &[]),
        ])
        .unwrap_err();
        assert_eq!(err.reason(), "DuplicateCluster");
        assert!(
            err.to_string().contains("\"one\" and \"two\"")
                && err.to_string().contains("server https://prod.example:6443"),
            "{err}"
        );
    }

    #[test]
    fn in_cluster_is_recognised_by_server_only() {
        // A Secret for the local API server describes in-cluster, whatever its name says.
        let list = clusters(&[secret("hub", "hub", IN_CLUSTER_SERVER, &[("env", "hub")])]).expect("valid");
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].name, IN_CLUSTER_NAME);
        assert_eq!(list[0].server, IN_CLUSTER_SERVER);
        assert_eq!(list[0].labels.get("env").map(String::as_str), Some("hub"));

        // The name in-cluster with another server is refused, not taken for the local cluster.
        let err = clusters(&[secret("spoke", IN_CLUSTER_NAME, "https://spoke.example:6443", &[])]).unwrap_err();
        assert_eq!(err.reason(), "InvalidClusterSecret");
        assert!(err.to_string().contains("\"spoke\""), "{err}");

        // Two Secrets describing in-cluster.
        let err = clusters(&[
            secret("hub-a", "", IN_CLUSTER_SERVER, &[]),
            secret("hub-b", "hub", IN_CLUSTER_SERVER, &[]),
        ])
        .unwrap_err();
        assert_eq!(err.reason(), "DuplicateCluster");
        assert!(err.to_string().contains("\"hub-a\" and \"hub-b\""), "{err}");
    }

    #[test]
    fn local_repositories_inside_the_cache_root_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let repo = cache.join("applicationsets/repos/abc");
        std::fs::create_dir_all(&repo).unwrap();
        let outside = dir.path().join("repos/mine");
        std::fs::create_dir_all(&outside).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&cache, &link).unwrap();
        let d = dir.path().display();

        let refused = [
            format!("file://{}", repo.display()),
            repo.display().to_string(),
            format!("file://{}", cache.display()),
            // `..` and symbolic links are resolved before comparing.
            format!("file://{d}/repos/../cache/applicationsets/repos/abc"),
            format!("file://{d}/link/applicationsets/repos/abc"),
            // Paths that do not exist (yet) are compared too.
            format!("file://{d}/cache/controller/not-yet"),
            format!("{d}/link/not-yet/../other"),
            format!("{d}/repos/missing/../../cache/x"),
        ];
        for url in &refused {
            let err = check_not_in_cache(url, &cache).expect_err(url).to_string();
            assert!(
                err.contains(&format!("{url:?}")) && err.contains("points into Capstan's own cache"),
                "{err}"
            );
        }
        for url in [
            format!("file://{}", outside.display()),
            outside.display().to_string(),
            format!("{d}/cache-other/r"),
            "https://git.example/r.git".to_string(),
            "git@git.example:r.git".to_string(),
        ] {
            assert!(check_not_in_cache(&url, &cache).is_ok(), "{url}");
        }
    }
}
