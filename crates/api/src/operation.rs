//! Operation requests: how the CLI and the HTTP server ask the controller to sync or roll back.
//!
//! A request is the JSON of [`Operation`] in the annotation [`OPERATION_ANNOTATION`] of an
//! Application (so `kubectl annotate` works too). The controller reports progress in
//! `status.operationState`, whose `operation` is the request it runs.
//!
//! A request with an [`Operation::id`] (every request Capstan's own clients write) is handled once
//! `status.operationState.operation.id` names it: the controller removes the annotation after the
//! operation has finished, off the operation's path. A request without one (say, written with
//! `kubectl annotate`) is removed before the operation starts.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Annotation holding a requested [`Operation`] as JSON.
pub const OPERATION_ANNOTATION: &str = "capstan.dev/operation";

/// Annotation asking the controller to stop the running operation (its value names who asked).
/// Waves not yet started are not applied; the operation ends `Failed` with "terminated by …", and
/// `terminatedBy` names who asked.
pub const TERMINATE_ANNOTATION: &str = "capstan.dev/terminate";

/// The phase of an operation (`status.operationState.phase`), spelt as Argo CD spells it.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum OperationPhase {
    /// Started and not ended yet (a restarted controller resumes it).
    #[default]
    Running,
    /// Being stopped (Capstan itself does not write it: a stopped operation ends `Failed`).
    Terminating,
    /// Ended: something failed, the operation could not start, or a person stopped it.
    Failed,
    /// Ended with an error outside the sync itself (Capstan itself does not write it).
    Error,
    /// Ended: everything was applied (and healthy).
    Succeeded,
    /// A phase this version does not know (written by a newer version, or by hand). Reading it must
    /// not fail: an Application that cannot be deserialised would break every watch of
    /// Applications. It is treated as not running (completed, not failed), and left out of the
    /// schema, which lists the phases Capstan writes.
    #[serde(other)]
    #[schemars(skip)]
    Unknown,
}

impl OperationPhase {
    /// Every phase Capstan knows (not [`OperationPhase::Unknown`]).
    pub const ALL: [OperationPhase; 5] = [
        OperationPhase::Running,
        OperationPhase::Terminating,
        OperationPhase::Failed,
        OperationPhase::Error,
        OperationPhase::Succeeded,
    ];

    /// The spelling in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationPhase::Running => "Running",
            OperationPhase::Terminating => "Terminating",
            OperationPhase::Failed => "Failed",
            OperationPhase::Error => "Error",
            OperationPhase::Succeeded => "Succeeded",
            OperationPhase::Unknown => "Unknown",
        }
    }

    /// Whether the operation has ended (neither running nor being stopped); an unknown phase counts
    /// as ended, so nothing waits for it.
    pub fn is_completed(self) -> bool {
        !matches!(self, OperationPhase::Running | OperationPhase::Terminating)
    }

    /// Whether the operation ended and did not succeed.
    pub fn is_failed(self) -> bool {
        matches!(self, OperationPhase::Failed | OperationPhase::Error)
    }
}

impl std::fmt::Display for OperationPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A phase name that is none of [`OperationPhase`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown operation phase {0:?}")]
pub struct UnknownPhase(pub String);

impl std::str::FromStr for OperationPhase {
    type Err = UnknownPhase;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        OperationPhase::ALL
            .into_iter()
            .find(|p| p.as_str() == text)
            .ok_or_else(|| UnknownPhase(text.to_string()))
    }
}

/// Phases compare with their spelling (`phase == "Succeeded"`), as clients reading the JSON do.
impl PartialEq<str> for OperationPhase {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for OperationPhase {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

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
    /// Identifies one request (see [`new_request_id`]): the operation in status that carries it
    /// handled the request.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
}

/// A new request id, unique for practical purposes: the time in nanoseconds, this process's id
/// and a counter. (Written by hand rather than with a UUID crate: the id only has to differ from
/// the previous requests of one Application.)
pub fn new_request_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{nanos:x}-{:x}-{n:x}", std::process::id())
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
    /// A person confirmed the deletions: the sync may prune more objects than the project's
    /// `deletionBudget` allows.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_deletions: bool,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::{Application, ApplicationStatus, OperationState};

    fn app_with(request: Option<&Operation>, in_status: Option<&Operation>) -> Application {
        let mut app: Application = serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "namespace": "capstan"},
            "spec": {"source": {"repoURL": "file:///r", "path": "."}, "destination": {"namespace": "d"}}
        }))
        .expect("application");
        if let Some(op) = request {
            app.metadata
                .annotations
                .get_or_insert_default()
                .insert(OPERATION_ANNOTATION.into(), serde_json::to_string(op).expect("json"));
        }
        app.status = Some(ApplicationStatus {
            operation_state: in_status.map(|op| OperationState {
                phase: OperationPhase::Succeeded,
                operation: Some(op.clone()),
                ..Default::default()
            }),
            ..Default::default()
        });
        app
    }

    #[test]
    fn phases_keep_their_api_spelling() {
        for phase in OperationPhase::ALL {
            let json = serde_json::to_value(phase).expect("json");
            assert_eq!(json, serde_json::json!(phase.as_str()));
            assert_eq!(serde_json::from_value::<OperationPhase>(json).expect("phase"), phase);
            assert_eq!(phase.as_str().parse::<OperationPhase>(), Ok(phase));
            assert_eq!(phase.to_string(), phase.as_str());
        }
        assert!("running".parse::<OperationPhase>().is_err());
        assert!(
            "Unknown".parse::<OperationPhase>().is_err(),
            "not a phase Capstan writes"
        );
        assert!(OperationPhase::Succeeded.is_completed() && !OperationPhase::Running.is_completed());
        assert!(OperationPhase::Error.is_failed() && !OperationPhase::Succeeded.is_failed());
        // A stored state without `terminatedBy` (written before it existed) still reads.
        let state: OperationState =
            serde_json::from_value(serde_json::json!({"phase": "Failed", "message": "m"})).expect("state");
        assert_eq!((state.phase, state.terminated_by), (OperationPhase::Failed, None));
    }

    #[test]
    fn an_unknown_phase_reads_as_unknown_and_not_running() {
        let phase: OperationPhase = serde_json::from_value(serde_json::json!("Paused")).expect("phase");
        assert_eq!(phase, OperationPhase::Unknown);
        assert!(phase.is_completed(), "not running");
        assert!(!phase.is_failed());
        // The whole Application still reads, so a watch of Applications does not break on it.
        let app: Application = serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1",
            "kind": "Application",
            "metadata": {"name": "a", "namespace": "capstan"},
            "spec": {"source": {"repoURL": "https://example.com/r.git"}, "destination": {}},
            "status": {"operationState": {"phase": "Paused", "message": "from a newer version"}},
        }))
        .expect("an Application with an unknown phase");
        let state = app.status.and_then(|s| s.operation_state).expect("operation state");
        assert_eq!(state.phase, OperationPhase::Unknown);
        assert_eq!(state.message, "from a newer version");
        let schema = serde_json::to_value(schemars::schema_for!(OperationPhase)).expect("schema");
        assert!(
            !schema.to_string().contains("Unknown"),
            "the schema lists the phases Capstan writes"
        );
    }

    #[test]
    fn a_request_is_pending_until_the_operation_in_status_carries_its_id() {
        let first = Operation {
            sync: Some(SyncOperation::default()),
            initiated_by: "cli".into(),
            id: new_request_id(),
            ..Default::default()
        };
        let second = Operation {
            id: new_request_id(),
            ..first.clone()
        };
        assert_ne!(first.id, second.id, "ids differ");
        assert!(app_with(None, Some(&first)).pending_request().is_none());
        assert!(app_with(Some(&first), None).pending_request().is_some());
        assert!(app_with(Some(&first), Some(&first)).pending_request().is_none());
        assert!(app_with(Some(&second), Some(&first)).pending_request().is_some());
        // Without an id a request is never taken as handled: identical requests would be lost.
        let anonymous = Operation {
            id: String::new(),
            ..first.clone()
        };
        assert!(app_with(Some(&anonymous), Some(&anonymous)).pending_request().is_some());
        // Neither is one that does not parse.
        let mut broken = app_with(None, Some(&first));
        broken
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(OPERATION_ANNOTATION.into(), "{not json".into());
        assert!(broken.pending_request().is_some());
    }
}
