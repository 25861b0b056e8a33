//! The `compare` stage: is the cluster what Git says?
//!
//! This crate owns the identity of objects ([`ObjectKey`]), the per-object annotations Capstan reads
//! ([`annotations`]), resolving kinds through API discovery ([`discovery`]), preparing rendered
//! objects for a destination ([`normalize`]: default namespace, tracking label and annotation), and the
//! comparison itself ([`diff`]): a cheap check that every field Git sets has that value live and that
//! Git still sets every field Capstan's last apply set ([`owned`]), and a server-side-apply dry run
//! only when that check fails, so that defaults filled in by the API server are never drift, a field
//! removed from Git is, and a comparison with nothing changed makes no write requests. API versions
//! that current clusters no longer serve are named with their replacement ([`removed_apis`]).

pub mod annotations;
pub mod diff;
pub mod discovery;
pub mod key;
pub mod normalize;
pub mod own_writes;
pub mod owned;
pub mod removed_apis;

/// The field manager Capstan applies with.
pub const FIELD_MANAGER: &str = "capstan";

pub use diff::{Comparison, ResourceState, SyncCode, compare, render_diff};
pub use discovery::{Discovery, KindInfo};
pub use key::ObjectKey;
pub use own_writes::OwnWrites;

/// What can go wrong comparing.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A rendered object is not usable (no kind, no name ...).
    #[error("invalid object {what}: {message}")]
    InvalidObject {
        /// Which object.
        what: String,
        /// What is wrong.
        message: String,
    },
    /// The destination does not know the kind.
    #[error("unknown kind {kind} in {api_version} (object {object}): the destination cluster has no such resource")]
    UnknownKind {
        /// apiVersion.
        api_version: String,
        /// kind.
        kind: String,
        /// The object that uses it.
        object: String,
    },
    /// A Kubernetes request failed.
    #[error("{context}: {message}")]
    Kube {
        /// What was being done.
        context: String,
        /// The API server's message.
        message: String,
    },
}

/// A one-line description of a kube error: the API server's message for API errors.
pub fn describe_kube_error(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.reason),
        other => {
            let mut msg = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(cause) = source {
                let text = cause.to_string();
                if !msg.contains(&text) {
                    msg.push_str(": ");
                    msg.push_str(&text);
                }
                source = cause.source();
            }
            msg
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = CompareError> = std::result::Result<T, E>;
