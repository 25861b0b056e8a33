//! The `source` stage: Git repositories and Helm charts as Capstan reads them.
//!
//! Charts from Helm repositories and OCI registries are the [`chart`] module's ([`ChartCache`]);
//! image repositories in OCI registries (their tags, digests and the policy choosing the newest) are
//! the [`image`] module's ([`ImageClient`]); the rest of this crate is Git.
//!
//! This crate owns repository credentials ([`Credentials`]), resolving a `targetRevision` (branch,
//! tag, full or short SHA, `HEAD`) to a commit, one bare cache per repository URL shared by every
//! Application that uses it, and read-only checkouts of one commit each ([`RepoCache`]).
//!
//! Resolution asks the remote for its refs (`git ls-remote`) before fetching, so nothing is fetched
//! when nothing moved, and one answer per repository is shared by every caller for a short time, so a
//! poll of many Applications on one repository costs one round trip.
//!
//! Git is driven through the `git` program rather than a library: it gives every transport Capstan
//! must support (`https` with basic auth, `ssh` with keys and `known_hosts`, `git://`, `file://`)
//! with exactly the behaviour users get from `git` itself. Credentials go through the process
//! environment (never the command line, which other local users can read) and are redacted from
//! every error message.

mod cache;
pub mod chart;
mod checkout;
pub mod commit_info;
mod credentials;
mod git;
pub mod image;
mod limits;

pub use cache::{CacheStats, RepoCache, Resolved};
pub use chart::{ChartCache, ChartDir, ChartError, ChartLimits, ChartRequest, ChartStats, ResolvedChart};
pub use checkout::Checkout;
pub use commit_info::CommitInfo;
pub use credentials::Credentials;
pub use git::{GitCommand, check_url, redact};
pub use image::{ImageClient, ImageError, ImageRepository};
pub use limits::{Limits, SizeLimit};

/// What can go wrong reading a repository. Messages name the repository and never contain secrets.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// git or tar could not be confined by the kernel (see `capstan_sandbox`), so it did not run.
    #[error(transparent)]
    Sandbox(#[from] capstan_sandbox::SandboxError),
    /// A git command failed (unreachable, authentication, unknown repository ...).
    #[error("{operation} {url}: {message}")]
    Git {
        /// What was being done (`listing refs of`, `fetching`, ...).
        operation: String,
        /// Redacted repository URL.
        url: String,
        /// git's own message, redacted.
        message: String,
    },
    /// The revision does not exist in the repository.
    #[error("revision {revision:?} not found in {url}")]
    UnknownRevision {
        /// The requested revision.
        revision: String,
        /// Redacted repository URL.
        url: String,
    },
    /// A git command did not finish in time.
    #[error("{operation} {url}: timed out after {seconds} s")]
    Timeout {
        /// What was being done.
        operation: String,
        /// Redacted repository URL.
        url: String,
        /// The limit.
        seconds: u64,
    },
    /// A local file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The repository or the tree of a commit is larger than the operator allows.
    #[error("{url}: the {what} is larger than the limit of {limit_mib} MiB")]
    TooLarge {
        /// What is too large.
        what: SizeLimit,
        /// Redacted repository URL.
        url: String,
        /// The limit.
        limit_mib: u64,
    },
    /// The repository URL is not one Capstan accepts.
    #[error("unsupported repository URL {0}")]
    UnsupportedUrl(String),
}

impl SourceError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> SourceError {
        let context = context.into();
        move |source| SourceError::Io { context, source }
    }
}

/// Result alias for this crate.
pub type Result<T, E = SourceError> = std::result::Result<T, E>;
