//! The record of an operation in `status.operationState` at each of its steps — started, resumed,
//! failed (before anything was applied), finished, terminated — and the history entry of a successful
//! sync. Pure: the caller writes the status.

use std::collections::HashSet;

use capstan_api::application::{ApplicationSource, ApplicationStatus, OperationState, ResourceResult, RevisionHistory};
use capstan_api::operation::{Operation, OperationPhase};
use capstan_api::status::ResultCode;
use capstan_sync::SyncOutcome;

use crate::clock;

/// How the message of a terminated operation starts (who stopped it is in `terminatedBy`).
const TERMINATED_PREFIX: &str = "terminated by ";

/// How many routine results (non-hook objects applied without a problem) an operation lists.
///
/// Every object of a large first sync would otherwise be listed: 2,000 objects add ~200 KB to the
/// Application, and the API server's work for each later write of it (the request annotation, every
/// status update) grows with its size, as does the risk of reaching etcd's limit on one object.
pub const LISTED_ROUTINE_RESULTS: usize = 250;

/// Whether `op` is the operation `previous` records as running: a restarted controller resumes it.
pub fn resumes(previous: Option<&OperationState>, op: &Operation) -> bool {
    previous.is_some_and(|o| o.phase == OperationPhase::Running && o.operation.as_ref() == Some(op))
}

/// The state of `op` as it starts (or resumes, when `resuming`) at `revision`, after `previous`.
pub fn start(previous: Option<&OperationState>, op: &Operation, revision: &str, resuming: bool) -> OperationState {
    let resumed = previous.filter(|_| resuming);
    OperationState {
        phase: OperationPhase::Running,
        message: if resuming {
            "resuming after a controller restart".into()
        } else {
            "syncing".into()
        },
        revision: revision.to_string(),
        revisions: Vec::new(),
        // To the millisecond, as `finishedAt`: operations that follow each other within a second
        // (a rollout's steps) keep their order.
        started_at: resumed.map(|p| p.started_at.clone()).unwrap_or_else(clock::now_precise),
        finished_at: None,
        retry_count: retry_count(previous, op, revision),
        // A resumed operation keeps the results recorded so far (the completed hooks among them).
        resources: resumed.map(|p| p.resources.clone()).unwrap_or_default(),
        operation: Some(op.clone()),
        terminated_by: None,
    }
}

/// The attempt number of an automated sync: one more than the last one's when that one was an
/// unsuccessful attempt at the same revision; otherwise 0.
fn retry_count(previous: Option<&OperationState>, op: &Operation, revision: &str) -> i64 {
    match previous {
        Some(p) if op.initiated_by == "automated" && p.revision == revision && p.phase != OperationPhase::Succeeded => {
            p.retry_count + 1
        }
        _ => 0,
    }
}

/// The hooks (`PHASE:GROUP/KIND/NAMESPACE/NAME`) the interrupted run of a resumed operation completed:
/// they do not run again.
pub fn completed_hooks(previous: Option<&OperationState>, resuming: bool) -> HashSet<String> {
    previous
        .filter(|_| resuming)
        .map(|p| {
            p.resources
                .iter()
                .filter(|r| r.status == ResultCode::Synced && r.hook)
                .map(|r| format!("{}:{}/{}/{}/{}", r.sync_phase, r.group, r.kind, r.namespace, r.name))
                .collect()
        })
        .unwrap_or_default()
}

/// The objects (`GROUP/KIND/NAMESPACE/NAME`) the interrupted run of a resumed operation already
/// deleted and created again (`Force=true`): they are not deleted a second time.
pub fn recreated(previous: Option<&OperationState>, resuming: bool) -> HashSet<String> {
    previous
        .filter(|_| resuming)
        .map(|p| {
            p.resources
                .iter()
                .filter(|r| r.status == ResultCode::Synced && !r.hook && r.message == capstan_sync::execute::RECREATED)
                .map(|r| format!("{}/{}/{}/{}", r.group, r.kind, r.namespace, r.name))
                .collect()
        })
        .unwrap_or_default()
}

/// The operation failed before anything was applied.
pub fn fail(state: &mut OperationState, message: String) {
    state.phase = OperationPhase::Failed;
    state.message = message;
    state.finished_at = Some(clock::now_precise());
}

/// The record of a requested operation that could not even start (Git or rendering failed), so the
/// request is not lost silently.
pub fn failed_to_start(op: &Operation, why: &impl std::fmt::Display) -> OperationState {
    OperationState {
        phase: OperationPhase::Failed,
        message: format!("the operation could not start: {why}"),
        started_at: clock::now_precise(),
        finished_at: Some(clock::now_precise()),
        operation: Some(op.clone()),
        ..Default::default()
    }
}

/// The outcome of an operation `who` stopped, with the `results` it had reached.
pub fn terminate(who: &str, results: Vec<ResourceResult>) -> SyncOutcome {
    SyncOutcome {
        succeeded: false,
        message: format!("{TERMINATED_PREFIX}{who}"),
        results,
        ..Default::default()
    }
}

/// The operation ran longer than `spec.syncPolicy.syncTimeout` (`limit`) and was stopped while
/// `doing` (its last progress message).
pub fn timed_out(limit: std::time::Duration, doing: &str, results: Vec<ResourceResult>) -> SyncOutcome {
    let limit = humantime::format_duration(limit);
    let message = if doing.is_empty() {
        format!("operation timed out after {limit} (spec.syncPolicy.syncTimeout)")
    } else {
        format!("operation timed out after {limit} (spec.syncPolicy.syncTimeout) while {doing}")
    };
    SyncOutcome {
        succeeded: false,
        message,
        results,
        ..Default::default()
    }
}

/// The operation ended with `succeeded`, `message` and `results` (stopped by `terminated_by`, if a
/// person stopped it).
pub fn finish(
    state: &mut OperationState,
    succeeded: bool,
    message: String,
    results: Vec<ResourceResult>,
    terminated_by: Option<String>,
) {
    state.phase = if succeeded {
        OperationPhase::Succeeded
    } else {
        OperationPhase::Failed
    };
    state.message = message;
    state.finished_at = Some(clock::now_precise());
    state.terminated_by = terminated_by;
    let (listed, unlisted) = listed_results(results);
    state.resources = listed;
    if unlisted > 0 {
        state.message.push_str(&format!(
            "; {unlisted} objects applied without a problem are not listed"
        ));
    }
}

/// What a successful sync deployed: the revision (every source's joined with `,`), and for a
/// multi-source Application each source and its revision.
pub struct Deployed<'a> {
    /// The revision as `status.sync.revision` records it.
    pub revision: &'a str,
    /// Each source's revision (multi-source only).
    pub revisions: Vec<String>,
    /// The single source (left unset for a multi-source Application).
    pub source: &'a ApplicationSource,
    /// The sources (multi-source only).
    pub sources: &'a [ApplicationSource],
}

/// Add a history entry for a successful sync of `deployed`, keeping the newest `limit`.
pub fn push_history(status: &mut ApplicationStatus, deployed: Deployed<'_>, limit: usize) {
    let id = status.history.iter().map(|h| h.id).max().unwrap_or(-1) + 1;
    let multi = !deployed.sources.is_empty();
    status.history.push(RevisionHistory {
        id,
        revision: deployed.revision.to_string(),
        deployed_at: clock::now(),
        source: if multi {
            ApplicationSource::default()
        } else {
            deployed.source.clone()
        },
        revisions: deployed.revisions,
        sources: deployed.sources.to_vec(),
    });
    let excess = status.history.len().saturating_sub(limit.max(1));
    status.history.drain(..excess);
}

/// Whether the recorded operation applied, pruned or ran anything (objects left as they were are not
/// listed in its results).
pub fn changed_anything(status: &ApplicationStatus) -> bool {
    status
        .operation_state
        .as_ref()
        .is_none_or(|o| o.phase != OperationPhase::Succeeded || !o.resources.is_empty())
}

/// The results to record: every hook, failure and prune, and the first [`LISTED_ROUTINE_RESULTS`]
/// routine applies; with the number of routine applies left out.
fn listed_results(results: Vec<ResourceResult>) -> (Vec<ResourceResult>, usize) {
    let mut routine = 0;
    let listed = results
        .into_iter()
        .filter(|r| {
            if r.hook || r.status != ResultCode::Synced || !r.message.is_empty() {
                return true;
            }
            routine += 1;
            routine <= LISTED_ROUTINE_RESULTS
        })
        .collect();
    (listed, routine.saturating_sub(LISTED_ROUTINE_RESULTS))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployed<'a>(revision: &'a str, source: &'a ApplicationSource) -> Deployed<'a> {
        Deployed {
            revision,
            revisions: Vec::new(),
            source,
            sources: &[],
        }
    }
    use capstan_api::operation::SyncOperation;

    fn result(name: &str, status: &str, hook: bool, message: &str) -> ResourceResult {
        ResourceResult {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: String::new(),
            name: name.into(),
            status: ResultCode::parse(status),
            hook,
            message: message.into(),
            sync_phase: "Sync".into(),
            sync_wave: 0,
        }
    }

    fn op(initiated_by: &str) -> Operation {
        Operation {
            sync: Some(SyncOperation::default()),
            initiated_by: initiated_by.into(),
            id: "1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn results_list_every_hook_failure_and_prune_but_only_some_routine_applies() {
        let mut results: Vec<ResourceResult> = (0..LISTED_ROUTINE_RESULTS + 40)
            .map(|i| result(&format!("cm-{i:04}"), "Synced", false, ""))
            .collect();
        results.push(result("hook", "Synced", true, ""));
        results.push(result("broken", "SyncFailed", false, "rejected"));
        results.push(result("gone", "Pruned", false, ""));
        results.push(result("warned", "Synced", false, "replaced"));
        let (listed, unlisted) = listed_results(results);
        assert_eq!(unlisted, 40);
        assert_eq!(listed.len(), LISTED_ROUTINE_RESULTS + 4);
        for name in ["hook", "broken", "gone", "warned", "cm-0000"] {
            assert!(listed.iter().any(|r| r.name == name), "{name} listed");
        }
        assert!(
            !listed
                .iter()
                .any(|r| r.name == format!("cm-{:04}", LISTED_ROUTINE_RESULTS))
        );

        let few: Vec<ResourceResult> = (0..3)
            .map(|i| result(&format!("cm-{i}"), "Synced", false, ""))
            .collect();
        assert_eq!(listed_results(few.clone()), (few, 0));
    }

    #[test]
    fn an_operation_starts_or_resumes_where_it_stood() {
        let sync = op("cli");
        let fresh = start(None, &sync, "abc", false);
        assert_eq!(fresh.phase, OperationPhase::Running);
        assert_eq!((fresh.message.as_str(), fresh.revision.as_str()), ("syncing", "abc"));
        assert!(fresh.finished_at.is_none() && fresh.resources.is_empty() && fresh.retry_count == 0);
        assert!(clock::parse(&fresh.started_at).is_some());

        let mut running = fresh.clone();
        running.started_at = "2024-05-01T10:00:00.000Z".into();
        running.resources = vec![
            result("pre", "Synced", true, ""),
            result("cm", "Synced", false, ""),
            result("failed-hook", "SyncFailed", true, ""),
            result("job", "Synced", false, capstan_sync::execute::RECREATED),
        ];
        running.resources[0].sync_phase = "PreSync".into();
        assert!(resumes(Some(&running), &sync));
        assert!(!resumes(Some(&running), &op("someone else")), "another request");
        let mut ended = running.clone();
        ended.phase = OperationPhase::Failed;
        assert!(!resumes(Some(&ended), &sync), "it ended");

        let resumed = start(Some(&running), &sync, "abc", true);
        assert_eq!(resumed.started_at, "2024-05-01T10:00:00.000Z");
        assert_eq!(resumed.message, "resuming after a controller restart");
        assert_eq!(resumed.resources, running.resources);
        assert_eq!(
            completed_hooks(Some(&running), true),
            HashSet::from(["PreSync:/ConfigMap//pre".to_string()])
        );
        assert!(completed_hooks(Some(&running), false).is_empty());
        assert_eq!(
            recreated(Some(&running), true),
            HashSet::from(["/ConfigMap//job".to_string()]),
            "a forced object recreated before the restart is not deleted again"
        );
        assert!(recreated(Some(&running), false).is_empty());
        // A new operation after another starts afresh.
        assert!(start(Some(&running), &sync, "abc", false).resources.is_empty());
    }

    #[test]
    fn automated_retries_count_unsuccessful_attempts_at_one_revision() {
        let auto = op("automated");
        let mut failed = start(None, &auto, "abc", false);
        fail(&mut failed, "broken".into());
        assert_eq!(failed.phase, OperationPhase::Failed);
        assert!(failed.finished_at.is_some());
        assert_eq!(start(Some(&failed), &auto, "abc", false).retry_count, 1);
        failed.retry_count = 1;
        assert_eq!(start(Some(&failed), &auto, "abc", false).retry_count, 2);
        assert_eq!(
            start(Some(&failed), &auto, "def", false).retry_count,
            0,
            "a new revision"
        );
        assert_eq!(
            start(Some(&failed), &op("cli"), "abc", false).retry_count,
            0,
            "a person asked"
        );
        failed.phase = OperationPhase::Succeeded;
        assert_eq!(start(Some(&failed), &auto, "abc", false).retry_count, 0);
    }

    #[test]
    fn an_operation_finishes_or_is_terminated() {
        let mut state = start(None, &op("cli"), "abc", false);
        let mut results: Vec<ResourceResult> = (0..LISTED_ROUTINE_RESULTS + 2)
            .map(|i| result(&format!("cm-{i:04}"), "Synced", false, ""))
            .collect();
        results.push(result("hook", "Synced", true, ""));
        finish(&mut state, true, "done".into(), results, None);
        assert_eq!(state.phase, OperationPhase::Succeeded);
        assert_eq!(
            state.message,
            "done; 2 objects applied without a problem are not listed"
        );
        assert_eq!(state.resources.len(), LISTED_ROUTINE_RESULTS + 1);
        assert!(state.finished_at.is_some() && state.terminated_by.is_none());

        let stopped = terminate("admin", vec![result("cm", "Synced", false, "")]);
        assert!(!stopped.succeeded);
        let mut state = start(None, &op("cli"), "abc", false);
        finish(
            &mut state,
            stopped.succeeded,
            stopped.message,
            stopped.results,
            Some("admin".into()),
        );
        assert_eq!(state.phase, OperationPhase::Failed);
        assert_eq!(state.message, "terminated by admin");
        assert_eq!(state.terminated_by.as_deref(), Some("admin"));
        assert_eq!(state.resources.len(), 1);

        let never = failed_to_start(&op("cli"), &"no such revision");
        assert_eq!(never.phase, OperationPhase::Failed);
        assert_eq!(never.message, "the operation could not start: no such revision");
    }

    #[test]
    fn history_keeps_the_newest_entries_and_results_tell_whether_anything_changed() {
        let mut status = ApplicationStatus::default();
        let source = ApplicationSource::default();
        for revision in ["a", "b", "c"] {
            push_history(&mut status, deployed(revision, &source), 2);
        }
        let kept: Vec<(i64, &str)> = status.history.iter().map(|h| (h.id, h.revision.as_str())).collect();
        assert_eq!(kept, [(1, "b"), (2, "c")]);
        assert!(clock::parse(&status.history[0].deployed_at).is_some());
        push_history(&mut status, deployed("d", &source), 0);
        assert_eq!(status.history.len(), 1, "at least one entry is kept");

        assert!(changed_anything(&status), "no operation recorded");
        let mut state = start(None, &op("cli"), "abc", false);
        finish(&mut state, true, "nothing to do".into(), Vec::new(), None);
        status.operation_state = Some(state.clone());
        assert!(!changed_anything(&status));
        finish(
            &mut state,
            true,
            "applied".into(),
            vec![result("cm", "Synced", false, "")],
            None,
        );
        status.operation_state = Some(state);
        assert!(changed_anything(&status));
    }
}
