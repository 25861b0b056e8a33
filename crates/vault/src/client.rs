//! [`VaultClient`]: reading KV v2 secrets.

use std::collections::BTreeMap;
use std::fmt;

use capstan_http::Method;

use crate::auth::Tokens;
use crate::config::StoreConfig;
use crate::error::VaultError;
use crate::http::{Answer, Http};
use crate::path::KvPath;
use crate::secret::{KvSecret, SecretString, SecretValue};

/// A client of one secret store. Cheap to share (`Arc`); requests may run concurrently.
pub struct VaultClient {
    http: Http,
    tokens: Tokens,
}

impl fmt::Debug for VaultClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VaultClient")
            .field("address", &self.http.address())
            .field("kubernetes_auth", &self.tokens.can_login())
            .finish_non_exhaustive()
    }
}

impl VaultClient {
    /// A client for `config`; checks the address, the CA and the auth settings (nothing is sent).
    pub fn new(config: StoreConfig) -> Result<VaultClient, VaultError> {
        let http = Http::new(&config)?;
        let tokens = Tokens::new(config.auth)?;
        Ok(VaultClient { http, tokens })
    }

    /// The store's address (`scheme://host:port`).
    pub fn address(&self) -> &str {
        self.http.address()
    }

    /// Read the current version of the secret at `path`'s `mount/path` from a KV v2 engine
    /// (`GET /v1/{mount}/data/{path}`). The key of `path` is not looked at: see [`KvSecret::get`] or
    /// [`VaultClient::read_value`].
    ///
    /// With Kubernetes auth, a 403 answer to a cached token is followed by one new login and one
    /// more try.
    pub async fn read_kv(&self, path: &KvPath) -> Result<KvSecret, VaultError> {
        let location = path.location();
        let mut logged_in_again = false;
        loop {
            let token = self.tokens.token(&self.http).await?;
            tracing::debug!(address = self.address(), path = %location, "reading a KV v2 secret");
            let answer = self
                .http
                .send(Method::GET, &path.data_endpoint(), Some(&token), None)
                .await?;
            match answer.status.as_u16() {
                200 => return kv_secret(location, &answer),
                403 if self.tokens.can_login() && !logged_in_again => {
                    self.tokens.forget(&token).await;
                    logged_in_again = true;
                }
                403 => return Err(VaultError::PermissionDenied { path: location }),
                404 => return Err(VaultError::NotFound { path: location }),
                503 if crate::http::sealed(&self.http, &answer).await => {
                    return Err(VaultError::Sealed {
                        address: self.address().to_string(),
                    });
                }
                status => {
                    return Err(VaultError::BadResponse {
                        reason: format!("HTTP {status} reading {location}: {}", answer.errors()),
                    });
                }
            }
        }
    }

    /// The value of `path`'s key: [`VaultClient::read_kv`] then [`KvSecret::get`].
    pub async fn read_value(&self, path: &KvPath) -> Result<SecretValue, VaultError> {
        Ok(self.read_kv(path).await?.get(path.key())?.clone())
    }
}

/// The secret in a KV v2 read answer: `{"data": {"data": {...}, "metadata": {"version": N}}}`. A
/// version that is deleted or destroyed has `data: null`: not found.
fn kv_secret(location: String, answer: &Answer) -> Result<KvSecret, VaultError> {
    let json = answer.json(&format!("reading {location}"))?;
    let bad = |what: &str| VaultError::BadResponse {
        reason: format!("reading {location}: {what}"),
    };
    let outer = json.get("data").ok_or_else(|| bad("no data in the answer"))?;
    let version = outer
        .get("metadata")
        .and_then(|m| m.get("version"))
        .and_then(|v| v.as_u64())
        .ok_or_else(|| bad("no metadata.version (is the mount a KV version 2 engine?)"))?;
    let fields = match outer.get("data") {
        Some(serde_json::Value::Object(fields)) => fields,
        Some(serde_json::Value::Null) | None => return Err(VaultError::NotFound { path: location }),
        Some(_) => return Err(bad("data.data is not an object")),
    };
    let data: BTreeMap<String, SecretValue> = fields
        .iter()
        .map(|(k, v)| {
            let value = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            // Scrubbed from whatever leaves the process from now on.
            capstan_redact::register(&value);
            (k.clone(), SecretString::new(value))
        })
        .collect();
    Ok(KvSecret::new(location, data, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(body: &str) -> Answer {
        Answer {
            status: capstan_http::StatusCode::OK,
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn kv_v2_answers() {
        let ok = kv_secret(
            "secret/x".into(),
            &answer(r#"{"data":{"data":{"a":"1","n":2},"metadata":{"version":7}}}"#),
        );
        let ok = ok.expect("parses");
        assert_eq!(ok.version(), 7);
        assert_eq!(ok.get("a").map(|v| v.expose().to_string()).ok().as_deref(), Some("1"));
        assert_eq!(ok.get("n").map(|v| v.expose().to_string()).ok().as_deref(), Some("2"));
        let deleted = kv_secret(
            "secret/x".into(),
            &answer(r#"{"data":{"data":null,"metadata":{"version":2,"deletion_time":"x"}}}"#),
        );
        assert!(matches!(deleted, Err(VaultError::NotFound { path }) if path == "secret/x"));
        for bad in [
            "",
            "[]",
            r#"{"data":{"a":"1"}}"#,
            r#"{"data":{"data":"x","metadata":{"version":1}}}"#,
        ] {
            let err = kv_secret("secret/x".into(), &answer(bad));
            assert!(matches!(err, Err(VaultError::BadResponse { .. })), "{bad}");
        }
    }

    #[test]
    fn debug_shows_no_token() {
        let client = VaultClient::new(StoreConfig::new(
            "http://127.0.0.1:1",
            crate::Auth::token("root-token-xyz"),
        ))
        .expect("client");
        let shown = format!("{client:?}");
        assert!(
            !shown.contains("root-token-xyz") && shown.contains("127.0.0.1:1"),
            "{shown}"
        );
    }
}
