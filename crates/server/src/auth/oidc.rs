//! OpenID Connect single sign-on: the authorization-code flow with PKCE against any provider that
//! publishes a discovery document (Dex, Keycloak, Okta, Entra ID, Google, GitLab, …).
//!
//! Configured by the key `oidc.config` of `capstan-secret` (YAML; it holds the client secret, hence a
//! Secret rather than a ConfigMap). `GET /auth/login` sends the browser to the provider with a fresh
//! `state`, `nonce` and PKCE challenge kept in a short-lived signed cookie; `GET /auth/callback`
//! checks them, redeems the code at the token endpoint, verifies the ID token's signature against the
//! provider's JWKS and its issuer, audience, expiry and nonce, and starts an ordinary session whose
//! user and groups come from the token's claims. Roles are then granted by `capstan-rbac` like for
//! local accounts; an SSO user never gets the built-in admin account's rights, whatever its name.
//!
//! The HTTP client is hyper's (already in the binary through kube) with rustls: the system's roots
//! plus an optional `rootCA`. Plain `http://` is accepted only for loopback issuers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Query, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD as B64};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{SESSION_KEY, constant_time_eq, cookie, password, session};
use crate::error::ApiError;
use crate::state::State;

/// Key of the SSO configuration in `capstan-secret`.
pub const CONFIG_KEY: &str = "oidc.config";
/// The cookie carrying the flow's state between `/auth/login` and `/auth/callback`.
pub const STATE_COOKIE: &str = "capstan_oidc";
/// Path of the callback; the redirect URI registered at the provider is `url` + this.
pub const CALLBACK_PATH: &str = "/auth/callback";
/// How long a login at the provider may take.
const FLOW_SECS: u64 = 600;
/// How long discovery documents and keys are reused before they are fetched again.
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);
/// Largest answer read from the provider.
const MAX_ANSWER: usize = 1024 * 1024;
/// Time allowed for one request to the provider.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Clock skew tolerated on the ID token's times.
const LEEWAY_SECS: u64 = 60;
/// Signature algorithms accepted on ID tokens (asymmetric only).
const ALGORITHMS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The `oidc.config` document.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OidcConfig {
    /// Label of the login button ("Log in with NAME").
    #[serde(default = "default_name")]
    pub name: String,
    /// The provider's issuer URL (its discovery document is at `ISSUER/.well-known/openid-configuration`).
    pub issuer: String,
    /// The client id registered at the provider.
    #[serde(rename = "clientID")]
    pub client_id: String,
    /// The client secret (empty for a public client).
    #[serde(default)]
    pub client_secret: String,
    /// Capstan's external URL as browsers reach it; the redirect URI is `URL/auth/callback`.
    pub url: String,
    /// Scopes requested (`openid` is always added).
    #[serde(default = "default_scopes")]
    pub requested_scopes: Vec<String>,
    /// The claim naming the user (default `email`, then `sub` when the token has no email).
    #[serde(default)]
    pub username_claim: Option<String>,
    /// The claim listing the user's groups.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// PEM certificates trusted for the provider besides the system's roots.
    #[serde(default, rename = "rootCA")]
    pub root_ca: Option<String>,
}

fn default_name() -> String {
    "SSO".into()
}

fn default_scopes() -> Vec<String> {
    ["openid", "profile", "email", "groups"].map(String::from).to_vec()
}

fn default_groups_claim() -> String {
    "groups".into()
}

impl OidcConfig {
    /// Parse and check `oidc.config`; errors name the key and what is wrong.
    pub fn parse(text: &[u8]) -> Result<OidcConfig, String> {
        let text = std::str::from_utf8(text).map_err(|_| format!("{CONFIG_KEY}: not UTF-8"))?;
        let config: OidcConfig = serde_saphyr::from_str(text).map_err(|e| format!("{CONFIG_KEY}: {e}"))?;
        check_url("issuer", &config.issuer)?;
        check_url("url", &config.url)?;
        if config.client_id.is_empty() {
            return Err(format!("{CONFIG_KEY}: clientID is empty"));
        }
        Ok(config)
    }

    /// The redirect URI registered at the provider.
    pub fn redirect_uri(&self) -> String {
        format!("{}{CALLBACK_PATH}", self.url.trim_end_matches('/'))
    }

    fn scopes(&self) -> String {
        let mut scopes = vec!["openid".to_string()];
        scopes.extend(self.requested_scopes.iter().filter(|s| *s != "openid").cloned());
        scopes.join(" ")
    }
}

/// `https://` anywhere, `http://` only on loopback (a provider reached in clear text could hand out
/// any identity).
fn check_url(field: &str, url: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{CONFIG_KEY}: {field} {url:?} {why}"));
    if url.starts_with("https://") {
        return Ok(());
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return bad("must start with https://");
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match host.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    if matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
        Ok(())
    } else {
        bad("must use https:// (plain http:// is allowed only on loopback)")
    }
}

/// The client the provider is reached with.
type Http = HttpClient<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// What the provider's discovery document says (the parts used here).
#[derive(Debug, Clone, Deserialize)]
struct Discovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
}

/// A provider as discovered: endpoints, keys and a client trusting its certificates.
struct Provider {
    config: OidcConfig,
    discovery: Discovery,
    keys: tokio::sync::RwLock<(JwkSet, Instant)>,
    http: Http,
    fetched: Instant,
}

/// The discovered provider, reused until the configuration changes or it is an hour old.
#[derive(Default)]
pub struct Sso {
    cached: tokio::sync::Mutex<Option<Arc<Provider>>>,
}

impl Sso {
    async fn provider(&self, config: OidcConfig) -> Result<Arc<Provider>, String> {
        let mut cached = self.cached.lock().await;
        if let Some(p) = cached.as_ref()
            && p.config == config
            && p.fetched.elapsed() < DISCOVERY_TTL
        {
            return Ok(p.clone());
        }
        let http = http_client(config.root_ca.as_deref())?;
        let url = format!(
            "{}/.well-known/openid-configuration",
            config.issuer.trim_end_matches('/')
        );
        let discovery: Discovery = serde_json::from_value(get_json(&http, &url).await?)
            .map_err(|e| format!("discovery document {url}: {e}"))?;
        if discovery.issuer.trim_end_matches('/') != config.issuer.trim_end_matches('/') {
            return Err(format!(
                "discovery document {url} names issuer {:?}, not {:?}",
                discovery.issuer, config.issuer
            ));
        }
        for (field, value) in [
            ("authorization_endpoint", &discovery.authorization_endpoint),
            ("token_endpoint", &discovery.token_endpoint),
            ("jwks_uri", &discovery.jwks_uri),
        ] {
            check_url(field, value)?;
        }
        let keys = fetch_keys(&http, &discovery.jwks_uri).await?;
        let provider = Arc::new(Provider {
            config,
            discovery,
            keys: tokio::sync::RwLock::new((keys, Instant::now())),
            http,
            fetched: Instant::now(),
        });
        *cached = Some(provider.clone());
        Ok(provider)
    }
}

fn http_client(root_ca: Option<&str>) -> Result<Http, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some(pem) = root_ca {
        let certs: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{CONFIG_KEY}: rootCA: {e}"))?;
        if certs.is_empty() {
            return Err(format!("{CONFIG_KEY}: rootCA holds no PEM certificate"));
        }
        let (_, refused) = roots.add_parsable_certificates(certs);
        if refused > 0 {
            return Err(format!(
                "{CONFIG_KEY}: rootCA: {refused} certificate(s) could not be parsed"
            ));
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    Ok(HttpClient::builder(hyper_util::rt::TokioExecutor::new()).build(connector))
}

async fn fetch_keys(http: &Http, url: &str) -> Result<JwkSet, String> {
    serde_json::from_value(get_json(http, url).await?).map_err(|e| format!("key set {url}: {e}"))
}

async fn get_json(http: &Http, url: &str) -> Result<Value, String> {
    let request = hyper::Request::get(url)
        .header(header::ACCEPT, "application/json")
        .body(Full::default())
        .map_err(|e| format!("{url}: {e}"))?;
    send(http, request, url).await
}

async fn send(http: &Http, request: hyper::Request<Full<Bytes>>, url: &str) -> Result<Value, String> {
    let answer = tokio::time::timeout(REQUEST_TIMEOUT, async {
        let response = http
            .request(request)
            .await
            .map_err(|e| format!("{url}: {}", chain(&e)))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| format!("{url}: reading the answer: {e}"))?
            .to_bytes();
        Ok::<_, String>((status, body))
    })
    .await
    .map_err(|_| format!("{url}: no answer within {} s", REQUEST_TIMEOUT.as_secs()))??;
    let (status, body) = answer;
    let json: Option<Value> = serde_json::from_slice(&body).ok();
    if !status.is_success() {
        let why = json
            .as_ref()
            .and_then(|j| {
                let e = j.get("error")?.as_str()?;
                Some(match j.get("error_description").and_then(Value::as_str) {
                    Some(d) => format!("{e}: {d}"),
                    None => e.to_string(),
                })
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
        return Err(format!("{url} answered {status}: {why}"));
    }
    json.ok_or_else(|| format!("{url}: the answer is not JSON"))
}

fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// What the state cookie carries between the two legs of the flow.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct FlowState {
    state: String,
    nonce: String,
    verifier: String,
    return_to: String,
    exp: u64,
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
fn configured(state: &State) -> Option<Result<OidcConfig, String>> {
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
}

/// `GET /auth/login`: send the browser to the provider.
pub async fn login(AxState(state): AxState<Arc<State>>, Query(query): Query<LoginQuery>) -> Result<Response, ApiError> {
    let config = match configured(&state) {
        None => return Err(ApiError::not_found("single sign-on (no oidc.config in capstan-secret)")),
        Some(Err(e)) => return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e)),
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
    let flow = FlowState {
        state: password::random_secret(24),
        nonce: password::random_secret(24),
        verifier: password::random_secret(48),
        return_to: safe_return(query.return_to.as_deref()),
        exp: session::now_secs() + FLOW_SECS,
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
        Ok((session_cookie, return_to)) => redirect(&return_to, &[clear, session_cookie]),
        Err(why) => {
            tracing::info!(%why, "single sign-on refused");
            let q = serde_urlencoded::to_string([("sso_error", why.as_str())]).unwrap_or_default();
            redirect(&format!("/login?{q}"), &[clear])
        }
    }
}

async fn finish(state: &State, headers: &HeaderMap, query: CallbackQuery) -> Result<(String, String), String> {
    if let Some(error) = query.error {
        let description = query.error_description.unwrap_or_default();
        return Err(format!("the provider refused the login: {error} {description}")
            .trim()
            .to_string());
    }
    let config = match configured(state) {
        Some(Ok(c)) => c,
        Some(Err(e)) => return Err(e),
        None => return Err("single sign-on is not configured".into()),
    };
    let key = state
        .secret_value(SESSION_KEY)
        .ok_or("the server has no session key yet: run `capstan install`")?;
    let flow: FlowState = cookie(headers, STATE_COOKIE)
        .and_then(|v| session::open(v, &flow_key(&key)))
        .filter(|f: &FlowState| f.exp > session::now_secs())
        .ok_or("the login took too long or did not start here: try again")?;
    let sent = query.state.unwrap_or_default();
    if !constant_time_eq(sent.as_bytes(), flow.state.as_bytes()) {
        return Err("the provider's answer does not belong to this login (state mismatch): try again".into());
    }
    let code = query
        .code
        .filter(|c| !c.is_empty())
        .ok_or("the provider sent no code")?;
    let provider = state.sso.provider(config).await?;
    let id_token = redeem(&provider, &code, &flow.verifier).await?;
    let claims = verify_id_token(&provider, &id_token, &flow.nonce).await?;
    let (user, groups) = identity(&provider.config, &claims)?;
    tracing::info!(%user, ?groups, "single sign-on login");
    let s = session::Session {
        sub: user,
        groups,
        sso: true,
        exp: session::now_secs() + session::LIFETIME_SECS,
        csrf: password::random_secret(24),
        generation: 0,
    };
    Ok((super::session_cookie(state, &s, &key), flow.return_to))
}

/// Exchange the code for tokens; the ID token.
async fn redeem(provider: &Provider, code: &str, verifier: &str) -> Result<String, String> {
    let config = &provider.config;
    let redirect_uri = config.redirect_uri();
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect_uri.as_str()),
        ("code_verifier", verifier),
    ];
    let url = &provider.discovery.token_endpoint;
    let mut request = hyper::Request::post(url.as_str())
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, "application/json");
    if config.client_secret.is_empty() {
        form.push(("client_id", config.client_id.as_str()));
    } else {
        // client_secret_basic (RFC 6749 §2.3.1): both parts form-encoded before base64.
        let enc = |s: &str| serde_urlencoded::to_string([("", s)]).unwrap_or_default()[1..].to_string();
        let basic = STANDARD.encode(format!("{}:{}", enc(&config.client_id), enc(&config.client_secret)));
        request = request.header(header::AUTHORIZATION, format!("Basic {basic}"));
    }
    let body = serde_urlencoded::to_string(&form).map_err(|e| e.to_string())?;
    let request = request
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("{url}: {e}"))?;
    let answer = send(&provider.http, request, url).await?;
    answer
        .get("id_token")
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| format!("{url} returned no id_token (is the scope openid granted?)"))
}

/// Check the ID token's signature, issuer, audience, times and nonce; its claims.
async fn verify_id_token(provider: &Provider, token: &str, nonce: &str) -> Result<Value, String> {
    let head = jsonwebtoken::decode_header(token).map_err(|e| format!("the ID token is malformed: {e}"))?;
    if !ALGORITHMS.contains(&head.alg) {
        return Err(format!(
            "the ID token is signed with {:?}, which is not accepted",
            head.alg
        ));
    }
    let key = match find_key(&provider.keys.read().await.0, head.kid.as_deref(), head.alg) {
        Some(k) => k,
        None => {
            // The provider may have rotated its keys: fetch them again, at most once a minute.
            let mut keys = provider.keys.write().await;
            if keys.1.elapsed() > Duration::from_secs(60) {
                *keys = (
                    fetch_keys(&provider.http, &provider.discovery.jwks_uri).await?,
                    Instant::now(),
                );
            }
            find_key(&keys.0, head.kid.as_deref(), head.alg)
                .ok_or_else(|| format!("no key {:?} in the provider's key set", head.kid))?
        }
    };
    check_id_token(
        token,
        &key,
        head.alg,
        &provider.discovery.issuer,
        &provider.config.client_id,
        nonce,
    )
}

/// The claims of `token` if `key` signed it with `alg` for `client_id`, it comes from `issuer`, is
/// within its validity (60 s of skew allowed) and carries `nonce`.
fn check_id_token(
    token: &str,
    key: &DecodingKey,
    alg: Algorithm,
    issuer: &str,
    client_id: &str,
    nonce: &str,
) -> Result<Value, String> {
    let mut validation = Validation::new(alg);
    validation.set_audience(&[client_id]);
    validation.set_issuer(&[issuer]);
    validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    validation.leeway = LEEWAY_SECS;
    let data =
        jsonwebtoken::decode::<Value>(token, key, &validation).map_err(|e| format!("the ID token was refused: {e}"))?;
    let claims = data.claims;
    // A token for several audiences must name this client as the party it was issued to.
    if let Some(Value::Array(audiences)) = claims.get("aud")
        && audiences.len() > 1
        && claims.get("azp").and_then(Value::as_str) != Some(client_id)
    {
        return Err("the ID token has several audiences and is not authorized for this client (azp)".into());
    }
    let sent = claims.get("nonce").and_then(Value::as_str).unwrap_or("");
    if !constant_time_eq(sent.as_bytes(), nonce.as_bytes()) {
        return Err("the ID token's nonce does not match this login".into());
    }
    Ok(claims)
}

fn find_key(keys: &JwkSet, kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
    let jwk = match kid {
        Some(kid) => keys.find(kid)?,
        // Without a kid, a key set of exactly one key is unambiguous.
        None if keys.keys.len() == 1 => &keys.keys[0],
        None => return None,
    };
    if let Some(key_alg) = jwk.common.key_algorithm
        && format!("{key_alg:?}") != format!("{alg:?}")
    {
        return None;
    }
    DecodingKey::from_jwk(jwk).ok()
}

/// The user name and groups the claims give. When the user name is the `email` claim, the provider
/// must have verified the address (`email_verified: true`): anyone can claim an unverified one.
fn identity(config: &OidcConfig, claims: &Value) -> Result<(String, Vec<String>), String> {
    let string = |name: &str| claims.get(name).and_then(Value::as_str).filter(|s| !s.is_empty());
    let (claim, user) = match &config.username_claim {
        Some(claim) => (
            claim.as_str(),
            string(claim).ok_or_else(|| format!("the ID token has no claim {claim:?} (usernameClaim)"))?,
        ),
        None => match string("email") {
            Some(email) => ("email", email),
            None => ("sub", string("sub").ok_or("the ID token has neither email nor sub")?),
        },
    };
    let verified = matches!(claims.get("email_verified"), Some(Value::Bool(true)))
        || matches!(claims.get("email_verified"), Some(Value::String(s)) if s == "true");
    if claim == "email" && !verified {
        return Err(
            "the provider has not verified this user's email address (email_verified is not true): \
             it cannot be the user name; verify it at the provider, or set usernameClaim to another claim"
                .into(),
        );
    }
    let groups = match claims.get(&config.groups_claim) {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(String::from).collect(),
        Some(Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    };
    Ok((user.to_string(), groups))
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

    const CONFIG: &str = "
name: Dex
issuer: https://dex.example.test/
clientID: capstan
clientSecret: s3cret
url: https://capstan.example.test/
";

    #[test]
    fn a_configuration_parses_with_defaults() {
        let c = OidcConfig::parse(CONFIG.as_bytes()).unwrap();
        assert_eq!(c.redirect_uri(), "https://capstan.example.test/auth/callback");
        assert_eq!(c.scopes(), "openid profile email groups");
        assert_eq!(c.groups_claim, "groups");
        assert_eq!(c.username_claim, None);
    }

    #[test]
    fn bad_configurations_name_what_is_wrong() {
        let err = OidcConfig::parse(b"issuer: https://x\nclientID: c\nurl: https://y\nclientSecrt: s\n").unwrap_err();
        assert!(err.contains("oidc.config") && err.contains("clientSecrt"), "{err}");
        let err = OidcConfig::parse(b"issuer: http://idp.example.test\nclientID: c\nurl: https://y\n").unwrap_err();
        assert!(err.contains("issuer") && err.contains("https://"), "{err}");
        let err = OidcConfig::parse(b"issuer: https://x\nclientID: ''\nurl: https://y\n").unwrap_err();
        assert!(err.contains("clientID"), "{err}");
        assert!(
            OidcConfig::parse(b"issuer: http://127.0.0.1:5556/dex\nclientID: c\nurl: http://localhost:8080\n").is_ok()
        );
        assert!(check_url("issuer", "http://127.0.0.1.evil.test/").is_err());
        assert!(check_url("issuer", "http://localhost@evil.test/").is_err());
    }

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
        };
        let sealed = session::seal(&flow, &flow_key(b"k"));
        assert_eq!(session::open::<FlowState>(&sealed, &flow_key(b"k")), Some(flow));
        assert_eq!(session::open::<FlowState>(&sealed, b"k"), None);
    }

    #[test]
    fn user_and_groups_come_from_the_configured_claims() {
        let mut c = OidcConfig::parse(CONFIG.as_bytes()).unwrap();
        let claims = serde_json::json!({"sub": "123", "email": "dev@example.test", "email_verified": true,
                                        "groups": ["a", "b"], "name": "Dev"});
        assert_eq!(
            identity(&c, &claims).unwrap(),
            ("dev@example.test".to_string(), vec!["a".to_string(), "b".to_string()])
        );
        c.username_claim = Some("name".into());
        c.groups_claim = "roles".into();
        assert_eq!(identity(&c, &claims).unwrap(), ("Dev".to_string(), vec![]));
        c.username_claim = Some("nickname".into());
        assert!(identity(&c, &claims).unwrap_err().contains("nickname"));
        c.username_claim = None;
        assert_eq!(identity(&c, &serde_json::json!({"sub": "123"})).unwrap().0, "123");
    }

    #[test]
    fn an_unverified_email_is_never_the_user_name() {
        let mut c = OidcConfig::parse(CONFIG.as_bytes()).unwrap();
        for unverified in [
            serde_json::json!({"sub": "123", "email": "admin@example.test"}),
            serde_json::json!({"sub": "123", "email": "admin@example.test", "email_verified": false}),
            serde_json::json!({"sub": "123", "email": "admin@example.test", "email_verified": "false"}),
        ] {
            let err = identity(&c, &unverified).unwrap_err();
            assert!(err.contains("email_verified"), "{err}");
            c.username_claim = Some("email".into());
            assert!(identity(&c, &unverified).is_err(), "usernameClaim: email");
            // Another claim as the user name does not depend on the email.
            c.username_claim = Some("sub".into());
            assert_eq!(identity(&c, &unverified).unwrap().0, "123");
            c.username_claim = None;
        }
        let verified = serde_json::json!({"sub": "1", "email": "a@example.test", "email_verified": "true"});
        assert_eq!(identity(&c, &verified).unwrap().0, "a@example.test");
    }

    /// An ES256 key pair made here, and its public half as a JWK set with key id `k1`.
    fn signer() -> (jsonwebtoken::EncodingKey, JwkSet) {
        use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        let public = pair.public_key().as_ref();
        let jwks = serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256", "use": "sig",
            "x": B64.encode(&public[1..33]), "y": B64.encode(&public[33..65]),
        }]});
        (
            jsonwebtoken::EncodingKey::from_ec_der(pkcs8.as_ref()),
            serde_json::from_value(jwks).unwrap(),
        )
    }

    fn token(key: &jsonwebtoken::EncodingKey, claims: Value) -> String {
        let mut head = jsonwebtoken::Header::new(Algorithm::ES256);
        head.kid = Some("k1".into());
        jsonwebtoken::encode(&head, &claims, key).unwrap()
    }

    #[test]
    fn id_tokens_are_checked_for_signature_issuer_audience_expiry_and_nonce() {
        let (signing, jwks) = signer();
        let key = find_key(&jwks, Some("k1"), Algorithm::ES256).expect("the key is found by kid");
        assert!(find_key(&jwks, Some("k2"), Algorithm::ES256).is_none());
        assert!(
            find_key(&jwks, Some("k1"), Algorithm::RS256).is_none(),
            "the key says ES256"
        );
        let now = session::now_secs();
        let good = serde_json::json!({
            "iss": "https://idp.test", "aud": "capstan", "sub": "u1", "nonce": "n1",
            "exp": now + 300, "iat": now, "email": "dev@example.test",
        });
        let check = |claims: &Value| {
            check_id_token(
                &token(&signing, claims.clone()),
                &key,
                Algorithm::ES256,
                "https://idp.test",
                "capstan",
                "n1",
            )
        };
        assert_eq!(check(&good).unwrap()["email"], "dev@example.test");
        for (field, value, why) in [
            ("iss", serde_json::json!("https://evil.test"), "Issuer"),
            ("aud", serde_json::json!("other-client"), "Audience"),
            ("exp", serde_json::json!(now - 3600), "Expired"),
            ("nonce", serde_json::json!("replayed"), "nonce"),
        ] {
            let mut bad = good.clone();
            bad[field] = value;
            let err = check(&bad).unwrap_err();
            assert!(err.contains(why), "{field}: {err}");
        }
        let mut shared = good.clone();
        shared["aud"] = serde_json::json!(["capstan", "other-client"]);
        assert!(check(&shared).unwrap_err().contains("azp"));
        shared["azp"] = "capstan".into();
        assert!(check(&shared).is_ok());
        // A token signed by another key, and one whose payload was altered after signing.
        let (other, _) = signer();
        let forged = token(&other, good.clone());
        assert!(check_id_token(&forged, &key, Algorithm::ES256, "https://idp.test", "capstan", "n1").is_err());
        let genuine = token(&signing, good.clone());
        let parts: Vec<&str> = genuine.split('.').collect();
        let mut altered = good.clone();
        altered["email"] = "admin@example.test".into();
        let altered = format!("{}.{}.{}", parts[0], B64.encode(altered.to_string()), parts[2]);
        assert!(check_id_token(&altered, &key, Algorithm::ES256, "https://idp.test", "capstan", "n1").is_err());
    }

    #[test]
    fn symmetric_and_unsigned_tokens_are_not_accepted() {
        assert!(!ALGORITHMS.contains(&Algorithm::HS256));
        let unsigned = format!(
            "{}.{}.",
            B64.encode(r#"{"alg":"none","typ":"JWT"}"#),
            B64.encode(r#"{"sub":"admin"}"#)
        );
        assert!(jsonwebtoken::decode_header(&unsigned).is_err());
    }
}
