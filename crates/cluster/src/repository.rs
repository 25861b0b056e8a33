//! Repository credentials from Secrets labelled `capstan.dev/secret-type: repository` in Capstan's
//! namespace (read as [`secret`](crate::secret) reads cluster Secrets) (keys `url`, `username`, `password`, `sshPrivateKey`, `knownHosts`, `ca.crt`, `insecure`), chosen by
//! the longest `url` that covers the repository URL ([`RepoUrl::is_within`]: same scheme, user, host
//! and port, whole path segments, compared normalised) — the same layout as Argo CD's repository
//! Secrets.

use capstan_api::RepoUrl;
use capstan_api::labels::SECRET_TYPE_LABEL;
use capstan_source::Credentials;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

/// What a repository Secret says about one repository.
#[derive(Debug, Clone, Default)]
pub struct Repository {
    /// Its credentials (and CA, and whether to skip verification).
    pub credentials: Credentials,
    /// OCI registries only: speak plain HTTP (`insecureOCIForceHttp: "true"`, as in Argo CD).
    pub oci_force_http: bool,
}

/// Credentials for `url`, if a repository Secret matches it.
pub async fn for_repo(client: &kube::Client, namespace: &str, url: &str) -> Option<Credentials> {
    lookup(client, namespace, url).await.map(|r| r.credentials)
}

/// The repository Secret for `url` (the one with the longest matching `url`), if any.
pub async fn lookup(client: &kube::Client, namespace: &str, url: &str) -> Option<Repository> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let list = secrets
        .list(&ListParams::default().labels(&format!("{SECRET_TYPE_LABEL}=repository")))
        .await
        .ok()?;
    let field = |s: &Secret, k: &str| -> Option<String> {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| String::from_utf8_lossy(&b.0).to_string())
            .or_else(|| s.string_data.as_ref().and_then(|d| d.get(k)).cloned())
    };
    let repo = RepoUrl::parse(url).ok()?;
    list.items
        .iter()
        .filter_map(|s| {
            let prefix = RepoUrl::parse(&field(s, "url")?).ok()?;
            repo.is_within(&prefix).then(|| (prefix.identity().len(), s))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, s)| Repository {
            credentials: Credentials {
                username: field(s, "username"),
                password: field(s, "password"),
                ssh_private_key: field(s, "sshPrivateKey"),
                known_hosts: field(s, "knownHosts"),
                tls_ca: field(s, "ca.crt").filter(|c| !c.trim().is_empty()),
                insecure: field(s, "insecure").is_some_and(|v| v == "true"),
            },
            oci_force_http: field(s, "insecureOCIForceHttp").is_some_and(|v| v == "true"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a repository Secret's `url` covers `repo`.
    fn prefix_matches(secret_url: &str, repo: &str) -> bool {
        match (RepoUrl::parse(secret_url), RepoUrl::parse(repo)) {
            (Ok(prefix), Ok(repo)) => repo.is_within(&prefix),
            _ => false,
        }
    }

    #[test]
    fn secrets_match_on_path_boundaries_only() {
        assert!(prefix_matches(
            "https://git.example.com",
            "https://git.example.com/org/app.git"
        ));
        assert!(prefix_matches(
            "https://git.example.com/org/",
            "https://git.example.com/org/app.git"
        ));
        assert!(prefix_matches(
            "https://git.example.com/org/app.git",
            "https://git.example.com/org/app.git"
        ));
        // The host's case, `.git` and the path's case do not matter (as in Argo CD).
        assert!(prefix_matches(
            "https://Git.Example.com/Org/App",
            "https://git.example.com/org/app.git"
        ));
        assert!(!prefix_matches(
            "https://git.example.com",
            "https://git.example.com.evil.io/x"
        ));
        assert!(!prefix_matches(
            "https://git.example.com/org",
            "https://git.example.com/organisation/x"
        ));
        // Another scheme, port or user is another address: credentials never go there.
        assert!(!prefix_matches("https://git.example.com", "http://git.example.com/x"));
        assert!(!prefix_matches(
            "https://git.example.com",
            "https://git.example.com:8443/x"
        ));
        assert!(!prefix_matches(
            "https://git.example.com",
            "https://eve@git.example.com/x"
        ));
        assert!(!prefix_matches("not a url", "https://git.example.com/x"));
    }
}
