//! The `compare` stage: is the cluster what Git says?
//!
//! This crate owns preparing rendered objects for a destination ([`normalize`]: default namespace,
//! tracking label and annotation), and the comparison itself ([`diff`]): a cheap check that every field Git sets has that value live and that
//! Git still sets every field Capstan's last apply set ([`owned`]), and a server-side-apply dry run
//! only when that check fails, so that defaults filled in by the API server are never drift, a field
//! removed from Git is, and a comparison with nothing changed makes no write requests. API versions
//! that current clusters no longer serve are named with their replacement ([`removed_apis`]).
//!
//! Object identity, discovery, own-write tracking and the per-object annotations are shared
//! Kubernetes helpers of `capstan-kube`, which this crate builds on.

pub mod diff;
pub mod managers;
pub mod normalize;
pub mod owned;
pub mod removed_apis;

/// The field manager Capstan applies with.
pub const FIELD_MANAGER: &str = "capstan";

pub use diff::{Comparison, ResourceState, SyncCode, compare, render_diff};

use capstan_kube::annotations::AnnotationError;
use capstan_kube::{KubeError, ObjectKey, describe_kube_error};

/// What can go wrong comparing.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// An object cannot be identified or its kind resolved, or discovery failed.
    #[error(transparent)]
    Kube(#[from] KubeError),
    /// An annotation that steers the comparison cannot be used.
    #[error("invalid object {key}: {source}")]
    Annotation {
        /// The object.
        key: ObjectKey,
        /// What is wrong with the annotation.
        #[source]
        source: AnnotationError,
    },
    /// Reading a live object (for the managedFields of `ignoreDifferences` managers) failed.
    #[error("reading {key} for its managedFields: {}", describe_kube_error(.source))]
    ReadLive {
        /// The object.
        key: ObjectKey,
        /// What the API server answered.
        #[source]
        source: kube::Error,
    },
    /// The server-side-apply dry run of an object failed.
    #[error("comparing {key} (server-side dry run): {}", describe_kube_error(.source))]
    DryRun {
        /// The object.
        key: ObjectKey,
        /// What the API server answered.
        #[source]
        source: kube::Error,
    },
    /// The dry run's answer could not be read.
    #[error("reading {key}: {source}")]
    Read {
        /// The object.
        key: ObjectKey,
        /// Why it does not parse.
        #[source]
        source: serde_json::Error,
    },
}

/// Result alias for this crate.
pub type Result<T, E = CompareError> = std::result::Result<T, E>;
