//! The OpenID Connect provider as a client sees it: discovery, its key set (JWKS), redeeming an
//! authorization code at the token endpoint, verifying the ID token, and the identity its claims
//! give. Knows nothing of the server's state or HTTP handlers (see [`super`] for the flow).
//!
//! The HTTP client is Capstan's one (`capstan-http`): the system's roots plus an optional `rootCA`,
//! no proxy from the environment, no redirect followed. Plain `http://` is accepted only for loopback
//! issuers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{StatusCode, header};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use capstan_http::{HeaderValue, Options, Request, TlsError, Uri};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;

use super::config::{ConfigError, OidcConfig, check_url};

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

/// Why the provider could not be used or its answer was refused. The messages are shown to the user
/// (the login page's `sso_error`) and logged.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    // --- Configuration -------------------------------------------------------------------------
    /// `oidc.config`, or a URL the provider announces, is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The TLS client could not be built.
    #[error("TLS configuration: {0}")]
    Tls(#[source] TlsError),

    // --- Discovery -----------------------------------------------------------------------------
    /// The discovery document is not what OpenID Connect Discovery specifies.
    #[error("discovery document {url}: {source}")]
    DiscoveryDocument {
        /// Where it was read.
        url: String,
        /// What is wrong with it.
        #[source]
        source: serde_json::Error,
    },
    /// The discovery document names another issuer than the configured one.
    #[error("discovery document {url} names issuer {found:?}, not {expected:?}")]
    IssuerMismatch {
        /// Where it was read.
        url: String,
        /// The issuer it names.
        found: String,
        /// The configured issuer.
        expected: String,
    },
    /// The key set is not a JWK set.
    #[error("key set {url}: {source}")]
    KeySet {
        /// Where it was read.
        url: String,
        /// What is wrong with it.
        #[source]
        source: serde_json::Error,
    },

    // --- HTTP ----------------------------------------------------------------------------------
    /// The request could not be built.
    #[error("{url}: {source}")]
    Request {
        /// Its URL.
        url: String,
        /// Why.
        #[source]
        source: capstan_http::http::Error,
    },
    /// The provider could not be reached.
    #[error("{url}: {detail}")]
    Unreachable {
        /// Its URL.
        url: String,
        /// The error with its sources, as one line.
        detail: String,
        /// The error.
        #[source]
        source: capstan_http::Error,
    },
    /// The answer could not be read (or was too large).
    #[error("{url}: reading the answer: {source}")]
    Read {
        /// Its URL.
        url: String,
        /// Why.
        #[source]
        source: capstan_http::Error,
    },
    /// No answer in time.
    #[error("{url}: no answer within {secs} s")]
    Timeout {
        /// Its URL.
        url: String,
        /// The time allowed.
        secs: u64,
        /// The client's error.
        #[source]
        source: capstan_http::Error,
    },
    /// The provider answered with an error status.
    #[error("{url} answered {status}: {why}")]
    Status {
        /// Its URL.
        url: String,
        /// The status.
        status: StatusCode,
        /// The provider's `error` and `error_description`, or the start of the answer.
        why: String,
    },
    /// The answer is not JSON.
    #[error("{url}: the answer is not JSON")]
    NotJson {
        /// Its URL.
        url: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The token request's form could not be encoded.
    #[error("{0}")]
    Form(#[source] serde_urlencoded::ser::Error),
    /// The token endpoint answered without an ID token.
    #[error("{url} returned no id_token (is the scope openid granted?)")]
    NoIdToken {
        /// The token endpoint.
        url: String,
    },

    // --- Token verification --------------------------------------------------------------------
    /// The ID token is not a JWT.
    #[error("the ID token is malformed: {0}")]
    MalformedToken(#[source] jsonwebtoken::errors::Error),
    /// The ID token is signed with an algorithm not in [`ALGORITHMS`].
    #[error("the ID token is signed with {0:?}, which is not accepted")]
    Algorithm(Algorithm),
    /// No key of the provider's key set matches the token's.
    #[error("no key {0:?} in the provider's key set")]
    NoKey(Option<String>),
    /// Signature, issuer, audience or times are wrong.
    #[error("the ID token was refused: {0}")]
    TokenRefused(#[source] jsonwebtoken::errors::Error),
    /// Several audiences and no `azp` naming this client.
    #[error("the ID token has several audiences and is not authorized for this client (azp)")]
    NotAuthorizedParty,
    /// The token's nonce is not this login's.
    #[error("the ID token's nonce does not match this login")]
    NonceMismatch,

    // --- Identity ------------------------------------------------------------------------------
    /// The configured `usernameClaim` is missing.
    #[error("the ID token has no claim {0:?} (usernameClaim)")]
    MissingClaim(String),
    /// Neither `email` nor `sub`.
    #[error("the ID token has neither email nor sub")]
    NoSubject,
    /// The user name would be an email address the provider has not verified.
    #[error(
        "the provider has not verified this user's email address (email_verified is not true): \
         it cannot be the user name; verify it at the provider, or set usernameClaim to another claim"
    )]
    UnverifiedEmail,
}

/// The client the provider is reached with.
type Http = capstan_http::Client;

/// What the provider's discovery document says (the parts used here).
#[derive(Debug, Clone, Deserialize)]
pub struct Discovery {
    /// The issuer (must be the configured one).
    pub issuer: String,
    /// Where the browser logs in.
    pub authorization_endpoint: String,
    /// Where codes are redeemed.
    pub token_endpoint: String,
    /// The key set.
    pub jwks_uri: String,
}

/// A provider as discovered: endpoints, keys and a client trusting its certificates.
pub struct Provider {
    /// The configuration it was discovered with.
    pub config: OidcConfig,
    /// Its discovery document.
    pub discovery: Discovery,
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
    /// The provider `config` names, discovered now or an hour ago at most.
    pub async fn provider(&self, config: OidcConfig) -> Result<Arc<Provider>, OidcError> {
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
        let discovery: Discovery =
            serde_json::from_value(get_json(&http, &url).await?).map_err(|source| OidcError::DiscoveryDocument {
                url: url.clone(),
                source,
            })?;
        if discovery.issuer.trim_end_matches('/') != config.issuer.trim_end_matches('/') {
            return Err(OidcError::IssuerMismatch {
                url,
                found: discovery.issuer,
                expected: config.issuer,
            });
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

fn http_client(root_ca: Option<&str>) -> Result<Http, OidcError> {
    capstan_http::Client::new(&Options {
        extra_ca: root_ca.map(String::from),
        ..Options::default()
    })
    .map_err(|e| match e {
        TlsError::Protocols(_) => OidcError::Tls(e),
        TlsError::Pem(_) | TlsError::NoCertificate | TlsError::Refused(_) => ConfigError::RootCa(e).into(),
    })
}

async fn fetch_keys(http: &Http, url: &str) -> Result<JwkSet, OidcError> {
    serde_json::from_value(get_json(http, url).await?).map_err(|source| OidcError::KeySet {
        url: url.to_string(),
        source,
    })
}

async fn get_json(http: &Http, url: &str) -> Result<Value, OidcError> {
    let request = Request::get(parse_url(url)?).header(header::ACCEPT, HeaderValue::from_static("application/json"));
    send(http, request, url).await
}

fn parse_url(url: &str) -> Result<Uri, OidcError> {
    url.parse()
        .map_err(|e: capstan_http::http::uri::InvalidUri| OidcError::Request {
            url: url.to_string(),
            source: e.into(),
        })
}

async fn send(http: &Http, request: Request, url: &str) -> Result<Value, OidcError> {
    let answer = http
        .fetch(request, MAX_ANSWER as u64, REQUEST_TIMEOUT)
        .await
        .map_err(|source| match source {
            capstan_http::Error::Timeout { .. } => OidcError::Timeout {
                url: url.to_string(),
                secs: REQUEST_TIMEOUT.as_secs(),
                source,
            },
            capstan_http::Error::Unreachable(_) => OidcError::Unreachable {
                url: url.to_string(),
                detail: capstan_http::chain(&source),
                source,
            },
            capstan_http::Error::Body(_) | capstan_http::Error::TooLarge { .. } => OidcError::Read {
                url: url.to_string(),
                source,
            },
        })?;
    let (status, body) = (answer.status, answer.body);
    let json: Result<Value, serde_json::Error> = serde_json::from_slice(&body);
    if !status.is_success() {
        let why = json
            .as_ref()
            .ok()
            .and_then(|j| {
                let e = j.get("error")?.as_str()?;
                Some(match j.get("error_description").and_then(Value::as_str) {
                    Some(d) => format!("{e}: {d}"),
                    None => e.to_string(),
                })
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
        return Err(OidcError::Status {
            url: url.to_string(),
            status,
            why,
        });
    }
    json.map_err(|source| OidcError::NotJson {
        url: url.to_string(),
        source,
    })
}

/// Exchange the code for tokens; the ID token.
pub async fn redeem(provider: &Provider, code: &str, verifier: &str) -> Result<String, OidcError> {
    let config = &provider.config;
    let redirect_uri = config.redirect_uri();
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect_uri.as_str()),
        ("code_verifier", verifier),
    ];
    let url = &provider.discovery.token_endpoint;
    let mut request = Request::new(capstan_http::Method::POST, parse_url(url)?)
        .header(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        )
        .header(header::ACCEPT, HeaderValue::from_static("application/json"));
    if config.client_secret.is_empty() {
        form.push(("client_id", config.client_id.as_str()));
    } else {
        // client_secret_basic (RFC 6749 §2.3.1): both parts form-encoded before base64.
        let enc = |s: &str| serde_urlencoded::to_string([("", s)]).unwrap_or_default()[1..].to_string();
        let basic = STANDARD.encode(format!("{}:{}", enc(&config.client_id), enc(&config.client_secret)));
        let mut value = HeaderValue::from_str(&format!("Basic {basic}")).map_err(|e| OidcError::Request {
            url: url.clone(),
            source: e.into(),
        })?;
        value.set_sensitive(true);
        request = request.header(header::AUTHORIZATION, value);
    }
    let body = serde_urlencoded::to_string(&form).map_err(OidcError::Form)?;
    let request = request.body(body);
    let answer = send(&provider.http, request, url).await?;
    answer
        .get("id_token")
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| OidcError::NoIdToken { url: url.clone() })
}

/// Check the ID token's signature, issuer, audience, times and nonce; its claims.
pub async fn verify_id_token(provider: &Provider, token: &str, nonce: &str) -> Result<Value, OidcError> {
    let head = jsonwebtoken::decode_header(token).map_err(OidcError::MalformedToken)?;
    if !ALGORITHMS.contains(&head.alg) {
        return Err(OidcError::Algorithm(head.alg));
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
            find_key(&keys.0, head.kid.as_deref(), head.alg).ok_or_else(|| OidcError::NoKey(head.kid.clone()))?
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
) -> Result<Value, OidcError> {
    let mut validation = Validation::new(alg);
    validation.set_audience(&[client_id]);
    validation.set_issuer(&[issuer]);
    validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    validation.leeway = LEEWAY_SECS;
    let data = jsonwebtoken::decode::<Value>(token, key, &validation).map_err(OidcError::TokenRefused)?;
    let claims = data.claims;
    // A token for several audiences must name this client as the party it was issued to.
    if let Some(Value::Array(audiences)) = claims.get("aud")
        && audiences.len() > 1
        && claims.get("azp").and_then(Value::as_str) != Some(client_id)
    {
        return Err(OidcError::NotAuthorizedParty);
    }
    let sent = claims.get("nonce").and_then(Value::as_str).unwrap_or("");
    if !bool::from(subtle::ConstantTimeEq::ct_eq(sent.as_bytes(), nonce.as_bytes())) {
        return Err(OidcError::NonceMismatch);
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
pub fn identity(config: &OidcConfig, claims: &Value) -> Result<(String, Vec<String>), OidcError> {
    let string = |name: &str| claims.get(name).and_then(Value::as_str).filter(|s| !s.is_empty());
    let (claim, user) = match &config.username_claim {
        Some(claim) => (
            claim.as_str(),
            string(claim).ok_or_else(|| OidcError::MissingClaim(claim.clone()))?,
        ),
        None => match string("email") {
            Some(email) => ("email", email),
            None => ("sub", string("sub").ok_or(OidcError::NoSubject)?),
        },
    };
    let verified = matches!(claims.get("email_verified"), Some(Value::Bool(true)))
        || matches!(claims.get("email_verified"), Some(Value::String(s)) if s == "true");
    if claim == "email" && !verified {
        return Err(OidcError::UnverifiedEmail);
    }
    let groups = match claims.get(&config.groups_claim) {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(String::from).collect(),
        Some(Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    };
    Ok((user.to_string(), groups))
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;

    use super::*;
    use crate::auth::session;

    const CONFIG: &str = super::super::config::TEST_CONFIG;

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
        assert!(identity(&c, &claims).unwrap_err().to_string().contains("nickname"));
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
            let err = identity(&c, &unverified).unwrap_err().to_string();
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
            let err = check(&bad).unwrap_err().to_string();
            assert!(err.contains(why), "{field}: {err}");
        }
        let mut shared = good.clone();
        shared["aud"] = serde_json::json!(["capstan", "other-client"]);
        assert!(check(&shared).unwrap_err().to_string().contains("azp"));
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
