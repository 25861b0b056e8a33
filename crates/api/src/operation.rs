//! Operation requests: how the CLI and the HTTP server ask the controller to sync or roll back.
//!
//! A request is the JSON of [`Operation`] in the annotation [`OPERATION_ANNOTATION`] of an
//! Application (so `kubectl annotate` works too). The controller removes the annotation when it
//! starts the operation and reports progress in `status.operationState`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Annotation holding a requested [`Operation`] as JSON.
pub const OPERATION_ANNOTATION: &str = "capstan.dev/operation";

/// Annotation asking the controller to stop the running operation (its value names who asked).
/// Waves not yet started are not applied; the operation ends `Failed` with "terminated".
pub const TERMINATE_ANNOTATION: &str = "capstan.dev/terminate";

/// A requested operation.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    /// Sync to Git (or to a given revision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncOperation>,
    /// Roll back to a history entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RollbackOperation>,
    /// Who asked (`cli`, `automated`, a user name).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub initiated_by: String,
}

/// Parameters of a sync.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncOperation {
    /// Revision to sync to (default: the Application's targetRevision).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revision: String,
    /// Delete tracked objects that are no longer in Git.
    #[serde(default)]
    pub prune: bool,
    /// Compute and report, apply nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Only these objects (`group/kind/namespace/name`, empty group for core); all when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Extra sync options for this operation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sync_options: Vec<String>,
}

/// Parameters of a rollback.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackOperation {
    /// `status.history[].id` to return to.
    pub id: i64,
    /// Delete objects not in that revision.
    #[serde(default)]
    pub prune: bool,
}
