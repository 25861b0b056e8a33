//! The one HTTP stack of chart fetching: hyper's client (already in the binary through kube) with
//! rustls, the system's roots plus a repository's own CA, connect and whole-request timeouts, bodies
//! cut at a limit while they stream, and redirects followed by hand so that credentials go only to
//! the origin they belong to.
//!
//! hyper-util's client reads no proxy settings from the environment, so `HTTPS_PROXY` and friends of
//! the controller's environment never steer these requests (a chart source is not a place to
//! discover the operator's proxy).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use super::error::ChartError;
use crate::Credentials;

type Https = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

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

/// An answer; the body is read only for 2xx statuses (and dropped for others, up to a small limit).
pub(crate) struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

/// HTTP clients by TLS configuration, sharing connection pools.
pub(crate) struct Http {
    timeout: Duration,
    clients: Mutex<HashMap<(Option<String>, bool), Https>>,
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

    fn client(&self, creds: &Credentials, repo: &str) -> Result<Https, ChartError> {
        let key = (creds.tls_ca.clone(), creds.insecure);
        let mut clients = match self.clients.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let client = build_client(creds, repo, self.timeout)?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// GET with redirects (at most [`MAX_REDIRECTS`], http/https only; credentials only to their
    /// origin), the whole exchange within the timeout.
    pub(crate) async fn get(&self, creds: &Credentials, repo: &str, req: Get<'_>) -> Result<Answer, ChartError> {
        self.send(Method::GET, creds, repo, req).await
    }

    /// [`Http::get`] with another method (`HEAD` for an OCI manifest's digest).
    pub(crate) async fn send(
        &self,
        method: Method,
        creds: &Credentials,
        repo: &str,
        req: Get<'_>,
    ) -> Result<Answer, ChartError> {
        let client = self.client(creds, repo)?;
        let seconds = self.timeout.as_secs();
        let url = req.url.to_string();
        match tokio::time::timeout(self.timeout, send(&client, method, req)).await {
            Ok(answer) => answer,
            Err(_) => Err(ChartError::Timeout { url, seconds }),
        }
    }
}

async fn send(client: &Https, method: Method, req: Get<'_>) -> Result<Answer, ChartError> {
    let mut uri = check_url(req.url)?;
    for _ in 0..=MAX_REDIRECTS {
        let shown = uri.to_string();
        let mut builder = hyper::Request::builder().method(method.clone()).uri(uri.clone());
        for (name, value) in &req.headers {
            builder = builder.header(name, value);
        }
        if let Some((auth, origin)) = req.auth
            && Origin::of(&uri).as_ref() == Some(origin)
            && let Some(value) = auth.header()
        {
            builder = builder.header(header::AUTHORIZATION, value);
        }
        let request = builder.body(Empty::new()).map_err(|_| ChartError::UnsupportedUrl {
            url: shown.clone(),
            reason: "not a valid request".into(),
        })?;
        let response = client
            .request(request)
            .await
            .map_err(|source| ChartError::Unreachable {
                url: shown.clone(),
                detail: chain(&source),
                source,
            })?;
        let status = response.status();
        if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
            let location = response
                .headers()
                .get(header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| ChartError::UnsupportedUrl {
                    url: shown.clone(),
                    reason: "redirect without a Location".into(),
                })?;
            uri = check_url(&join(&shown, location))?;
            continue;
        }
        let headers = response.headers().clone();
        let limit = if status.is_success() {
            req.limit
        } else {
            ERROR_BODY_LIMIT
        };
        let too_large = || ChartError::TooLarge {
            what: req.what,
            url: shown.clone(),
            limit,
        };
        if method != Method::HEAD
            && let Some(length) = headers
                .get(header::CONTENT_LENGTH)
                .and_then(|l| l.to_str().ok())
                .and_then(|l| l.parse::<u64>().ok())
            && length > limit
        {
            if status.is_success() {
                return Err(too_large());
            }
            return Ok(Answer {
                status,
                headers,
                body: Vec::new(),
            });
        }
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|source| ChartError::Body {
                url: shown.clone(),
                source,
            })?;
            if let Ok(data) = frame.into_data() {
                if (bytes.len() + data.len()) as u64 > limit {
                    if status.is_success() {
                        return Err(too_large());
                    }
                    break;
                }
                bytes.extend_from_slice(&data);
            }
        }
        return Ok(Answer {
            status,
            headers,
            body: bytes,
        });
    }
    Err(ChartError::UnsupportedUrl {
        url: req.url.to_string(),
        reason: "too many redirects".into(),
    })
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

fn build_client(creds: &Credentials, repo: &str, timeout: Duration) -> Result<Https, ChartError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let tls_error = |detail: String| ChartError::Tls {
        repo: repo.to_string(),
        detail,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(e.to_string()))?;
    let tls = if creds.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(insecure::AcceptAny(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        if let Some(pem) = creds.tls_ca.as_deref() {
            let certs: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| tls_error(e.to_string()))?;
            if certs.is_empty() {
                return Err(tls_error("no certificate in the PEM text".into()));
            }
            let (_, refused) = roots.add_parsable_certificates(certs);
            if refused > 0 {
                return Err(tls_error(format!("{refused} certificate(s) refused")));
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(timeout));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector))
}

/// An error and its causes on one line (hyper's top-level message alone says little).
fn chain(err: &dyn std::error::Error) -> String {
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

/// `insecure: true`: no certificate verification (signatures are still checked so the handshake
/// completes). For tests and labs, as the repository Secret's `insecure` field says.
mod insecure {
    use std::sync::Arc;

    use rustls::DigitallySignedStruct;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

    #[derive(Debug)]
    pub(super) struct AcceptAny(pub Arc<CryptoProvider>);

    impl ServerCertVerifier for AcceptAny {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
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
