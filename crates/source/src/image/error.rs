//! What can go wrong reading an image repository. Messages name the registry or repository and
//! never a credential (credentials never appear in URLs: references with user information are
//! refused, and `Authorization` headers are never part of a message).

use crate::ChartError;

/// An error listing tags or reading a digest.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The repository reference (or a tag) is not one Capstan accepts.
    #[error("invalid image reference {reference}: {reason}")]
    InvalidReference {
        /// The reference as written (not shown when it may hold credentials).
        reference: String,
        /// Why it is refused.
        reason: String,
    },
    /// The registry could not be reached (connection refused, DNS, TLS handshake, timeout).
    #[error("registry {registry} is unreachable: {source}")]
    Unreachable {
        /// `host[:port]`.
        registry: String,
        /// The transport's error.
        #[source]
        source: Box<ChartError>,
    },
    /// The registry refused the credentials (or asked for some and none are set).
    #[error("registry {registry} refused access (check the repository credentials): {source}")]
    Unauthorized {
        /// `host[:port]`.
        registry: String,
        /// The refusal.
        #[source]
        source: Box<ChartError>,
    },
    /// The repository or tag does not exist.
    #[error("{repository} not found in its registry: {source}")]
    NotFound {
        /// `host[:port]/path` (with `:tag` when a tag was asked for).
        repository: String,
        /// The answer.
        #[source]
        source: Box<ChartError>,
    },
    /// The registry answered something that is not a valid answer: an error status, garbage
    /// JSON, a wrong content type, an oversized body.
    #[error("{repository}: bad answer from the registry: {reason}")]
    BadAnswer {
        /// `host[:port]/path`.
        repository: String,
        /// What is wrong.
        reason: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Box<ChartError>>,
    },
    /// A manifest digest is not `sha256:` and 64 hex digits.
    #[error("{reference}: the registry's digest {digest:?} is not sha256:<64 hex digits>")]
    BadDigest {
        /// `host[:port]/path:tag`.
        reference: String,
        /// What the registry sent (cut to 100 characters).
        digest: String,
    },
    /// The CA certificate of the credentials cannot be used.
    #[error("registry {registry}: {source}")]
    Tls {
        /// `host[:port]`.
        registry: String,
        /// What is wrong.
        #[source]
        source: Box<ChartError>,
    },
}
