//! The HTTP transport on Capstan's one HTTP client (`capstan-http`): the system's roots plus the
//! store's own CA, a connect timeout and a whole-request timeout, and answers cut at [`BODY_LIMIT`]
//! while they stream. The token travels in `X-Vault-Token`, marked sensitive. No proxy settings are
//! read from the environment, and no redirect is followed.

use std::time::Duration;

use capstan_http::header::{self, HeaderName, HeaderValue};
use capstan_http::{Client, Method, Options, Request, StatusCode, Uri};

use crate::config::StoreConfig;
use crate::error::VaultError;
use crate::secret::SecretString;

/// Largest answer read (a KV secret is small; anything bigger is not an answer to trust).
pub(crate) const BODY_LIMIT: usize = 1024 * 1024;
/// What is kept of the store's `errors` text for a message.
const REASON_LIMIT: usize = 300;

/// A client for one store address.
#[derive(Clone)]
pub(crate) struct Http {
    client: Client,
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

impl Http {
    pub(crate) fn new(config: &StoreConfig) -> Result<Http, VaultError> {
        let base = check_address(&config.address)?;
        let client = Client::new(&Options {
            extra_ca: config.ca_pem.clone(),
            insecure: false,
            connect_timeout: Some(config.connect_timeout),
        })
        .map_err(|e| VaultError::BadConfig {
            reason: format!("TLS: {e}"),
        })?;
        Ok(Http {
            client,
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
        let uri: Uri = format!("{}{endpoint}", self.base)
            .parse()
            .map_err(|_| VaultError::BadResponse {
                reason: format!("cannot make a request URL of {endpoint}"),
            })?;
        let mut request = Request::new(method, uri);
        if let Some(token) = token {
            let mut value = HeaderValue::from_str(token.expose()).map_err(|_| VaultError::BadConfig {
                reason: "the token holds characters not allowed in an HTTP header".into(),
            })?;
            value.set_sensitive(true);
            request = request.header(HeaderName::from_static("x-vault-token"), value);
        }
        if let Some(json) = body {
            request = request
                .header(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(json);
        }
        match self.client.fetch(request, BODY_LIMIT as u64, self.timeout).await {
            Ok(answer) => Ok(Answer {
                status: answer.status,
                body: answer.body,
            }),
            Err(capstan_http::Error::TooLarge { .. }) => Err(VaultError::BadResponse {
                reason: format!("answer to {endpoint} larger than {} KiB", BODY_LIMIT / 1024),
            }),
            Err(e) => Err(self.unreachable(Box::new(e))),
        }
    }

    fn unreachable(&self, source: Box<dyn std::error::Error + Send + Sync>) -> VaultError {
        VaultError::Unreachable {
            address: self.base.clone(),
            detail: capstan_http::chain(source.as_ref()),
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

/// Whether a 503 answer means the store is sealed: its `errors` say so, or `sys/health` does.
pub(crate) async fn sealed(http: &Http, answer: &Answer) -> bool {
    if answer.errors().to_ascii_lowercase().contains("sealed") {
        return true;
    }
    match http.send(Method::GET, "/v1/sys/health", None, None).await {
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
