//! Who is asking and whether they may: local accounts and API tokens (in `capstan-secret`),
//! signed session cookies with CSRF tokens, and roles per project ([`rbac`]).
//!
//! Every API handler takes an [`Auth`]: extracting it answers 401 without valid credentials, and 403
//! when a cookie-authenticated request that changes something lacks the session's CSRF token.

pub mod oidc;
pub mod password;
pub mod rbac;
pub mod session;

use std::sync::Arc;

use axum::Json;
use axum::extract::{FromRequestParts, State as AxState};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::error::ApiError;
use crate::state::State;
use rbac::{Principal, Role};

/// Header carrying the CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Prefix of API tokens.
pub const TOKEN_PREFIX: &str = "cst_";

/// An authenticated request.
#[derive(Debug, Clone)]
pub struct Auth {
    /// Who.
    pub principal: Principal,
    /// The session's CSRF token (cookie sessions only).
    pub csrf: Option<String>,
    /// When the session expires (seconds since the epoch; cookie sessions only).
    pub expires: Option<u64>,
    /// The API token's id (token requests only).
    pub token_id: Option<String>,
}

impl Auth {
    /// Whether the credentials are still good (the session has not expired, the token is not
    /// revoked): long-lived streams check this on every event.
    pub fn still_valid(&self, state: &State) -> bool {
        if let Some(exp) = self.expires
            && exp <= session::now_secs()
        {
            return false;
        }
        self.token_id
            .as_ref()
            .is_none_or(|id| state.secret_value(&token_key(id)).is_some())
    }

    /// The principal's role in `project`.
    pub fn role(&self, state: &State, project: &str) -> Role {
        state.policy().role(&self.principal, project)
    }

    /// Refuse unless the principal has at least `needed` in `project`.
    pub fn require(&self, state: &State, project: &str, needed: Role) -> Result<(), ApiError> {
        if self.role(state, project) >= needed {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "{} may not {} in project {project:?}",
                    self.principal.name,
                    match needed {
                        Role::Admin => "administer Applications",
                        Role::Sync => "sync Applications",
                        _ => "read Applications",
                    }
                ),
            ))
        }
    }
}

impl FromRequestParts<Arc<State>> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<State>) -> Result<Self, Self::Rejection> {
        if let Some(token) = bearer(&parts.headers) {
            return match token_principal(state, token) {
                Some((principal, id)) => Ok(Auth {
                    principal,
                    csrf: None,
                    expires: None,
                    token_id: Some(id),
                }),
                None => Err(ApiError::new(StatusCode::UNAUTHORIZED, "invalid or revoked API token")),
            };
        }
        let Some(value) = cookie(&parts.headers, session::COOKIE) else {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication required: log in or send a bearer token",
            ));
        };
        let Some(key) = state.secret_value(SESSION_KEY) else {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "the server has no session key yet: run `capstan install`",
            ));
        };
        let Some(s) = session::decode(value, &key, session::now_secs()) else {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "the session is invalid or has expired: log in again",
            ));
        };
        let changes = !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
        if changes {
            let sent = parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if !constant_time_eq(sent.as_bytes(), s.csrf.as_bytes()) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "missing or wrong X-CSRF-Token header",
                ));
            }
        }
        Ok(Auth {
            principal: Principal {
                name: s.sub,
                groups: s.groups,
                sso: s.sso,
            },
            csrf: Some(s.csrf),
            expires: Some(s.exp),
            token_id: None,
        })
    }
}

/// Key of the session signing key in `capstan-secret`.
pub const SESSION_KEY: &str = "server.secretkey";
/// Key of the admin password hash in `capstan-secret`.
pub const ADMIN_PASSWORD: &str = "admin.password";

/// The key holding `account`'s password hash.
pub fn password_key(account: &str) -> String {
    if account == rbac::ADMIN {
        ADMIN_PASSWORD.into()
    } else {
        format!("accounts.{account}.password")
    }
}

/// The key holding token `id`.
pub fn token_key(id: &str) -> String {
    format!("tokens.{id}")
}

/// Whether `name` may be an account name (it becomes part of a Secret key).
pub fn valid_account(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A new API token for `account`: `(id, token shown once, value stored under tokens.ID)`.
pub fn new_token(account: &str) -> (String, String, String) {
    let id = password::random_secret(6).to_ascii_lowercase().replace(['-', '_'], "0");
    let secret = password::random_secret(24);
    let stored = json!({"account": account, "sha256": sha256_hex(secret.as_bytes())}).to_string();
    (id.clone(), format!("{TOKEN_PREFIX}{id}.{secret}"), stored)
}

fn token_principal(state: &State, token: &str) -> Option<(Principal, String)> {
    let (id, secret) = token.strip_prefix(TOKEN_PREFIX)?.split_once('.')?;
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let stored: serde_json::Value = serde_json::from_slice(&state.secret_value(&token_key(id))?).ok()?;
    let want = stored.get("sha256")?.as_str()?;
    let account = stored.get("account")?.as_str()?;
    constant_time_eq(sha256_hex(secret.as_bytes()).as_bytes(), want.as_bytes()).then(|| {
        (
            Principal {
                name: account.to_string(),
                groups: Vec::new(),
                sso: false,
            },
            id.to_string(),
        )
    })
}

fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Byte-wise comparison whose time does not depend on where the inputs differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Body of `POST /api/session`.
#[derive(Debug, Deserialize)]
pub struct Login {
    username: String,
    password: String,
}

/// `POST /api/session`: check a local account's password and set the session cookie.
pub async fn login(AxState(state): AxState<Arc<State>>, Json(login): Json<Login>) -> Result<Response, ApiError> {
    let refused = || ApiError::new(StatusCode::UNAUTHORIZED, "invalid username or password");
    if !valid_account(&login.username) {
        return Err(refused());
    }
    let Some(key) = state.secret_value(SESSION_KEY) else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server has no session key yet: run `capstan install`",
        ));
    };
    let stored = state
        .secret_value(&password_key(&login.username))
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    let password = login.password;
    // PBKDF2 is deliberately slow: off the async workers. An unknown account costs the same.
    let ok = tokio::task::spawn_blocking(move || match stored {
        Some(hash) => password::verify(&password, &hash),
        None => {
            let _ = password::verify(&password, DUMMY_HASH);
            false
        }
    })
    .await
    .unwrap_or(false);
    if !ok {
        tracing::info!(user = %login.username, "failed login");
        return Err(refused());
    }
    let s = session::Session {
        sub: login.username.clone(),
        groups: Vec::new(),
        sso: false,
        exp: session::now_secs() + session::LIFETIME_SECS,
        csrf: password::random_secret(24),
    };
    let cookie = session_cookie(&state, &s, &key);
    let mut response = Json(json!({"username": s.sub, "groups": s.groups, "csrfToken": s.csrf})).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(response)
}

/// The `Set-Cookie` value starting session `s`.
fn session_cookie(state: &State, s: &session::Session, key: &[u8]) -> String {
    format!(
        "{}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        session::COOKIE,
        session::encode(s, key),
        session::LIFETIME_SECS,
        if state.config.secure_cookies { "; Secure" } else { "" }
    )
}

/// A valid hash of a random password, checked against when the account does not exist so that
/// unknown and known accounts take the same time.
const DUMMY_HASH: &str = "$pbkdf2-sha256$i=600000$AAAAAAAAAAAAAAAAAAAAAA$47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU";

/// `DELETE /api/session`: clear the cookie.
pub async fn logout() -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let cookie = format!("{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0", session::COOKIE);
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

/// `GET /api/userinfo`.
pub async fn userinfo(auth: Auth) -> Json<serde_json::Value> {
    Json(json!({
        "username": auth.principal.name,
        "groups": auth.principal.groups,
        "sso": auth.principal.sso,
        "csrfToken": auth.csrf,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_and_bearer_tokens_are_read_from_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; capstan_session=xyz; b=2"),
        );
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer cst_abc.def"));
        assert_eq!(cookie(&h, "capstan_session"), Some("xyz"));
        assert_eq!(cookie(&h, "missing"), None);
        assert_eq!(bearer(&h), Some("cst_abc.def"));
    }

    #[test]
    fn new_tokens_store_only_a_hash_of_their_secret() {
        let (id, token, stored) = new_token("ci");
        let secret = token.strip_prefix(&format!("{TOKEN_PREFIX}{id}.")).unwrap();
        assert!(!stored.contains(secret));
        assert!(stored.contains(&sha256_hex(secret.as_bytes())));
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric()), "{id}");
    }

    #[test]
    fn account_names_are_restricted_to_secret_key_characters() {
        assert!(valid_account("dev-1"));
        for bad in ["", "Dev", "a.b", "a/b", "../x", &"x".repeat(64)] {
            assert!(!valid_account(bad), "{bad}");
        }
    }

    #[test]
    fn the_dummy_hash_is_well_formed() {
        assert!(DUMMY_HASH.starts_with("$pbkdf2-sha256$i=600000$"));
        assert!(!password::verify("", DUMMY_HASH));
    }

    #[test]
    fn constant_time_comparison_compares() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
