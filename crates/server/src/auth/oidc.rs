//! OpenID Connect single sign-on: the authorization-code flow with PKCE against any provider that
//! publishes a discovery document (Dex, Keycloak, Okta, Entra ID, Google, GitLab, …).
//!
//! Configured by the key `oidc.config` of `capstan-secret` (YAML; it holds the client secret, hence a
//! Secret rather than a ConfigMap; see [`config`]). `GET /auth/login` sends the browser to the
//! provider with a fresh `state`, `nonce` and PKCE challenge kept in a short-lived signed cookie;
//! `GET /auth/callback` checks them, redeems the code at the token endpoint, verifies the ID token's
//! signature against the provider's JWKS and its issuer, audience, expiry and nonce, and starts an
//! ordinary session whose user and groups come from the token's claims. Roles are then granted by
//! `capstan-rbac` like for local accounts; an SSO user never gets the built-in admin account's rights,
//! whatever its name.
//!
//! This file holds the HTTP handlers and the flow; talking to the provider is [`provider`]'s, which
//! knows nothing of the server's state.

pub mod cli;
pub mod config;
pub mod provider;

use std::sync::Arc;

use axum::extract::{Query, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};

pub use self::config::{CALLBACK_PATH, CONFIG_KEY, ConfigError, OidcConfig};
pub use self::provider::{OidcError, Sso};
use crate::auth::{SESSION_KEY, constant_time_eq, cookie, password, session};
use crate::error::ApiError;
use crate::state::State;

/// The cookie carrying the flow's state between `/auth/login` and `/auth/callback`.
pub const STATE_COOKIE: &str = "capstan_oidc";
/// How long a login at the provider may take.
const FLOW_SECS: u64 = 600;

/// Why a login could not be finished; the message goes back to the login page (`sso_error`).
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The provider sent an error instead of a code.
    #[error("{}", refused(.error, .description))]
    ProviderRefused {
        /// The provider's `error`.
        error: String,
        /// Its `error_description`.
        description: String,
    },
    /// No `oidc.config`.
    #[error("single sign-on is not configured")]
    NotConfigured,
    /// `oidc.config` is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `capstan install` has not run.
    #[error("the server has no session key yet: run `capstan install`")]
    NoSessionKey,
    /// No valid flow cookie.
    #[error("the login took too long or did not start here: try again")]
    FlowExpired,
    /// The `state` parameter is not this login's.
    #[error("the provider's answer does not belong to this login (state mismatch): try again")]
    StateMismatch,
    /// No `code` parameter.
    #[error("the provider sent no code")]
    NoCode,
    /// Discovery, redeeming the code, the ID token or the identity failed.
    #[error(transparent)]
    Provider(#[from] OidcError),
}

fn refused(error: &str, description: &str) -> String {
    format!("the provider refused the login: {error} {description}")
        .trim()
        .to_string()
}

/// What the state cookie carries between the two legs of the flow.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct FlowState {
    state: String,
    nonce: String,
    verifier: String,
    return_to: String,
    exp: u64,
    /// A login for the command line (`capstan login --sso`): it ends in a code for the CLI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cli: Option<cli::CliFlow>,
}

/// The state cookie is signed with a key of its own, so that it can never pass for a session.
fn flow_key(session_key: &[u8]) -> Vec<u8> {
    [session_key, b":oidc-flow"].concat()
}

/// A path inside this server to return to after logging in (anything else becomes `/applications`).
fn safe_return(path: Option<&str>) -> String {
    match path {
        Some(p)
            if p.starts_with('/')
                && !p.starts_with("//")
                && !p.contains('\\')
                && !p.starts_with("/auth/")
                && !p.chars().any(char::is_control) =>
        {
            p.to_string()
        }
        _ => "/applications".into(),
    }
}

/// The configuration in `capstan-secret`: `None` when SSO is off, an error when it is unreadable.
fn configured(state: &State) -> Option<Result<OidcConfig, ConfigError>> {
    state.secret_value(CONFIG_KEY).map(|v| OidcConfig::parse(&v))
}

/// `GET /api/settings`: what the login page needs to know before anyone logs in.
pub async fn settings(AxState(state): AxState<Arc<State>>) -> axum::Json<crate::api::model::Settings> {
    let sso = match configured(&state) {
        Some(Ok(c)) => Some(crate::api::model::SsoSettings {
            name: c.name,
            login_path: "/auth/login".into(),
        }),
        _ => None,
    };
    axum::Json(crate::api::model::Settings { sso })
}

/// Query of `GET /auth/login`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct LoginQuery {
    /// A path of this server to return to after logging in.
    return_to: Option<String>,
    /// `capstan login --sso`: the CLI's PKCE challenge (base64url SHA-256 of its verifier).
    cli_challenge: Option<String>,
    /// `capstan login --sso`: the CLI's loopback port (without it, the code is shown to paste).
    cli_port: Option<u16>,
}

/// `GET /auth/login`: send the browser to the provider.
pub async fn login(AxState(state): AxState<Arc<State>>, Query(query): Query<LoginQuery>) -> Result<Response, ApiError> {
    let config = match configured(&state) {
        None => return Err(ApiError::not_found("single sign-on (no oidc.config in capstan-secret)")),
        Some(Err(e)) => return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
        Some(Ok(c)) => c,
    };
    let Some(key) = state.secret_value(SESSION_KEY) else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server has no session key yet: run `capstan install`",
        ));
    };
    let provider = state.sso.provider(config).await.map_err(|e| {
        tracing::warn!(error = %e, "single sign-on: provider discovery failed");
        ApiError::new(StatusCode::BAD_GATEWAY, format!("single sign-on provider: {e}"))
    })?;
    let cli = cli::CliFlow::from_query(query.cli_challenge.as_deref(), query.cli_port)?;
    let flow = FlowState {
        state: password::random_secret(24),
        nonce: password::random_secret(24),
        verifier: password::random_secret(48),
        return_to: safe_return(query.return_to.as_deref()),
        exp: session::now_secs() + FLOW_SECS,
        cli,
    };
    let challenge = B64.encode(ring::digest::digest(&ring::digest::SHA256, flow.verifier.as_bytes()));
    let config = &provider.config;
    let params = serde_urlencoded::to_string([
        ("response_type", "code"),
        ("client_id", config.client_id.as_str()),
        ("redirect_uri", config.redirect_uri().as_str()),
        ("scope", config.scopes().as_str()),
        ("state", flow.state.as_str()),
        ("nonce", flow.nonce.as_str()),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
    ])
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let endpoint = &provider.discovery.authorization_endpoint;
    let sep = if endpoint.contains('?') { '&' } else { '?' };
    let location = format!("{endpoint}{sep}{params}");
    // SameSite=Lax: the callback is a top-level navigation coming back from the provider's site.
    let cookie = format!(
        "{STATE_COOKIE}={}; Path=/auth; HttpOnly; SameSite=Lax; Max-Age={FLOW_SECS}{}",
        session::seal(&flow, &flow_key(&key)),
        if state.config.secure_cookies { "; Secure" } else { "" }
    );
    Ok(redirect(&location, &[cookie]))
}

/// Query of `GET /auth/callback`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CallbackQuery {
    /// The authorisation code.
    code: Option<String>,
    /// The state this server sent.
    state: Option<String>,
    /// The provider's error, if it refused.
    error: Option<String>,
    /// Its description.
    error_description: Option<String>,
}

/// `GET /auth/callback`: finish the flow, start a session, go back to the UI. Failures go back to
/// the login page with the reason in `sso_error`.
pub async fn callback(
    AxState(state): AxState<Arc<State>>,
    headers: HeaderMap,
    Query(query): Query<CallbackQuery>,
) -> Response {
    let clear = format!("{STATE_COOKIE}=; Path=/auth; HttpOnly; SameSite=Lax; Max-Age=0");
    match finish(&state, &headers, query).await {
        Ok(Finished::Cli(mut response)) => {
            if let Ok(v) = HeaderValue::from_str(&clear) {
                response.headers_mut().append(header::SET_COOKIE, v);
            }
            response
        }
        Ok(Finished::Browser(session_cookie, return_to)) => redirect(&return_to, &[clear, session_cookie]),
        Err(why) => {
            tracing::info!(%why, "single sign-on refused");
            let q = serde_urlencoded::to_string([("sso_error", why.to_string())]).unwrap_or_default();
            redirect(&format!("/login?{q}"), &[clear])
        }
    }
}

/// How a login ends: a browser session, or a code for the CLI.
enum Finished {
    Browser(String, String),
    Cli(Response),
}

async fn finish(state: &State, headers: &HeaderMap, query: CallbackQuery) -> Result<Finished, LoginError> {
    if let Some(error) = query.error {
        let description = query.error_description.unwrap_or_default();
        return Err(LoginError::ProviderRefused { error, description });
    }
    let config = match configured(state) {
        Some(Ok(c)) => c,
        Some(Err(e)) => return Err(e.into()),
        None => return Err(LoginError::NotConfigured),
    };
    let key = state.secret_value(SESSION_KEY).ok_or(LoginError::NoSessionKey)?;
    let flow: FlowState = cookie(headers, STATE_COOKIE)
        .and_then(|v| session::open(v, &flow_key(&key)))
        .filter(|f: &FlowState| f.exp > session::now_secs())
        .ok_or(LoginError::FlowExpired)?;
    let sent = query.state.unwrap_or_default();
    if !constant_time_eq(sent.as_bytes(), flow.state.as_bytes()) {
        return Err(LoginError::StateMismatch);
    }
    let code = query.code.filter(|c| !c.is_empty()).ok_or(LoginError::NoCode)?;
    let provider = state.sso.provider(config).await?;
    let id_token = provider::redeem(&provider, &code, &flow.verifier).await?;
    let claims = provider::verify_id_token(&provider, &id_token, &flow.nonce).await?;
    let (user, groups) = provider::identity(&provider.config, &claims)?;
    if let Some(flow) = &flow.cli {
        return Ok(Finished::Cli(cli::ask(flow, user, groups, &key)));
    }
    tracing::info!(%user, ?groups, "single sign-on login");
    let s = session::Session {
        sub: user,
        groups,
        sso: true,
        exp: session::now_secs() + session::LIFETIME_SECS,
        csrf: password::random_secret(24),
        generation: 0,
    };
    Ok(Finished::Browser(
        crate::auth::session_cookie(state, &s, &key),
        flow.return_to,
    ))
}

fn redirect(location: &str, cookies: &[String]) -> Response {
    let mut response = (StatusCode::SEE_OTHER, "").into_response();
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(location) {
        headers.insert(header::LOCATION, v);
    }
    for c in cookies {
        if let Ok(v) = HeaderValue::from_str(c) {
            headers.append(header::SET_COOKIE, v);
        }
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_of_this_server_are_returned_to() {
        assert_eq!(safe_return(Some("/applications/guestbook")), "/applications/guestbook");
        for bad in [
            "//evil.test/x",
            "https://evil.test",
            "/\\evil.test",
            "/auth/callback",
            "x",
            "/a\nb",
        ] {
            assert_eq!(safe_return(Some(bad)), "/applications", "{bad}");
        }
        assert_eq!(safe_return(None), "/applications");
    }

    #[test]
    fn the_flow_cookie_is_signed_apart_from_sessions() {
        let flow = FlowState {
            state: "s".into(),
            nonce: "n".into(),
            verifier: "v".into(),
            return_to: "/".into(),
            exp: u64::MAX,
            cli: None,
        };
        let sealed = session::seal(&flow, &flow_key(b"k"));
        assert_eq!(session::open::<FlowState>(&sealed, &flow_key(b"k")), Some(flow));
        assert_eq!(session::open::<FlowState>(&sealed, b"k"), None);
    }
}
