//! The client: hyper-util's pooled client over an HTTPS-or-HTTP connector with the TLS
//! configuration of `tls.rs`, speaking HTTP/1. Its connector connects directly (no proxy, whatever
//! the environment says), and its client follows no redirect.

use std::time::Duration;

use http_body_util::Full;
use hyper::Method;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as Pool;
use hyper_util::client::legacy::connect::HttpConnector;

use crate::answer::{Answer, Response};
use crate::error::{Error, TlsError};
use crate::request::Request;
use crate::tls;

/// How a client connects.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// PEM text of CA certificates trusted besides the system's roots (one or more certificates,
    /// all of which must be usable).
    pub extra_ca: Option<String>,
    /// Verify no certificate at all (a chart repository whose Secret says `insecure: true`); the
    /// system's roots and `extra_ca` are then not read.
    pub insecure: bool,
    /// Longest wait for a TCP connection (none: the system's).
    pub connect_timeout: Option<Duration>,
}

/// A client, cheap to clone (clones share one connection pool).
#[derive(Clone, Debug)]
pub struct Client {
    pool: Pool<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Client {
    /// A client connecting as `options` say.
    pub fn new(options: &Options) -> Result<Client, TlsError> {
        let tls = tls::config(options.extra_ca.as_deref(), options.insecure)?;
        let mut http = HttpConnector::new();
        // The HTTPS connector below decides the scheme: plain HTTP for `http://`, TLS for `https://`.
        http.enforce_http(false);
        http.set_connect_timeout(options.connect_timeout);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Client {
            pool: Pool::builder(hyper_util::rt::TokioExecutor::new()).build(connector),
        })
    }

    /// Send `request`; its answer once the head has arrived, the body not read. A `3xx` is returned
    /// as it is. No time limit of its own: the caller bounds the exchange (charts bound a request and
    /// the redirects they follow as a whole), or uses [`Client::fetch`].
    pub async fn send(&self, request: Request) -> Result<Answer, Error> {
        let head = request.method == Method::HEAD;
        let mut sent = hyper::Request::new(Full::new(request.body));
        *sent.method_mut() = request.method;
        *sent.uri_mut() = request.uri;
        *sent.headers_mut() = request.headers;
        let response = self.pool.request(sent).await.map_err(Error::Unreachable)?;
        Ok(Answer::new(response, head))
    }

    /// Send `request` and read its whole answer, the body at most `limit` bytes
    /// ([`Error::TooLarge`] if larger), all within `timeout` ([`Error::Timeout`]).
    pub async fn fetch(&self, request: Request, limit: u64, timeout: Duration) -> Result<Response, Error> {
        let exchange = async { self.send(request).await?.read(limit).await };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(Error::Timeout { after: timeout }),
        }
    }
}
