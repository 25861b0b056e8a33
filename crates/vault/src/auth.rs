//! Logging in and keeping the client token: token auth uses its token as it is; Kubernetes auth
//! exchanges the service account's JWT for a client token (`POST /v1/auth/{mount}/login`) and keeps
//! it until shortly before its lease ends, or until the store refuses it once.

use std::time::{Duration, Instant};

use capstan_http::Method;
use tokio::sync::Mutex;

use crate::config::Auth;
use crate::error::VaultError;
use crate::http::Http;
use crate::path::check_segment;
use crate::secret::SecretString;

/// A client token and when to stop using it (`None`: no end, as for a root token).
#[derive(Clone)]
struct Lease {
    token: SecretString,
    renew_at: Option<Instant>,
}

/// The client token in use, logged in on demand.
pub(crate) struct Tokens {
    auth: Auth,
    current: Mutex<Option<Lease>>,
}

impl Tokens {
    /// Check the auth settings.
    pub(crate) fn new(auth: Auth) -> Result<Tokens, VaultError> {
        match &auth {
            Auth::Token(token) if token.is_empty() => {
                return Err(VaultError::BadConfig {
                    reason: "empty token".into(),
                });
            }
            Auth::Kubernetes { mount, role, jwt } => {
                for segment in mount.split('/') {
                    check_segment(segment).map_err(|reason| VaultError::BadConfig {
                        reason: format!("Kubernetes auth mount {mount:?}: {reason}"),
                    })?;
                }
                if role.is_empty() {
                    return Err(VaultError::BadConfig {
                        reason: "Kubernetes auth needs a role".into(),
                    });
                }
                if jwt.is_empty() {
                    return Err(VaultError::BadConfig {
                        reason: "Kubernetes auth needs a service account token".into(),
                    });
                }
            }
            Auth::Token(_) => {}
        }
        Ok(Tokens {
            auth,
            current: Mutex::new(None),
        })
    }

    /// Whether a refused token may be replaced by logging in again.
    pub(crate) fn can_login(&self) -> bool {
        matches!(self.auth, Auth::Kubernetes { .. })
    }

    /// The token to send: the configured one, or the cached login while its lease lasts, or a new
    /// login.
    pub(crate) async fn token(&self, http: &Http) -> Result<SecretString, VaultError> {
        let (mount, role, jwt) = match &self.auth {
            Auth::Token(token) => return Ok(token.clone()),
            Auth::Kubernetes { mount, role, jwt } => (mount, role, jwt),
        };
        let mut current = self.current.lock().await;
        if let Some(lease) = current.as_ref()
            && lease.renew_at.is_none_or(|at| Instant::now() < at)
        {
            return Ok(lease.token.clone());
        }
        let lease = login_kubernetes(http, mount, role, jwt).await?;
        let token = lease.token.clone();
        *current = Some(lease);
        Ok(token)
    }

    /// Forget `refused` (the store answered 403 to it), so that the next [`Tokens::token`] logs in.
    pub(crate) async fn forget(&self, refused: &SecretString) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|lease| &lease.token == refused) {
            tracing::debug!("secret store refused the cached client token; logging in again");
            *current = None;
        }
    }
}

/// `POST /v1/auth/{mount}/login {role, jwt}`.
async fn login_kubernetes(http: &Http, mount: &str, role: &str, jwt: &SecretString) -> Result<Lease, VaultError> {
    tracing::debug!(address = http.address(), mount, role, "logging in with Kubernetes auth");
    let failed = |reason: String| VaultError::LoginFailed {
        mount: mount.to_string(),
        role: role.to_string(),
        reason: redact(&reason, jwt),
    };
    let body = serde_json::json!({"role": role, "jwt": jwt.expose()}).to_string();
    let started = Instant::now();
    let answer = http
        .send(
            Method::POST,
            &format!("/v1/auth/{mount}/login"),
            None,
            Some(body.into_bytes()),
        )
        .await?;
    if answer.status.as_u16() == 503 && crate::http::sealed(http, &answer).await {
        return Err(VaultError::Sealed {
            address: http.address().to_string(),
        });
    }
    if !answer.status.is_success() {
        let errors = answer.errors();
        return Err(failed(if errors.is_empty() {
            format!("HTTP {}", answer.status.as_u16())
        } else {
            format!("HTTP {}: {errors}", answer.status.as_u16())
        }));
    }
    let json = answer
        .json("login")
        .map_err(|_| failed("the answer is not JSON".into()))?;
    let auth = &json["auth"];
    let token = auth["client_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| failed("the answer holds no client token".into()))?;
    let lease = auth["lease_duration"].as_u64().unwrap_or(0);
    tracing::debug!(mount, role, lease_seconds = lease, "logged in with Kubernetes auth");
    Ok(Lease {
        token: SecretString::new(token),
        renew_at: renew_at(started, lease),
    })
}

/// When to log in again for a lease of `seconds` that started at `start`: after 80% of it (at
/// least a second before it ends); never for a lease of 0 (no end).
fn renew_at(start: Instant, seconds: u64) -> Option<Instant> {
    if seconds == 0 {
        return None;
    }
    let lease = Duration::from_secs(seconds);
    let early = (lease / 5).max(Duration::from_secs(1)).min(lease);
    Some(start + (lease - early))
}

/// `text` with every occurrence of `secret` masked (the store's messages do not echo the JWT, but a
/// message is never trusted to).
fn redact(text: &str, secret: &SecretString) -> String {
    if secret.is_empty() {
        return text.to_string();
    }
    text.replace(secret.expose(), "***")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases() {
        let t = Instant::now();
        assert_eq!(renew_at(t, 0), None);
        assert_eq!(renew_at(t, 100), Some(t + Duration::from_secs(80)));
        assert_eq!(renew_at(t, 1), Some(t));
        assert_eq!(redact("bad jwt abc.def", &SecretString::new("abc.def")), "bad jwt ***");
    }

    #[test]
    fn settings_are_checked() {
        for auth in [
            Auth::token(""),
            Auth::kubernetes("", "jwt"),
            Auth::kubernetes("r", ""),
            Auth::Kubernetes {
                mount: "../sys".into(),
                role: "r".into(),
                jwt: "j".into(),
            },
            Auth::Kubernetes {
                mount: "k8s/".into(),
                role: "r".into(),
                jwt: "j".into(),
            },
        ] {
            assert!(matches!(Tokens::new(auth), Err(VaultError::BadConfig { .. })));
        }
        assert!(Tokens::new(Auth::kubernetes("r", "j")).is_ok());
    }
}
