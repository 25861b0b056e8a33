//! A request as callers write it: method, URI, headers and a body held in memory.

use hyper::body::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Uri};

/// A request. Headers are sent as given (mark credentials [`HeaderValue::set_sensitive`]); an empty
/// body sends no `Content-Length` with `GET`, a non-empty one its exact length.
#[derive(Debug, Clone)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// `http://` or `https://` with a host; the caller checks what it accepts.
    pub uri: Uri,
    /// The headers.
    pub headers: HeaderMap,
    /// The body (empty for none).
    pub body: Bytes,
}

impl Request {
    /// `method uri` with no header and no body.
    pub fn new(method: Method, uri: Uri) -> Request {
        Request {
            method,
            uri,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    /// `GET uri`.
    pub fn get(uri: Uri) -> Request {
        Request::new(Method::GET, uri)
    }

    /// `POST uri` with `body`.
    pub fn post(uri: Uri, body: impl Into<Bytes>) -> Request {
        Request::new(Method::POST, uri).body(body)
    }

    /// With one more header (added to any of the same name).
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Request {
        self.headers.append(name, value);
        self
    }

    /// With `body`.
    pub fn body(mut self, body: impl Into<Bytes>) -> Request {
        self.body = body.into();
        self
    }
}
