//! Secret stores (OpenBao/Vault servers) from Secrets labelled `capstan.dev/secret-type: secret-store`
//! in Capstan's namespace: the store's name is the Secret's name; its keys say where the store is and
//! how the controller logs in (read as [`repository`](crate::repository) reads repository Secrets).
//!
//! Keys: `address` (an `http://` or `https://` URL), `ca.crt` (optional PEM), `auth` (`token` or
//! `kubernetes`); for token auth `token`; for Kubernetes auth `role`, `mount` (default `kubernetes`)
//! and optionally `jwt` — the service-account token to log in with, for a controller running outside
//! a cluster. Without `jwt`, the controller's own token is read from [`SERVICE_ACCOUNT_TOKEN`].

use capstan_api::labels::SECRET_TYPE_LABEL;
use capstan_vault::config::DEFAULT_KUBERNETES_MOUNT;
use capstan_vault::{Auth, SecretString, StoreConfig};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

/// The value of [`SECRET_TYPE_LABEL`] marking a secret store Secret.
pub const SECRET_STORE_TYPE: &str = "secret-store";

/// Where a pod's service-account token is mounted.
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// Why a secret store cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No Secret of that name with the secret-store label in Capstan's namespace.
    #[error(
        "secret store {name:?} not found: no Secret {name:?} labelled {SECRET_TYPE_LABEL}: {SECRET_STORE_TYPE} in \
         namespace {namespace}"
    )]
    StoreNotFound {
        /// The store's name.
        name: String,
        /// Capstan's namespace.
        namespace: String,
    },
    /// The store Secret is incomplete or wrong.
    #[error("secret store {name:?} is unusable: {reason}")]
    BadStore {
        /// The store's name.
        name: String,
        /// What is wrong (never a value of the Secret).
        reason: String,
    },
    /// The store Secret could not be read.
    #[error("reading secret store {name:?}: {source}")]
    Read {
        /// The store's name.
        name: String,
        /// What the API server answered.
        #[source]
        source: kube::Error,
    },
}

/// A store as its Secret describes it.
#[derive(Debug, Clone)]
pub struct SecretStore {
    /// Its name (the Secret's name).
    pub name: String,
    /// The Secret's resourceVersion: a change means the configuration may have changed.
    pub resource_version: String,
    /// How to reach it and log in (tokens and JWTs masked in `Debug`).
    pub config: StoreConfig,
}

/// Read the store `name` from Capstan's `namespace`.
pub async fn lookup(client: &kube::Client, namespace: &str, name: &str) -> Result<SecretStore, StoreError> {
    let not_found = || StoreError::StoreNotFound {
        name: name.to_string(),
        namespace: namespace.to_string(),
    };
    if name.is_empty() {
        return Err(not_found());
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(|source| StoreError::Read {
            name: name.to_string(),
            source,
        })?
        .ok_or_else(not_found)?;
    let labelled = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SECRET_TYPE_LABEL))
        .is_some_and(|t| t == SECRET_STORE_TYPE);
    if !labelled {
        // Any other Secret of Capstan's namespace (a cluster's, a repository's) is not a store.
        return Err(not_found());
    }
    let token_file = || std::fs::read_to_string(SERVICE_ACCOUNT_TOKEN);
    let config = parse(name, &secret, token_file)?;
    Ok(SecretStore {
        name: name.to_string(),
        resource_version: secret.metadata.resource_version.clone().unwrap_or_default(),
        config,
    })
}

/// The configuration in a store Secret; `token_file` reads the controller's service-account token.
fn parse(
    name: &str,
    secret: &Secret,
    token_file: impl FnOnce() -> std::io::Result<String>,
) -> Result<StoreConfig, StoreError> {
    let bad = |reason: String| StoreError::BadStore {
        name: name.to_string(),
        reason,
    };
    let field = |k: &str| -> Option<String> {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| String::from_utf8_lossy(&b.0).to_string())
            .or_else(|| secret.string_data.as_ref().and_then(|d| d.get(k)).cloned())
    };
    let nonempty = |k: &str| field(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let address = nonempty("address").ok_or_else(|| bad("key `address` is missing".into()))?;
    if !(address.starts_with("http://") || address.starts_with("https://")) {
        return Err(bad(format!("`address` {address:?} is not an http:// or https:// URL")));
    }
    let auth = match nonempty("auth").as_deref() {
        Some("token") => {
            let token = nonempty("token").ok_or_else(|| bad("`auth: token` needs key `token`".into()))?;
            Auth::Token(SecretString::new(token))
        }
        Some("kubernetes") => {
            let role = nonempty("role").ok_or_else(|| bad("`auth: kubernetes` needs key `role`".into()))?;
            let mount = nonempty("mount").unwrap_or_else(|| DEFAULT_KUBERNETES_MOUNT.to_string());
            let jwt = match nonempty("jwt") {
                Some(jwt) => jwt,
                None => token_file()
                    .map(|t| t.trim().to_string())
                    .ok()
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| {
                        bad(format!(
                            "`auth: kubernetes` without key `jwt` uses the controller's service-account token, \
                             but {SERVICE_ACCOUNT_TOKEN} cannot be read"
                        ))
                    })?,
            };
            Auth::Kubernetes {
                mount,
                role,
                jwt: SecretString::new(jwt),
            }
        }
        Some(other) => {
            return Err(bad(format!("`auth` is {other:?}; it must be `token` or `kubernetes`")));
        }
        None => return Err(bad("key `auth` is missing (`token` or `kubernetes`)".into())),
    };
    let mut config = StoreConfig::new(address, auth);
    if let Some(pem) = nonempty("ca.crt") {
        config = config.with_ca_pem(pem);
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(data: serde_json::Value) -> Secret {
        serde_json::from_value(json!({"metadata": {"name": "bao"}, "stringData": data})).expect("a Secret")
    }

    fn no_file() -> std::io::Result<String> {
        Err(std::io::Error::from(std::io::ErrorKind::NotFound))
    }

    #[test]
    fn token_and_kubernetes_stores() {
        let config = parse(
            "bao",
            &secret(json!({"address": "https://bao:8200", "auth": "token", "token": "s.tok", "ca.crt": "PEM"})),
            no_file,
        )
        .expect("a token store");
        assert_eq!(config.address, "https://bao:8200");
        assert_eq!(config.ca_pem.as_deref(), Some("PEM"));
        assert!(matches!(&config.auth, Auth::Token(t) if t.expose() == "s.tok"));

        let config = parse(
            "bao",
            &secret(json!({"address": "http://bao:8200", "auth": "kubernetes", "role": "capstan"})),
            || Ok("jwt-from-file\n".to_string()),
        )
        .expect("a kubernetes store");
        assert!(matches!(&config.auth, Auth::Kubernetes { mount, role, jwt }
            if mount == "kubernetes" && role == "capstan" && jwt.expose() == "jwt-from-file"));

        let config = parse(
            "bao",
            &secret(json!({"address": "http://bao", "auth": "kubernetes", "role": "r", "mount": "k8s", "jwt": "j"})),
            no_file,
        )
        .expect("a kubernetes store with a jwt");
        assert!(matches!(&config.auth, Auth::Kubernetes { mount, jwt, .. } if mount == "k8s" && jwt.expose() == "j"));
    }

    #[test]
    fn unusable_stores_say_why_without_values() {
        let cases = [
            (json!({"auth": "token", "token": "hunter2"}), "address"),
            (
                json!({"address": "bao:8200", "auth": "token", "token": "hunter2"}),
                "http://",
            ),
            (json!({"address": "http://bao", "auth": "token"}), "token"),
            (
                json!({"address": "http://bao", "auth": "ldap", "token": "hunter2"}),
                "ldap",
            ),
            (json!({"address": "http://bao", "token": "hunter2"}), "auth"),
            (json!({"address": "http://bao", "auth": "kubernetes"}), "role"),
            (
                json!({"address": "http://bao", "auth": "kubernetes", "role": "r"}),
                SERVICE_ACCOUNT_TOKEN,
            ),
        ];
        for (data, expected) in cases {
            let err = parse("bao", &secret(data.clone()), no_file)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(expected) && err.contains("\"bao\""), "{data}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }
}
