//! The HTTP transport: hyper's client (already in Capstan through kube) with rustls (ring), the
//! system's roots plus the store's own CA, a connect timeout and a whole-request timeout, and
//! answers cut at [`BODY_LIMIT`] while they stream. The token travels in `X-Vault-Token`, marked
//! sensitive. hyper-util's client reads no proxy settings from the environment.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Method, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use crate::config::StoreConfig;
use crate::error::VaultError;
use crate::secret::SecretString;

type Https = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Largest answer read (a KV secret is small; anything bigger is not an answer to trust).
pub(crate) const BODY_LIMIT: usize = 1024 * 1024;
/// What is kept of the store's `errors` text for a message.
const REASON_LIMIT: usize = 300;

/// A client for one store address.
#[derive(Clone)]
pub(crate) struct Http {
    client: Https,
    /// `scheme://host:port`, without a trailing slash.
    base: String,
    timeout: Duration,
}

/// An answer: status and body (at most [`BODY_LIMIT`] bytes).
pub(crate) struct Answer {
    pub status: StatusCode,
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON, or [`VaultError::BadResponse`] saying what it was the answer to.
    pub fn json(&self, what: &str) -> Result<serde_json::Value, VaultError> {
        serde_json::from_slice(&self.body).map_err(|e| VaultError::BadResponse {
            reason: format!(
                "{what}: HTTP {} with a body that is not JSON ({e})",
                self.status.as_u16()
            ),
        })
    }

    /// The store's `errors` array on one line, shortened, control characters dropped (empty if none).
    pub fn errors(&self) -> String {
        let text = serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| {
                v.get("errors")
                    .and_then(|e| e.as_array())
                    .map(|errors| errors.iter().filter_map(|e| e.as_str()).collect::<Vec<_>>().join("; "))
            })
            .unwrap_or_default();
        let mut text: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        if text.len() > REASON_LIMIT {
            let mut cut = REASON_LIMIT;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        text
    }
}

/// A request that took longer than the whole-request timeout.
#[derive(Debug)]
struct TimedOut(Duration);

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no answer within {} s", self.0.as_secs_f32())
    }
}

impl std::error::Error for TimedOut {}

impl Http {
    pub(crate) fn new(config: &StoreConfig) -> Result<Http, VaultError> {
        let base = check_address(&config.address)?;
        let tls = tls_config(config.ca_pem.as_deref())?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(config.connect_timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Http {
            client: Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector),
            base,
            timeout: config.request_timeout,
        })
    }

    /// The store's address as configured (`scheme://host:port`).
    pub(crate) fn address(&self) -> &str {
        &self.base
    }

    /// Send `method endpoint` (a `/v1/...` path) with an optional token and JSON body; the whole
    /// exchange within the request timeout.
    pub(crate) async fn send(
        &self,
        method: Method,
        endpoint: &str,
        token: Option<&SecretString>,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, VaultError> {
        match tokio::time::timeout(self.timeout, self.exchange(method, endpoint, token, body)).await {
            Ok(answer) => answer,
            Err(_) => Err(self.unreachable(Box::new(TimedOut(self.timeout)))),
        }
    }

    async fn exchange(
        &self,
        method: Method,
        endpoint: &str,
        token: Option<&SecretString>,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, VaultError> {
        let uri: Uri = format!("{}{endpoint}", self.base)
            .parse()
            .map_err(|_| VaultError::BadResponse {
                reason: format!("cannot make a request URL of {endpoint}"),
            })?;
        let mut builder = hyper::Request::builder().method(method).uri(uri);
        if let Some(token) = token {
            let mut value = HeaderValue::from_str(token.expose()).map_err(|_| VaultError::BadConfig {
                reason: "the token holds characters not allowed in an HTTP header".into(),
            })?;
            value.set_sensitive(true);
            builder = builder.header("X-Vault-Token", value);
        }
        let body = match body {
            Some(json) => {
                builder = builder.header(header::CONTENT_TYPE, "application/json");
                Full::new(Bytes::from(json))
            }
            None => Full::new(Bytes::new()),
        };
        let request = builder.body(body).map_err(|_| VaultError::BadResponse {
            reason: format!("cannot make a request to {endpoint}"),
        })?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| self.unreachable(Box::new(e)))?;
        let status = response.status();
        let too_large = || VaultError::BadResponse {
            reason: format!("answer to {endpoint} larger than {} KiB", BODY_LIMIT / 1024),
        };
        if let Some(length) = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| l.parse::<u64>().ok())
            && length > BODY_LIMIT as u64
        {
            return Err(too_large());
        }
        let mut stream = response.into_body();
        let mut bytes = Vec::new();
        while let Some(frame) = stream.frame().await {
            let frame = frame.map_err(|e| self.unreachable(Box::new(e)))?;
            if let Ok(data) = frame.into_data() {
                if bytes.len() + data.len() > BODY_LIMIT {
                    return Err(too_large());
                }
                bytes.extend_from_slice(&data);
            }
        }
        Ok(Answer { status, body: bytes })
    }

    fn unreachable(&self, source: Box<dyn std::error::Error + Send + Sync>) -> VaultError {
        VaultError::Unreachable {
            address: self.base.clone(),
            detail: chain(source.as_ref()),
            source,
        }
    }
}

/// `scheme://host[:port]` of an `http://`/`https://` address without credentials, query or path.
fn check_address(address: &str) -> Result<String, VaultError> {
    let refuse = |reason: &str| VaultError::BadConfig {
        reason: format!("address {address:?}: {reason}"),
    };
    if address.contains('@') {
        return Err(VaultError::BadConfig {
            reason: "the address must not hold credentials".into(),
        });
    }
    let uri: Uri = address.parse().map_err(|_| refuse("not a URL"))?;
    let scheme = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("http") => "http",
        Some("https") => "https",
        _ => return Err(refuse("only http:// and https:// are accepted")),
    };
    let authority = uri.authority().ok_or_else(|| refuse("no host"))?;
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(refuse("only scheme://host:port, without a path or query"));
    }
    Ok(format!("{scheme}://{authority}"))
}

fn tls_config(ca_pem: Option<&str>) -> Result<rustls::ClientConfig, VaultError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let bad = |detail: String| VaultError::BadConfig {
        reason: format!("TLS: {detail}"),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(pem) = ca_pem {
        let certs: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| bad(format!("CA PEM: {e}")))?;
        if certs.is_empty() {
            return Err(bad("no certificate in the CA PEM".into()));
        }
        let (_, refused) = roots.add_parsable_certificates(certs);
        if refused > 0 {
            return Err(bad(format!("{refused} CA certificate(s) refused")));
        }
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// An error and its causes on one line (hyper's top-level message alone says little).
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![err.to_string()];
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !parts.contains(&s) {
            parts.push(s);
        }
        cur = e.source();
    }
    parts.join(": ")
}

/// Whether a 503 answer means the store is sealed: its `errors` say so, or `sys/health` does.
pub(crate) async fn sealed(http: &Http, answer: &Answer) -> bool {
    if answer.errors().to_ascii_lowercase().contains("sealed") {
        return true;
    }
    match http.send(hyper::Method::GET, "/v1/sys/health", None, None).await {
        Ok(health) => health
            .json("sys/health")
            .ok()
            .and_then(|h| h.get("sealed").and_then(|s| s.as_bool()))
            .unwrap_or(false),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            check_address("http://127.0.0.1:8200").ok().as_deref(),
            Some("http://127.0.0.1:8200")
        );
        assert_eq!(
            check_address("https://bao.example/").ok().as_deref(),
            Some("https://bao.example")
        );
        for bad in [
            "ftp://h",
            "bao.example:8200",
            "https://u:p@h",
            "https://h/v1",
            "https://h?x=1",
            "",
        ] {
            assert!(matches!(check_address(bad), Err(VaultError::BadConfig { .. })), "{bad}");
        }
        let err = check_address("https://u:hunter2@h")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn errors_are_short_single_lines() {
        let answer = Answer {
            status: StatusCode::BAD_REQUEST,
            body: br#"{"errors":["a\nb","c"]}"#.to_vec(),
        };
        assert_eq!(answer.errors(), "a b; c");
        let long = format!(r#"{{"errors":["{}"]}}"#, "é".repeat(400));
        let answer = Answer {
            status: StatusCode::BAD_REQUEST,
            body: long.into_bytes(),
        };
        assert!(answer.errors().len() <= REASON_LIMIT + 3);
    }
}
