//! Promotion between environments: copying the promoted fields (by default `imageTag` and
//! `targetRevision`) of one service from an environment's file to a later environment's file, as one
//! commit, when the source environment's Application is Synced and Healthy.
//!
//! This crate owns the rules, so the HTTP API and the CLI apply the same ones: [`check`] (names,
//! environments in order, the source Application's state, `force` needing a reason), [`read`] (a
//! file at a revision, fetched shallowly), [`plan`] (what a promotion would change, computed without
//! committing: the dry run), [`promote`] (the commit of a plan through `capstan-gitwrite`, the
//! history entry in the pipeline's status), [`history`] and [`places`] (which service and environment
//! an Application deploys, where it can be promoted to, the promotions concerning it), and
//! [`rollback`] (an Application's rollback by Git revert, made on the user's behalf like a promotion).
//!
//! Every pipeline belongs to an AppProject (`spec.project`): the project must permit the repository
//! (`sourceRepos`), the target file and the branch (`sourceRepoPaths`), and both environments'
//! Applications must be of that project — checked before anything is read from Git.

mod check;
mod error;
pub mod history;
pub mod places;
mod plan;
mod project;
mod promote;
pub mod read;
pub mod rollback;
mod values;

pub use check::{check_names, check_order, check_source};
pub use error::{ErrorKind, PromoteError};
pub use plan::{Plan, unified};
pub use promote::{Outcome, PromoteRequest, Promoter, find_pipeline};
pub use rollback::{
    AutoRevertRequest, RevertPlace, RevertTarget, RollbackError, can_push, check_revert_write, revert_place,
    revert_target,
};
