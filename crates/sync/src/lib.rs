//! The `sync` stage: make the cluster equal to a [`Comparison`](capstan_compare::Comparison), safely.
//!
//! [`plan`] orders the work: phase (PreSync → Sync → PostSync; SyncFail only on failure) → wave
//! (`capstan.dev/sync-wave`) → kind (Namespaces and CRDs first, then the usual kubectl order) → name,
//! with prunes after the applies of the Sync phase in reverse wave order (and after PostSync with
//! `PruneLast=true`). [`execute`] runs it: the tasks of one wave in parallel with server-side apply
//! (field manager `capstan`), then waits until every object of the wave is healthy (hooks: complete)
//! before the next wave starts. The first failure stops the sync, runs the SyncFail hooks and names the
//! object and the API server's message. Nothing is applied when an object is tracked by another
//! Application.

pub mod error;
pub mod execute;
pub mod options;
pub mod plan;

pub use error::{RecordError, SyncError};
pub use execute::{ExecuteOptions, Progress, Recorded, Recording, SyncOutcome, execute};
pub use options::{SyncOptions, unsupported_app_option};
pub use plan::{Action, Task, kind_order, plan};
