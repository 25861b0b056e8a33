//! What can go wrong fetching a chart. Every message names the repository (and the chart and version
//! when known) and never a credential: URLs carrying user information are refused before any request.

/// An error resolving, downloading, verifying or extracting a chart.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// The repository or a chart URL is not one Capstan accepts.
    #[error("unsupported chart URL {url}: {reason}")]
    UnsupportedUrl {
        /// The URL.
        url: String,
        /// Why it is refused.
        reason: std::borrow::Cow<'static, str>,
    },
    /// The server could not be reached (connection refused, DNS, TLS handshake ...).
    #[error("{url}: unreachable: {detail}")]
    Unreachable {
        /// The URL requested.
        url: String,
        /// The transport's message.
        detail: String,
        /// The underlying error.
        #[source]
        source: capstan_http::Error,
    },
    /// The server did not answer in time.
    #[error("{url}: no complete answer within {seconds} s")]
    Timeout {
        /// The URL requested.
        url: String,
        /// The limit.
        seconds: u64,
    },
    /// The server answered with an error status.
    #[error("{url}: HTTP {status}{hint}")]
    Status {
        /// The URL requested.
        url: String,
        /// The status code.
        status: u16,
        /// A hint for the usual causes (authentication, missing chart).
        hint: &'static str,
    },
    /// Reading an answer failed midway.
    #[error("{url}: reading the answer: {source}")]
    Body {
        /// The URL requested.
        url: String,
        /// The underlying error.
        #[source]
        source: capstan_http::Error,
    },
    /// An answer is larger than the limit.
    #[error("{url}: the {what} is larger than the limit of {limit} bytes")]
    TooLarge {
        /// What was read (`repository index`, `chart archive`, `OCI manifest` ...).
        what: &'static str,
        /// The URL requested.
        url: String,
        /// The limit.
        limit: u64,
    },
    /// The repository's `index.yaml` is not a Helm repository index Capstan accepts.
    #[error("repository {repo}: invalid index.yaml: {detail}")]
    Index {
        /// The repository URL.
        repo: String,
        /// What is wrong.
        detail: String,
    },
    /// The repository does not list the chart.
    #[error("chart {chart:?} not found in repository {repo}")]
    ChartNotFound {
        /// The chart name.
        chart: String,
        /// The repository URL.
        repo: String,
    },
    /// `targetRevision` is not a version or constraint.
    #[error("chart {chart:?}: invalid version or constraint {constraint:?}: {detail}")]
    InvalidConstraint {
        /// The chart name.
        chart: String,
        /// The constraint as written.
        constraint: String,
        /// What is wrong.
        detail: String,
    },
    /// No version of the chart satisfies the constraint.
    #[error(
        "chart {chart:?} in repository {repo}: no version matches {constraint:?} (highest available: {})",
        if nearest.is_empty() { "none".to_string() } else { nearest.join(", ") }
    )]
    NoMatchingVersion {
        /// The chart name.
        chart: String,
        /// The repository URL.
        repo: String,
        /// The constraint as written.
        constraint: String,
        /// The highest versions available.
        nearest: Vec<String>,
    },
    /// The downloaded archive is not the one the repository's index (or the OCI manifest) names.
    #[error("chart {chart:?} version {version} from {repo}: digest sha256:{actual} differs from sha256:{expected}")]
    DigestMismatch {
        /// The chart name.
        chart: String,
        /// The version.
        version: String,
        /// The repository URL.
        repo: String,
        /// The digest announced.
        expected: String,
        /// The digest of what was downloaded.
        actual: String,
    },
    /// The archive is corrupt, unsafe or over a limit.
    #[error("chart {chart:?} version {version} from {repo}: {detail}")]
    Archive {
        /// The chart name.
        chart: String,
        /// The version.
        version: String,
        /// The repository URL.
        repo: String,
        /// What is wrong.
        detail: String,
    },
    /// An OCI registry's answer is not a Helm chart (wrong media type, no chart layer, bad JSON).
    #[error("{reference}: {detail}")]
    Oci {
        /// `host/repository:tag`.
        reference: String,
        /// What is wrong.
        detail: String,
    },
    /// The CA certificate of the repository credentials cannot be used.
    #[error("repository {repo}: the CA certificate is not usable: {source}")]
    Tls {
        /// The repository URL.
        repo: String,
        /// What is wrong.
        #[source]
        source: capstan_http::TlsError,
    },
    /// A local file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}
