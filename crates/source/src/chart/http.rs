//! Chart fetching over the one HTTP client (`capstan-http`): one client per TLS configuration of
//! the repository credentials (its CA, `insecure`), a connect timeout and a whole-request timeout,
//! bodies cut at a limit while they stream, and redirects followed by hand so that credentials go
//! only to the origin they belong to.
//!
//! The client reads no proxy settings from the environment, so `HTTPS_PROXY` and friends of the
//! controller's environment never steer these requests (a chart source is not a place to discover
//! the operator's proxy).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use capstan_http::header::{self, HeaderName, HeaderValue};
use capstan_http::{Client, Method, Options, Request, Response, StatusCode, Uri};

use super::error::ChartError;
use crate::Credentials;

/// How many redirects one request follows.
const MAX_REDIRECTS: usize = 5;
/// What is read of an error answer's body (then dropped).
const ERROR_BODY_LIMIT: u64 = 64 * 1024;

/// `scheme://host:port` of a URL: where credentials may be sent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    /// Whether both are on one host (whatever their scheme and port).
    pub(crate) fn same_host(&self, other: &Origin) -> bool {
        self.host == other.host
    }

    pub(crate) fn of(uri: &Uri) -> Option<Origin> {
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let default = if scheme == "https" { 443 } else { 80 };
        Some(Origin {
            host: uri.host()?.to_ascii_lowercase(),
            port: uri.port_u16().unwrap_or(default),
            scheme,
        })
    }
}

/// What authenticates a request.
#[derive(Clone)]
pub(crate) enum Auth {
    Basic(String),
    Bearer(String),
}

impl Auth {
    /// Basic auth from credentials with a user name or a password, if any.
    pub(crate) fn basic(creds: &Credentials) -> Option<Auth> {
        use base64::Engine;
        if creds.username.is_none() && creds.password.is_none() {
            return None;
        }
        let pair = format!(
            "{}:{}",
            creds.username.as_deref().unwrap_or(""),
            creds.password.as_deref().unwrap_or("")
        );
        Some(Auth::Basic(base64::engine::general_purpose::STANDARD.encode(pair)))
    }

    fn header(&self) -> Option<HeaderValue> {
        let mut v = match self {
            Auth::Basic(b) => HeaderValue::from_str(&format!("Basic {b}")).ok()?,
            Auth::Bearer(t) => HeaderValue::from_str(&format!("Bearer {t}")).ok()?,
        };
        v.set_sensitive(true);
        Some(v)
    }
}

/// A request: where, extra headers, and credentials with the one origin they may be sent to.
pub(crate) struct Get<'a> {
    pub url: &'a str,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub auth: Option<(&'a Auth, &'a Origin)>,
    /// Largest body accepted for a successful answer.
    pub limit: u64,
    /// What is read, for messages (`repository index`, `chart archive` ...).
    pub what: &'static str,
}

/// HTTP clients by TLS configuration, sharing connection pools.
pub(crate) struct Http {
    timeout: Duration,
    clients: Mutex<HashMap<(Option<String>, bool), Client>>,
}

/// Parse `url` as an `http`/`https` URL without user information.
pub(crate) fn check_url(url: &str) -> Result<Uri, ChartError> {
    let refuse = |reason: &'static str| ChartError::UnsupportedUrl {
        url: crate::redact(url, &[]),
        reason: reason.into(),
    };
    let uri: Uri = url.parse().map_err(|_| refuse("not a URL"))?;
    match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("http" | "https") => {}
        _ => return Err(refuse("only http:// and https:// are accepted")),
    }
    let authority = uri.authority().ok_or_else(|| refuse("no host"))?;
    if authority.as_str().contains('@') {
        return Err(refuse("credentials belong in the repository Secret, not the URL"));
    }
    Ok(uri)
}

impl Http {
    pub(crate) fn new(timeout: Duration) -> Http {
        Http {
            timeout,
            clients: Mutex::new(HashMap::new()),
        }
    }

    fn client(&self, creds: &Credentials, repo: &str) -> Result<Client, ChartError> {
        let key = (creds.tls_ca.clone(), creds.insecure);
        let mut clients = match self.clients.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let client = Client::new(&Options {
            extra_ca: creds.tls_ca.clone(),
            insecure: creds.insecure,
            connect_timeout: Some(self.timeout),
        })
        .map_err(|source| ChartError::Tls {
            repo: repo.to_string(),
            source,
        })?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// GET with redirects (at most [`MAX_REDIRECTS`], http/https only; credentials only to their
    /// origin), the whole exchange within the timeout.
    pub(crate) async fn get(&self, creds: &Credentials, repo: &str, req: Get<'_>) -> Result<Response, ChartError> {
        self.send(Method::GET, creds, repo, req).await
    }

    /// [`Http::get`] with another method (`HEAD` for an OCI manifest's digest).
    pub(crate) async fn send(
        &self,
        method: Method,
        creds: &Credentials,
        repo: &str,
        req: Get<'_>,
    ) -> Result<Response, ChartError> {
        let client = self.client(creds, repo)?;
        let seconds = self.timeout.as_secs();
        let url = req.url.to_string();
        match tokio::time::timeout(self.timeout, send(&client, method, req)).await {
            Ok(answer) => answer,
            Err(_) => Err(ChartError::Timeout { url, seconds }),
        }
    }
}

async fn send(client: &Client, method: Method, req: Get<'_>) -> Result<Response, ChartError> {
    let mut uri = check_url(req.url)?;
    for _ in 0..=MAX_REDIRECTS {
        let shown = uri.to_string();
        let mut request = Request::new(method.clone(), uri.clone());
        for (name, value) in &req.headers {
            request = request.header(name.clone(), value.clone());
        }
        if let Some((auth, origin)) = req.auth
            && Origin::of(&uri).as_ref() == Some(origin)
            && let Some(value) = auth.header()
        {
            request = request.header(header::AUTHORIZATION, value);
        }
        let answer = client.send(request).await.map_err(|e| transport(&shown, req.what, e))?;
        let status = answer.status;
        if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
            let location = answer
                .headers
                .get(header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| ChartError::UnsupportedUrl {
                    url: shown.clone(),
                    reason: "redirect without a Location".into(),
                })?;
            uri = check_url(&join(&shown, location))?;
            continue;
        }
        let read = if status.is_success() {
            answer.read(req.limit).await
        } else {
            answer.read_cut(ERROR_BODY_LIMIT).await
        };
        return read.map_err(|e| transport(&shown, req.what, e));
    }
    Err(ChartError::UnsupportedUrl {
        url: req.url.to_string(),
        reason: "too many redirects".into(),
    })
}

/// A chart error for what the client says about a request to `url` reading `what`.
fn transport(url: &str, what: &'static str, err: capstan_http::Error) -> ChartError {
    match err {
        capstan_http::Error::TooLarge { limit } => ChartError::TooLarge {
            what,
            url: url.to_string(),
            limit,
        },
        capstan_http::Error::Body(_) => ChartError::Body {
            url: url.to_string(),
            source: err,
        },
        capstan_http::Error::Unreachable(_) | capstan_http::Error::Timeout { .. } => ChartError::Unreachable {
            url: url.to_string(),
            detail: capstan_http::chain(&err),
            source: err,
        },
    }
}

/// An error for a non-2xx answer, with a hint for the usual causes.
pub(crate) fn status_error(url: &str, status: StatusCode) -> ChartError {
    ChartError::Status {
        url: url.to_string(),
        status: status.as_u16(),
        hint: match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                " (authentication failed: check the repository credentials)"
            }
            StatusCode::NOT_FOUND => " (not found)",
            _ => "",
        },
    }
}

/// `reference` (absolute, `/path` or relative) resolved against `base`, as a browser or Helm would
/// for the simple forms chart repositories use. Hand-written: the `url` crate is not otherwise in
/// the dependency tree, and only these three forms occur.
pub(crate) fn join(base: &str, reference: &str) -> String {
    if reference.contains("://") {
        return reference.to_string();
    }
    let (scheme_host, path) = match base
        .find("://")
        .and_then(|i| base[i + 3..].find('/').map(|j| i + 3 + j))
    {
        Some(split) => (&base[..split], &base[split..]),
        None => (base, "/"),
    };
    if reference.starts_with('/') {
        return format!("{scheme_host}{reference}");
    }
    let path = path.split(['?', '#']).next().unwrap_or("/");
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    format!("{scheme_host}{dir}{reference}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_and_absolute_references() {
        let base = "https://charts.example/sub/index.yaml";
        assert_eq!(join(base, "a-1.0.0.tgz"), "https://charts.example/sub/a-1.0.0.tgz");
        assert_eq!(join(base, "/x/a.tgz"), "https://charts.example/x/a.tgz");
        assert_eq!(join(base, "http://other:81/a.tgz"), "http://other:81/a.tgz");
        assert_eq!(join("http://h:1", "a.tgz"), "http://h:1/a.tgz");
    }

    #[test]
    fn only_plain_http_urls_without_credentials() {
        assert!(check_url("https://h/x").is_ok() && check_url("http://127.0.0.1:8/x").is_ok());
        for bad in ["file:///etc/passwd", "ftp://h/x", "https://u:p@h/x", "h/x", "oci://h/x"] {
            let err = check_url(bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(!err.is_empty() && !err.contains(":p@"), "{bad}: {err}");
        }
        let a = Origin::of(&"https://H:443/a".parse().expect("uri"));
        assert_eq!(a, Origin::of(&"https://h/b".parse().expect("uri")));
        assert_ne!(a, Origin::of(&"http://h/b".parse().expect("uri")));
    }
}
