//! Single sign-on for the command line (`capstan login SERVER --sso`): the same provider flow as the
//! browser's, started with the CLI's PKCE challenge (`/auth/login?cli_challenge=…`), ending not in
//! a browser session but in a **CLI code** — sealed, two minutes long, bound to that challenge — that
//! the browser hands to the CLI: redirected to the CLI's loopback listener
//! (`http://127.0.0.1:PORT/callback?code=…`, `cli_port=PORT`), or shown on a page for the user to
//! paste (no port: machines without a browser of their own). The CLI redeems it with its verifier
//! at `POST /api/session/cli` for an ordinary session. A code seen by anyone else is useless
//! without the verifier, which never leaves the CLI.

use std::sync::Arc;

use axum::Json;
use axum::extract::State as AxState;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};

use crate::api::model::UserInfo;
use crate::auth::{SESSION_KEY, constant_time_eq, password, session};
use crate::error::ApiError;
use crate::state::State;

/// How long a CLI code may wait to be redeemed.
const CODE_SECS: u64 = 120;

/// The PKCE challenge of `verifier`: base64url (no padding) of its SHA-256, as RFC 7636's `S256`.
pub fn challenge_of(verifier: &str) -> String {
    B64.encode(ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes()))
}

/// What the flow cookie keeps of a CLI login.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(super) struct CliFlow {
    /// The CLI's PKCE challenge (base64url SHA-256 of its verifier).
    pub challenge: String,
    /// The CLI's loopback port, if it listens for the code.
    pub port: Option<u16>,
}

impl CliFlow {
    /// The flow asked for by `/auth/login`'s query, if any; an error for a malformed one.
    pub(super) fn from_query(challenge: Option<&str>, port: Option<u16>) -> Result<Option<CliFlow>, ApiError> {
        let Some(challenge) = challenge else {
            return match port {
                Some(_) => Err(ApiError::bad_request("cli_port needs cli_challenge")),
                None => Ok(None),
            };
        };
        let valid = challenge.len() == 43
            && challenge
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            return Err(ApiError::bad_request(
                "cli_challenge must be a base64url SHA-256 (43 characters)",
            ));
        }
        if port.is_some_and(|p| p < 1024) {
            return Err(ApiError::bad_request("cli_port must be 1024 or above"));
        }
        Ok(Some(CliFlow {
            challenge: challenge.to_string(),
            port,
        }))
    }
}

/// The sealed code handed to the CLI.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct CliCode {
    sub: String,
    groups: Vec<String>,
    challenge: String,
    exp: u64,
}

fn code_key(session_key: &[u8]) -> Vec<u8> {
    [session_key, b":cli-code"].concat()
}

/// A CLI login the provider has finished, waiting for the person to confirm it in the browser
/// (sealed into the confirmation form).
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Pending {
    sub: String,
    groups: Vec<String>,
    flow: CliFlow,
    exp: u64,
}

fn pending_key(session_key: &[u8]) -> Vec<u8> {
    [session_key, b":cli-pending"].concat()
}

/// Escape text for HTML.
fn html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// The end of a CLI login at the provider: a page asking the person to confirm that they started
/// a command-line login just now (anyone can start one, with their own challenge, and send the link:
/// nothing is handed over without this click), posting to [`confirm`].
pub(super) fn ask(flow: &CliFlow, user: String, groups: Vec<String>, key: &[u8]) -> Response {
    let pending = session::seal(
        &Pending {
            sub: user.clone(),
            groups,
            flow: flow.clone(),
            exp: session::now_secs() + CODE_SECS,
        },
        &pending_key(key),
    );
    let whereto = match flow.port {
        Some(port) => format!("to the <code>capstan login</code> waiting on this computer (port {port})"),
        None => "as a code to paste into the terminal where <code>capstan login</code> waits".into(),
    };
    let page = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Capstan: command-line login</title></head><body>\
         <h1>Log in the command line as {user}?</h1>\
         <p>A <code>capstan login --sso</code> asked to log in as <b>{user}</b>. Continue only if you started it yourself, just now: \
         the login is handed {whereto}. Never give the code to anyone.</p>\
         <form method=\"post\" action=\"/auth/cli/confirm\"><input type=\"hidden\" name=\"pending\" value=\"{pending}\">\
         <button type=\"submit\" id=\"confirm\">Log in the command line</button></form></body></html>",
        user = html(&user),
        pending = html(&pending),
    );
    let mut response = (StatusCode::OK, page).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // The form posts here, and its answer redirects to the CLI's loopback port: browsers hold a
    // form's redirects to `form-action` too.
    let form_action = match flow.port {
        Some(port) => format!("'self' http://127.0.0.1:{port}"),
        None => "'self'".into(),
    };
    let policy = format!("default-src 'none'; form-action {form_action}; base-uri 'none'; frame-ancestors 'none'");
    if let Ok(v) = HeaderValue::from_str(&policy) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    response
}

/// Form of `POST /auth/cli/confirm`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct Confirm {
    /// The sealed pending login of the confirmation page.
    pending: String,
}

/// `POST /auth/cli/confirm`: the person confirmed; the code goes to the CLI's listener or is shown.
pub async fn confirm(AxState(state): AxState<Arc<State>>, body: axum::body::Bytes) -> Result<Response, ApiError> {
    // The page's form (application/x-www-form-urlencoded), read by hand: axum's `Form` is a feature
    // the server does not otherwise need.
    let form: Confirm = serde_urlencoded::from_bytes(&body)
        .map_err(|e| ApiError::bad_request(format!("the confirmation form: {e}")))?;
    let Some(key) = state.secret_value(SESSION_KEY) else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server has no session key yet: run `capstan install`",
        ));
    };
    let pending: Pending = session::open(form.pending.trim(), &pending_key(&key))
        .filter(|p: &Pending| p.exp > session::now_secs())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "the login took too long or did not start here: run capstan login again",
            )
        })?;
    Ok(finish(&pending.flow, pending.sub, pending.groups, &key))
}

/// The code, to the CLI's listener or on a page.
fn finish(flow: &CliFlow, user: String, groups: Vec<String>, key: &[u8]) -> Response {
    let code = session::seal(
        &CliCode {
            sub: user,
            groups,
            challenge: flow.challenge.clone(),
            exp: session::now_secs() + CODE_SECS,
        },
        &code_key(key),
    );
    match flow.port {
        Some(port) => super::redirect(&format!("http://127.0.0.1:{port}/callback?code={code}"), &[]),
        None => {
            let mut response = (
                StatusCode::OK,
                format!(
                    "Logged in. Paste this code into the terminal where `capstan login` waits (it works for {} minutes, and only there):\n\n{code}\n",
                    CODE_SECS / 60
                ),
            )
                .into_response();
            let h = response.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
    }
}

/// Body of `POST /api/session/cli`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Redeem {
    /// The code the browser handed over.
    code: String,
    /// The PKCE verifier whose challenge started the login.
    verifier: String,
}

/// `POST /api/session/cli`: redeem a CLI code for a session (cookie and CSRF token, as a password
/// login answers).
pub async fn redeem(AxState(state): AxState<Arc<State>>, Json(body): Json<Redeem>) -> Result<Response, ApiError> {
    let refused = || {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "the code is wrong, expired, or not this login's",
        )
    };
    let Some(key) = state.secret_value(SESSION_KEY) else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server has no session key yet: run `capstan install`",
        ));
    };
    let code: CliCode = session::open(body.code.trim(), &code_key(&key))
        .filter(|c: &CliCode| c.exp > session::now_secs())
        .ok_or_else(refused)?;
    let challenge = challenge_of(&body.verifier);
    if !constant_time_eq(challenge.as_bytes(), code.challenge.as_bytes()) {
        return Err(refused());
    }
    tracing::info!(user = %code.sub, "single sign-on login from the CLI");
    let s = session::Session {
        sub: code.sub,
        groups: code.groups,
        sso: true,
        exp: session::now_secs() + session::LIFETIME_SECS,
        csrf: password::random_secret(24),
        generation: 0,
    };
    let cookie = crate::auth::session_cookie(&state, &s, &key);
    let mut response = Json(UserInfo {
        username: s.sub.clone(),
        groups: s.groups.clone(),
        sso: Some(true),
        csrf_token: Some(s.csrf.clone()),
    })
    .into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_well_formed_challenge_and_an_unprivileged_port_start_a_cli_login() {
        let challenge = B64.encode(ring::digest::digest(&ring::digest::SHA256, b"verifier"));
        assert_eq!(challenge.len(), 43);
        assert!(CliFlow::from_query(None, None).expect("none").is_none());
        assert!(
            CliFlow::from_query(Some(&challenge), Some(49152))
                .expect("ok")
                .is_some()
        );
        assert!(
            CliFlow::from_query(Some(&challenge), None)
                .expect("paste")
                .is_some_and(|f| f.port.is_none())
        );
        assert!(CliFlow::from_query(Some("short"), None).is_err());
        assert!(CliFlow::from_query(Some(&challenge), Some(80)).is_err());
        assert!(CliFlow::from_query(None, Some(49152)).is_err());
    }

    #[test]
    fn a_code_opens_only_with_its_own_key() {
        let code = CliCode {
            sub: "alice".into(),
            groups: vec![],
            challenge: "c".into(),
            exp: u64::MAX,
        };
        let sealed = session::seal(&code, &code_key(b"k"));
        assert_eq!(session::open::<CliCode>(&sealed, &code_key(b"k")), Some(code));
        assert_eq!(session::open::<CliCode>(&sealed, b"k"), None, "never a session");
    }
}
