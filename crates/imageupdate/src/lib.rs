//! Image update automation (`ImageUpdater`): a controller that asks OCI registries for the tags of
//! the image repositories it is given, chooses the newest by each updater's policy, and writes the tag
//! into a key of a file in Git through the one Git writer (`capstan-gitwrite`), one commit per
//! repository and branch for everything that changed in a round.
//!
//! - [`check`]: one updater's registry question and policy answer.
//! - [`current`]: the value the file in Git holds now (so an unchanged tag costs no clone).
//! - [`controller`]: the loop: which updaters are due, batching writes per repository, status.

pub mod check;
pub mod controller;
pub mod current;

pub use controller::{Config, run};

/// Why an updater could not do its work. Messages name registries, repositories, files and keys,
/// never credentials.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// The spec cannot be used (a policy that does not compile, no key, two policies…).
    #[error("{0}")]
    Spec(String),
    /// The registry failed or refused.
    #[error("registry: {0}")]
    Registry(#[from] capstan_source::ImageError),
    /// No tag qualifies, or the policy is invalid.
    #[error("{0}")]
    Policy(#[from] capstan_source::image::PolicyError),
    /// Reading the file from Git failed.
    #[error("reading {path} from {repo}: {source}")]
    Read {
        /// The repository.
        repo: String,
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The file has no such key.
    #[error("{path} has no key {key:?}")]
    MissingKey {
        /// The file.
        path: String,
        /// The key.
        key: String,
    },
    /// The project refuses the repository.
    #[error(transparent)]
    Project(#[from] capstan_project::Violation),
    /// Writing to Git failed.
    #[error("writing to Git: {0}")]
    Write(#[from] capstan_gitwrite::WriteError),
}
