//! Who is asking and whether they may: local accounts and API tokens (in `capstan-secret`; tokens
//! may expire), signed session cookies with CSRF tokens (revocable per account by its session
//! generation), failed-login limits ([`limit`]), and roles per project ([`rbac`]).
//!
//! Every API handler takes an [`Auth`]: extracting it answers 401 without valid credentials, and 403
//! when a cookie-authenticated request that changes something lacks the session's CSRF token.

pub mod limit;
pub mod oidc;
pub mod password;
pub mod rbac;
pub mod session;

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, FromRequestParts, State as AxState};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::api::model::UserInfo;
use crate::error::ApiError;
use crate::state::State;
use rbac::{Principal, Role, Source};

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
    /// When the session or token expires (seconds since the epoch), if it does.
    pub expires: Option<u64>,
    /// The API token's id (token requests only).
    pub token_id: Option<String>,
    /// The account's session generation the cookie was issued at (local sessions only).
    pub generation: Option<u64>,
}

impl Auth {
    /// Whether the credentials are still good (the session or token has not expired, the token is
    /// not revoked, the account's sessions were not revoked): long-lived streams check this on every
    /// event.
    pub fn still_valid(&self, state: &State) -> bool {
        if let Some(exp) = self.expires
            && exp <= session::now_secs()
        {
            return false;
        }
        if let Some(generation) = self.generation
            && generation != session_generation(state, &self.principal.name)
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
                        Role::Promote => "promote to Applications",
                        Role::Action => "run resource actions on Applications",
                        Role::Sync => "sync Applications",
                        _ => "read Applications",
                    }
                ),
            ))
        }
    }
}

impl aide::OperationInput for Auth {
    fn operation_input(_ctx: &mut aide::generate::GenContext, operation: &mut aide::openapi::Operation) {
        for scheme in ["session", "token"] {
            let requirement: aide::openapi::SecurityRequirement =
                [(scheme.to_string(), Vec::new())].into_iter().collect();
            if !operation.security.contains(&requirement) {
                operation.security.push(requirement);
            }
        }
    }

    fn inferred_early_responses(
        ctx: &mut aide::generate::GenContext,
        operation: &mut aide::openapi::Operation,
    ) -> Vec<(Option<aide::openapi::StatusCode>, aide::openapi::Response)> {
        use aide::OperationOutput;
        Json::<crate::error::ErrorBody>::operation_response(ctx, operation)
            .map(|mut r| {
                r.description = "Not authenticated".into();
                (Some(aide::openapi::StatusCode::Code(401)), r)
            })
            .into_iter()
            .collect()
    }
}

impl FromRequestParts<Arc<State>> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<State>) -> Result<Self, Self::Rejection> {
        if let Some(token) = bearer(&parts.headers) {
            return match token_principal(state, token, session::now_secs()) {
                Ok(t) => Ok(Auth {
                    principal: Principal {
                        name: t.account,
                        groups: Vec::new(),
                        source: Source::Token,
                    },
                    csrf: None,
                    expires: t.expires,
                    token_id: Some(t.id),
                    generation: None,
                }),
                Err(err) => Err(ApiError::new(StatusCode::UNAUTHORIZED, err.to_string())),
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
        let generation = (!s.sso).then_some(s.generation);
        if let Some(generation) = generation
            && generation != session_generation(state, &s.sub)
        {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "the session was revoked: log in again",
            ));
        }
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
                source: if s.sso { Source::Sso } else { Source::Local },
            },
            csrf: Some(s.csrf),
            expires: Some(s.exp),
            token_id: None,
            generation,
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

/// The key holding `account`'s session generation: sessions issued at another generation are
/// refused (`capstan account revoke-sessions` and password changes bump it).
pub fn generation_key(account: &str) -> String {
    if account == rbac::ADMIN {
        "admin.sessions".into()
    } else {
        format!("accounts.{account}.sessions")
    }
}

/// `account`'s current session generation (0 until first bumped; an unreadable value counts as 0).
pub fn session_generation(state: &State, account: &str) -> u64 {
    parse_generation(state.secret_value(&generation_key(account)).as_deref())
}

/// A stored session generation (0 when missing or unreadable).
pub fn parse_generation(stored: Option<&[u8]>) -> u64 {
    stored
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
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

/// A new API token for `account`, expiring at `expires` (seconds since the epoch) if given:
/// `(id, token shown once, value stored under tokens.ID)`.
pub fn new_token(account: &str, expires: Option<u64>) -> (String, String, String) {
    let id = password::random_secret(6).to_ascii_lowercase().replace(['-', '_'], "0");
    let secret = password::random_secret(24);
    let mut stored = json!({"account": account, "sha256": sha256_hex(secret.as_bytes())});
    if let Some(exp) = expires {
        stored["expires"] = json!(exp);
    }
    (id.clone(), format!("{TOKEN_PREFIX}{id}.{secret}"), stored.to_string())
}

/// Why an API token is refused (never saying anything about its secret).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Malformed, unknown, revoked or wrong secret.
    #[error("invalid or revoked API token")]
    Invalid,
    /// Past its expiry.
    #[error("token expired")]
    Expired,
}

/// A valid token: its id, account and expiry.
#[derive(Debug, PartialEq, Eq)]
pub struct TokenInfo {
    /// The token's id.
    pub id: String,
    /// The account it acts as.
    pub account: String,
    /// When it expires (seconds since the epoch), if it does.
    pub expires: Option<u64>,
}

fn token_principal(state: &State, token: &str, now: u64) -> Result<TokenInfo, TokenError> {
    let id = token
        .strip_prefix(TOKEN_PREFIX)
        .and_then(|t| t.split_once('.'))
        .map(|(id, _)| id)
        .ok_or(TokenError::Invalid)?;
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(TokenError::Invalid);
    }
    let stored = state.secret_value(&token_key(id)).ok_or(TokenError::Invalid)?;
    check_token(token, &stored, now)
}

/// Check `token` against the value stored for its id at `now`.
pub fn check_token(token: &str, stored: &[u8], now: u64) -> Result<TokenInfo, TokenError> {
    let (id, secret) = token
        .strip_prefix(TOKEN_PREFIX)
        .and_then(|t| t.split_once('.'))
        .ok_or(TokenError::Invalid)?;
    let stored: serde_json::Value = serde_json::from_slice(stored).map_err(|_| TokenError::Invalid)?;
    let want = stored
        .get("sha256")
        .and_then(|v| v.as_str())
        .ok_or(TokenError::Invalid)?;
    let account = stored
        .get("account")
        .and_then(|v| v.as_str())
        .ok_or(TokenError::Invalid)?;
    if !constant_time_eq(sha256_hex(secret.as_bytes()).as_bytes(), want.as_bytes()) {
        return Err(TokenError::Invalid);
    }
    let expires = match stored.get("expires") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or(TokenError::Invalid)?),
    };
    if expires.is_some_and(|exp| exp <= now) {
        return Err(TokenError::Expired);
    }
    Ok(TokenInfo {
        id: id.to_string(),
        account: account.to_string(),
        expires,
    })
}

fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Byte-wise comparison whose time does not depend on where the inputs differ (`subtle`'s).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
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

/// The client's address, when the server was started with connection information (a request routed
/// without it, as in a unit test, has none).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub Option<std::net::IpAddr>);

impl aide::OperationInput for ClientAddr {}

/// The address as logs print it: `127.0.0.1`, or `unknown`.
impl std::fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(ip) => ip.fmt(f),
            None => f.write_str("unknown"),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(ClientAddr(
            parts
                .extensions
                .get::<ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip()),
        ))
    }
}

/// 429 with `Retry-After` (whole seconds, at least 1) and the API's JSON error.
pub fn too_many(message: &str, retry_after: std::time::Duration) -> Response {
    let mut response = ApiError::new(StatusCode::TOO_MANY_REQUESTS, message).into_response();
    let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    response
}

/// Body of `POST /api/session`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct Login {
    /// Local account name.
    username: String,
    /// Its password.
    password: String,
}

/// `POST /api/session`: check a local account's password and set the session cookie. Failed logins
/// are limited per user name and client address ([`limit`]), and at most
/// [`limit::CONCURRENT_CHECKS`] passwords are checked at once.
pub async fn login(
    AxState(state): AxState<Arc<State>>,
    client: ClientAddr,
    Json(login): Json<Login>,
) -> Result<Response, ApiError> {
    let addr = client.0;
    let refused = || ApiError::new(StatusCode::UNAUTHORIZED, "invalid username or password");
    let limited = |wait| too_many("too many failed logins: try again later", wait);
    if let Err(wait) = state.logins.check(&login.username, addr, std::time::Instant::now()) {
        tracing::warn!(account = ?login.username, addr = %client, "login refused: too many failures");
        return Ok(limited(wait));
    }
    if !valid_account(&login.username) {
        // Not a possible account name: quoted, as it is whatever the client sent.
        tracing::warn!(account = ?login.username, addr = %client, "failed login: no such account");
        state.logins.failed(None, addr, std::time::Instant::now());
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
    let Some(turn) = state.logins.turn().await else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many logins at once: try again",
        ));
    };
    // Failures counted while this login waited for its turn count too.
    if let Err(wait) = state.logins.check(&login.username, addr, std::time::Instant::now()) {
        return Ok(limited(wait));
    }
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
    drop(turn);
    if !ok {
        tracing::warn!(account = %login.username, addr = %client, "failed login");
        state
            .logins
            .failed(Some(&login.username), addr, std::time::Instant::now());
        return Err(refused());
    }
    state.logins.succeeded(&login.username);
    let s = session::Session {
        sub: login.username.clone(),
        groups: Vec::new(),
        sso: false,
        exp: session::now_secs() + session::LIFETIME_SECS,
        csrf: password::random_secret(24),
        generation: session_generation(&state, &login.username),
    };
    let cookie = session_cookie(&state, &s, &key);
    let mut response = Json(UserInfo {
        username: s.sub.clone(),
        groups: s.groups.clone(),
        sso: None,
        csrf_token: Some(s.csrf.clone()),
    })
    .into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(response)
}

/// The `Set-Cookie` value starting session `s`.
pub(crate) fn session_cookie(state: &State, s: &session::Session, key: &[u8]) -> String {
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
pub async fn userinfo(auth: Auth) -> Json<UserInfo> {
    Json(UserInfo {
        sso: Some(auth.principal.source == Source::Sso),
        username: auth.principal.name,
        groups: auth.principal.groups,
        csrf_token: auth.csrf,
    })
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
        let (id, token, stored) = new_token("ci", None);
        let secret = token.strip_prefix(&format!("{TOKEN_PREFIX}{id}.")).unwrap();
        assert!(!stored.contains(secret));
        assert!(stored.contains(&sha256_hex(secret.as_bytes())));
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric()), "{id}");
    }

    #[test]
    fn tokens_past_their_expiry_are_refused_as_expired() {
        let (id, token, stored) = new_token("ci", Some(1_000));
        let ok = check_token(&token, stored.as_bytes(), 999).unwrap();
        assert_eq!(
            (ok.id.as_str(), ok.account.as_str(), ok.expires),
            (id.as_str(), "ci", Some(1_000))
        );
        assert_eq!(check_token(&token, stored.as_bytes(), 1_000), Err(TokenError::Expired));
        assert_eq!(TokenError::Expired.to_string(), "token expired");
        // A wrong secret is invalid, not expired (nothing is told about a token one does not hold).
        let forged = format!("{TOKEN_PREFIX}{id}.wrong");
        assert_eq!(check_token(&forged, stored.as_bytes(), 2_000), Err(TokenError::Invalid));
        // Tokens made without an expiry never expire.
        let (_, token, stored) = new_token("ci", None);
        assert_eq!(check_token(&token, stored.as_bytes(), u64::MAX).unwrap().expires, None);
    }

    #[test]
    fn session_generations_are_read_leniently() {
        assert_eq!(parse_generation(None), 0);
        assert_eq!(parse_generation(Some(b"3")), 3);
        assert_eq!(parse_generation(Some(b"x")), 0);
        assert_eq!(generation_key("admin"), "admin.sessions");
        assert_eq!(generation_key("dev"), "accounts.dev.sessions");
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
