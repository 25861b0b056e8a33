//! Requests to a Capstan server with a login's credentials: JSON in and out, errors as the server
//! words them, 401 as "log in again" (exit code 2), and streamed answers (followed logs,
//! server-sent events) read piece by piece. Certificates are verified unless the login said
//! `--insecure-skip-tls-verify`; no redirect is followed and no proxy is read from the environment
//! (`capstan-http`).

use std::time::Duration;

use capstan_http::{Bytes, Method, Request, Uri, header};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::sessions::{Credentials, Login, Sessions, SessionsError, normalize};

/// The largest JSON answer read.
const ANSWER_LIMIT: u64 = 64 * 1024 * 1024;
/// How long one request may take (streams are not bounded by it).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a request to the server failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// 401: the session or token is no longer good.
    #[error("the login to {server} has expired or was revoked: log in again with `capstan login {server}`")]
    Expired {
        /// The server.
        server: String,
    },
    /// The server answered an error.
    #[error("{message}")]
    Refused {
        /// Its status.
        status: u16,
        /// Its message.
        message: String,
    },
    /// The server could not be reached or the exchange failed (certificates included).
    #[error("{server}: {message}")]
    Unreachable {
        /// The server.
        server: String,
        /// What failed, with its causes.
        message: String,
    },
    /// The sessions file.
    #[error(transparent)]
    Sessions(#[from] SessionsError),
    /// A URL or answer that makes no sense.
    #[error("{0}")]
    Invalid(String),
}

impl RemoteError {
    /// The HTTP status of a refusal.
    pub fn status(&self) -> Option<u16> {
        match self {
            RemoteError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A list answer of the API: `{"items": [...]}`.
#[derive(Debug, serde::Deserialize)]
pub struct Items<T> {
    /// The items.
    pub items: Vec<T>,
}

/// A server and the login to use with it.
#[derive(Debug, Clone)]
pub struct Remote {
    /// Its URL (no trailing slash).
    pub server: String,
    /// The login.
    pub login: Login,
    client: capstan_http::Client,
}

impl Remote {
    /// The server commands go to: `$CAPSTAN_SERVER` with `$CAPSTAN_TOKEN` (for CI), else the
    /// current login of the sessions file; none when neither exists (the kubeconfig is used).
    /// Refused when the command line names a kubeconfig, context or namespace, or the operator's
    /// `--deny-implicit-default-project`: those would be silently ignored by the server (which may
    /// be another cluster's, and has its own setting).
    pub fn current() -> Result<Option<Remote>, RemoteError> {
        let remote = Self::current_unchecked()?;
        if let Some(r) = &remote {
            let kube_flag = std::env::args()
                .skip(1)
                .find(|a| {
                    let name = a.split('=').next().unwrap_or_default();
                    // `-nprod`: clap takes a short option's value attached too.
                    let attached = (a.starts_with("-n") || a.starts_with("-N")) && !a.starts_with("--");
                    attached
                        || matches!(
                            name,
                            "--kubeconfig"
                                | "--context"
                                | "--namespace"
                                | "--app-namespace"
                                | "--deny-implicit-default-project"
                        )
                })
                .or_else(|| {
                    std::env::var_os("CAPSTAN_DENY_IMPLICIT_DEFAULT_PROJECT")
                        .is_some_and(|v| !v.is_empty())
                        .then(|| "$CAPSTAN_DENY_IMPLICIT_DEFAULT_PROJECT".to_string())
                });
            if let Some(flag) = kube_flag {
                return Err(RemoteError::Invalid(format!(
                    "logged in to {}: {flag} applies to the kubeconfig, which is not used; run `capstan context --none` to use it",
                    r.server
                )));
            }
        }
        Ok(remote)
    }

    fn current_unchecked() -> Result<Option<Remote>, RemoteError> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        if let Some(server) = env("CAPSTAN_SERVER") {
            let token = env("CAPSTAN_TOKEN")
                .ok_or_else(|| RemoteError::Invalid("CAPSTAN_SERVER is set without CAPSTAN_TOKEN".into()))?;
            let login = Login {
                user: String::new(),
                credentials: Credentials::Token {
                    token: token.trim().to_string(),
                },
                insecure: env("CAPSTAN_INSECURE_SKIP_TLS_VERIFY").is_some_and(|v| v == "true"),
                ca_pem: None,
            };
            return Remote::new(&server, login).map(Some);
        }
        let sessions = Sessions::load()?;
        let Some(current) = sessions.current.clone() else {
            return Ok(None);
        };
        let login = sessions.servers.get(&current).cloned().ok_or_else(|| {
            RemoteError::Invalid(format!(
                "the current server {current} has no login: run `capstan login {current}`"
            ))
        })?;
        Remote::new(&current, login).map(Some)
    }

    /// A client of `server` with `login`. Plain `http://` is refused unless the server is on this
    /// machine (loopback): passwords, cookies and tokens would cross the network in clear.
    pub fn new(server: &str, login: Login) -> Result<Remote, RemoteError> {
        let server = normalize(server);
        if let Some(rest) = server.strip_prefix("http://") {
            let host = rest.split('/').next().unwrap_or_default();
            let host = host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host);
            if !matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
                return Err(RemoteError::Invalid(format!(
                    "{server}: plain http:// is refused off this machine (credentials would travel in clear): use https://"
                )));
            }
        }
        if login.insecure {
            eprintln!("warning: the certificate of {server} is not verified (--insecure-skip-tls-verify)");
        }
        let options = capstan_http::Options {
            extra_ca: login.ca_pem.clone(),
            insecure: login.insecure,
            connect_timeout: Some(Duration::from_secs(10)),
        };
        let client = capstan_http::Client::new(&options).map_err(|e| RemoteError::Invalid(e.to_string()))?;
        Ok(Remote { server, login, client })
    }

    fn request(&self, method: Method, path: &str, body: Option<Vec<u8>>) -> Result<Request, RemoteError> {
        let uri: Uri = format!("{}{path}", self.server)
            .parse()
            .map_err(|e| RemoteError::Invalid(format!("{}{path}: {e}", self.server)))?;
        let writes = method != Method::GET;
        let mut req = Request::new(method, uri);
        let value = |v: &str| {
            v.parse()
                .map_err(|_| RemoteError::Invalid("a credential that cannot be a header".into()))
        };
        match &self.login.credentials {
            Credentials::Token { token } => {
                req = req.header(header::AUTHORIZATION, value(&format!("Bearer {token}"))?);
            }
            Credentials::Session { cookie, csrf } => {
                req = req.header(header::COOKIE, value(cookie)?);
                if writes {
                    req = req.header(header::HeaderName::from_static("x-csrf-token"), value(csrf)?);
                }
            }
        }
        if let Some(body) = body {
            req = req
                .header(header::CONTENT_TYPE, value("application/json")?)
                .body(Bytes::from(body));
        }
        Ok(req)
    }

    fn failed(&self, err: capstan_http::Error) -> RemoteError {
        RemoteError::Unreachable {
            server: self.server.clone(),
            message: capstan_http::chain(&err),
        }
    }

    /// The error of an answer that is not 2xx.
    fn refused(&self, status: u16, body: &[u8]) -> RemoteError {
        if status == 401 {
            return RemoteError::Expired {
                server: self.server.clone(),
            };
        }
        let message = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["error"].as_str().map(String::from))
            .unwrap_or_else(|| format!("HTTP {status}: {}", String::from_utf8_lossy(body).trim()));
        RemoteError::Refused { status, message }
    }

    /// `METHOD path` with a JSON body; the JSON answer.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, RemoteError> {
        let body = body.map(|b| serde_json::to_vec(b).unwrap_or_default());
        let req = self.request(method, path, body)?;
        let answer = self
            .client
            .fetch(req, ANSWER_LIMIT, REQUEST_TIMEOUT)
            .await
            .map_err(|e| self.failed(e))?;
        let status = answer.status.as_u16();
        if !(200..300).contains(&status) {
            return Err(self.refused(status, &answer.body));
        }
        let body: &[u8] = if answer.body.is_empty() { b"null" } else { &answer.body };
        serde_json::from_slice(body).map_err(|e| {
            RemoteError::Invalid(format!(
                "{}{path} answered what is not the expected JSON: {e}",
                self.server
            ))
        })
    }

    /// Log in with a password: `POST /api/session`; the session cookie and CSRF token it answers.
    pub async fn password_login(&self, username: &str, password: &str) -> Result<(String, Credentials), RemoteError> {
        let body = serde_json::json!({"username": username, "password": password});
        self.session_login("/api/session", &body, username, "wrong user name or password")
            .await
    }

    /// Redeem a single sign-on code with the PKCE verifier: `POST /api/session/cli`.
    pub async fn sso_login(&self, code: &str, verifier: &str) -> Result<(String, Credentials), RemoteError> {
        let body = serde_json::json!({"code": code, "verifier": verifier});
        self.session_login(
            "/api/session/cli",
            &body,
            "",
            "the code is wrong or expired: log in again",
        )
        .await
    }

    /// A login that answers a session cookie and `{"username", "csrfToken"}`.
    async fn session_login(
        &self,
        path: &str,
        body: &serde_json::Value,
        username: &str,
        unauthorized: &str,
    ) -> Result<(String, Credentials), RemoteError> {
        let body = serde_json::to_vec(body).unwrap_or_default();
        let mut req = self.request(Method::POST, path, Some(body))?;
        // Not authenticated yet: the placeholder credentials are not sent.
        req.headers.remove(header::AUTHORIZATION);
        let answer = self
            .client
            .fetch(req, ANSWER_LIMIT, REQUEST_TIMEOUT)
            .await
            .map_err(|e| self.failed(e))?;
        let status = answer.status.as_u16();
        if status == 401 {
            return Err(RemoteError::Refused {
                status,
                message: format!("{}: {unauthorized}", self.server),
            });
        }
        if !(200..300).contains(&status) {
            return Err(self.refused(status, &answer.body));
        }
        let cookie = answer
            .headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|v| v.split(';').next())
            .find(|c| c.contains('='))
            .map(str::to_string)
            .ok_or_else(|| {
                RemoteError::Invalid(format!("{} answered the login without a session cookie", self.server))
            })?;
        let info: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
        let csrf = info["csrfToken"].as_str().unwrap_or_default().to_string();
        let user = info["username"].as_str().unwrap_or(username).to_string();
        Ok((user, Credentials::Session { cookie, csrf }))
    }

    /// `GET path`, as JSON.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, RemoteError> {
        self.call(Method::GET, path, None::<&()>).await
    }

    /// `POST path` with a JSON body, as JSON.
    pub async fn post<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> Result<T, RemoteError> {
        self.call(Method::POST, path, Some(body)).await
    }

    /// `DELETE path`, as JSON.
    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, RemoteError> {
        self.call(Method::DELETE, path, None::<&()>).await
    }

    /// `GET path`, its body to be read as it streams ([`capstan_http::Answer::chunk`]).
    pub async fn stream(&self, path: &str) -> Result<capstan_http::Answer, RemoteError> {
        let req = self.request(Method::GET, path, None)?;
        let answer = tokio::time::timeout(REQUEST_TIMEOUT, self.client.send(req))
            .await
            .map_err(|_| RemoteError::Unreachable {
                server: self.server.clone(),
                message: format!("no answer within {} s", REQUEST_TIMEOUT.as_secs()),
            })?
            .map_err(|e| self.failed(e))?;
        let status = answer.status.as_u16();
        if !(200..300).contains(&status) {
            let body = answer.read_cut(64 * 1024).await.map(|r| r.body).unwrap_or_default();
            return Err(self.refused(status, &body));
        }
        Ok(answer)
    }
}

/// Percent-encode a query value.
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
