//! Capstan's one HTTP client, used by everything that talks HTTP to the outside: Helm repositories
//! and OCI registries (charts and images, `capstan-source`), OpenBao/Vault (`capstan-vault`) and
//! OpenID Connect providers (`capstan-server`). It owns:
//!
//! - building a client ([`Client::new`] from [`Options`]): hyper's client (already in the binary
//!   through kube) over rustls with ring, trusting the system's roots plus the caller's CA
//!   certificates (PEM), or nothing at all with `insecure` (chart repositories whose Secret says
//!   so); HTTP/1 only; an optional connect timeout (`tls.rs`, `insecure.rs`, `client.rs`);
//! - sending a [`Request`] (method, URI, headers, body) and receiving an [`Answer`] — status and
//!   headers, the body not read yet — or, with [`Client::fetch`], a whole [`Response`] within a
//!   time limit (`request.rs`, `client.rs`);
//! - reading a body up to a limit while it streams: over it is [`Error::TooLarge`], or the body cut
//!   at the limit for answers whose body is only informative (`answer.rs`);
//! - the one formatter of an error and its causes on one line, [`chain`] (`chain.rs`);
//! - its errors, [`Error`] and [`TlsError`], which keep their sources (`error.rs`).
//!
//! Two things it never does. It reads no proxy settings from the environment (`HTTPS_PROXY` and
//! friends of the controller's environment never steer a request: hyper-util's connector connects
//! directly). It follows no redirect: a `3xx` is an answer like any other, and a caller that follows
//! redirects does it by hand with its own rules for where credentials may go (charts do).
//!
//! The `http` types callers need ([`Method`], [`StatusCode`], [`Uri`], [`header`], [`Bytes`]) are
//! re-exported, so no caller depends on hyper itself.

mod answer;
mod chain;
mod client;
mod error;
mod insecure;
mod request;
mod tls;

pub use answer::{Answer, Response};
pub use chain::chain;
pub use client::{Client, Options};
pub use error::{Error, TlsError};
pub use hyper::body::Bytes;
pub use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
pub use hyper::{Method, StatusCode, Uri, http};
pub use request::Request;
