//! Writing to Git: the one component every commit Capstan makes (image updates, promotions) goes
//! through.
//!
//! A [`GitWriter`] takes a [`WriteRequest`] — a repository, a branch, a message and [`Edit`]s that
//! are plain data ([`Change::SetKey`] on a [`KeyPath`], [`Change::KustomizeImage`], and
//! [`Change::CreateFile`], which adds a file the branch does not have) — clones the
//! branch, applies the edits surgically ([`edit`]: only the value's bytes change), commits with the
//! configured author and pushes without force. When the push is rejected because someone pushed
//! meanwhile, it fetches the new head, applies the same edits to the new content and pushes again,
//! a bounded number of times. Git runs through `capstan-source`'s [`capstan_source::GitCommand`]
//! (isolated configuration, credentials in the environment, redacted errors, timeouts). [`read`]
//! reads the value an edit would replace, for callers that compare before they write. [`revert`]
//! makes the one commit of a rollback by Git revert ([`GitWriter::revert`]).

pub mod edit;
mod error;
mod paths;
pub mod read;
mod request;
pub mod revert;
mod scalar;
mod writer;

pub use error::WriteError;
pub use paths::resolve as resolve_in_checkout;
pub use read::{ReadError, kustomize_image_tag, scalar_at};
pub use request::{Change, Edit, KeyPath, Segment, WriteOutcome, WriteRequest};
pub use revert::{RevertError, RevertErrorKind, RevertRequest, Reverted};
pub use writer::{BeforePush, GitWriter, WriterConfig};
