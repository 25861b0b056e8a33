//! What can go wrong building a client ([`TlsError`]) or exchanging a request ([`Error`]). Neither
//! names the URL: callers say what they were asking for, and whose address it is.

use std::time::Duration;

/// The TLS configuration of a client cannot be built (from the caller's CA certificates).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rustls offers no protocol version with the ring provider (not expected to happen).
    #[error(transparent)]
    Protocols(rustls::Error),
    /// The CA text is not PEM.
    #[error("CA PEM: {0}")]
    Pem(#[source] rustls::pki_types::pem::Error),
    /// The CA text is PEM without a certificate.
    #[error("no certificate in the CA PEM")]
    NoCertificate,
    /// Some certificates of the CA text cannot be used as trust anchors.
    #[error("{0} CA certificate(s) refused")]
    Refused(usize),
}

/// A request that failed. The transport's errors are shown as they are (their causes through
/// [`chain`](crate::chain)); callers put the URL in front.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request was not sent or no answer's head came back: DNS, connection refused, the TLS
    /// handshake (a certificate not trusted), a connection closed early, a URI without a scheme or
    /// host.
    #[error(transparent)]
    Unreachable(hyper_util::client::legacy::Error),
    /// Reading the answer's body failed midway.
    #[error(transparent)]
    Body(hyper::Error),
    /// The answer's body is larger than the limit (said by its `Content-Length`, or found while it
    /// streamed; nothing more than the limit is read).
    #[error("the answer is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// No whole answer (head and body) within the time allowed ([`Client::fetch`](crate::Client::fetch)).
    #[error("no answer within {} s", .after.as_secs_f32())]
    Timeout {
        /// The time allowed.
        after: Duration,
    },
}
