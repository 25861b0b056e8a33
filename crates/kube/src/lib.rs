//! Shared Kubernetes helpers of Capstan's crates: nothing here compares, syncs or reconciles.
//!
//! - [`key`]: the identity of an object ([`ObjectKey`]: group, kind, namespace, name).
//! - [`discovery`]: resolving `apiVersion` + `kind` through API discovery, cached per cluster
//!   ([`Discovery`], [`KindInfo`]), and the list of APIs a cluster serves.
//! - [`own_writes`]: the versions of objects Capstan itself wrote ([`OwnWrites`]), so a watch can
//!   tell the echo of its own write from someone else's change.
//! - [`impersonate`]: a client acting as another user, e.g. the ServiceAccount a project's syncs
//!   act as ([`impersonating`]).
//! - [`cache`]: what a watch cache keeps of an object (not its `managedFields`).
//! - [`annotations`]: the per-object annotations that steer sync and compare (sync wave, hooks,
//!   sync and compare options) with their Argo CD aliases.
//! - [`selector`]: Kubernetes label selectors over string maps, validated with the requirement at
//!   fault named ([`Selector`]).
//! - [`patch`]: the RFC 7386 merge patch between two versions of a status ([`merge_patch`]).
//! - [`refresh`]: after Capstan commits to a repository, asking the Applications and ApplicationSets
//!   that read it to look at Git now ([`refresh_readers`]).
//! - [`shutdown`]: stopping a kube-runtime controller at any moment, even before its first list
//!   ([`shutdown::drive`]), and start-up awaits that give way to a shutdown.
//! - [`error`]: what these helpers fail with ([`KubeError`]) and how an API server's error is worded
//!   for users ([`describe_kube_error`]).

pub mod annotations;
pub mod cache;
pub mod discovery;
pub mod error;
pub mod impersonate;
pub mod key;
pub mod own_writes;
pub mod patch;
pub mod refresh;
pub mod selector;
pub mod shutdown;

pub use discovery::{Discovery, KindInfo};
pub use error::{KubeError, describe_kube_error};
pub use impersonate::impersonating;
pub use key::ObjectKey;
pub use own_writes::OwnWrites;
pub use patch::merge_patch;
pub use refresh::refresh_readers;
pub use selector::Selector;

/// Result alias for this crate.
pub type Result<T, E = KubeError> = std::result::Result<T, E>;
