//! Automated sync: whether an Application with `syncPolicy.automated` needs a sync now (a new
//! revision, drift with `selfHeal`, a failed sync's retry with backoff), decided from its comparison
//! and its last operation. Pure: nothing here reads or writes a cluster.

use std::time::Duration;

use capstan_api::Application;
use capstan_api::application::ApplicationStatus;
use capstan_api::operation::{Operation, OperationPhase, SyncOperation};
use capstan_compare::{Comparison, SyncCode};
use capstan_sync::SyncOptions;

use crate::clock;

/// The automated sync `app` needs now, if any: a new revision is synced once; with `selfHeal` drift at
/// an already synced revision is reverted; a failed sync is retried per `retry` with backoff.
/// `revision` is the commit the Application is compared with, `comparison` the comparison.
pub fn automated(
    app: &Application,
    status: &ApplicationStatus,
    revision: &str,
    comparison: &Comparison,
) -> Option<Operation> {
    let auto = app.spec.sync_policy.as_ref()?.automated.as_ref()?;
    if !automated_could_act(app, comparison) {
        return None;
    }
    let op = Operation {
        sync: Some(SyncOperation {
            prune: auto.prune,
            ..Default::default()
        }),
        rollback: None,
        initiated_by: "automated".into(),
        id: String::new(),
    };
    let Some(last) = &status.operation_state else {
        return Some(op);
    };
    if last.revision != revision {
        return Some(op);
    }
    match last.phase {
        OperationPhase::Succeeded => auto.self_heal.then_some(op),
        OperationPhase::Running => None,
        // A person stopped it: not retried at the same revision.
        _ if last.terminated_by.is_some() => None,
        _ => retry_due_in(app, status).is_some_and(|due| due.is_zero()).then_some(op),
    }
}

/// Whether an automated sync of `state` could change something (whatever the last operation was).
/// Not when it is Synced; not when the only differences are objects that require pruning while prune
/// is off (or they say `Prune=false`): they would stay OutOfSync and trigger a sync forever; not when
/// Git renders nothing and the sync would prune everything, unless `allowEmpty` (as in Argo CD).
pub fn automated_could_act(app: &Application, comparison: &Comparison) -> bool {
    let Some(auto) = app.spec.sync_policy.as_ref().and_then(|p| p.automated.as_ref()) else {
        return false;
    };
    if comparison.sync() == SyncCode::Synced {
        return false;
    }
    let actionable = comparison.resources.iter().any(|r| {
        !r.hook
            && r.sync == SyncCode::OutOfSync
            && (!r.requires_pruning || (auto.prune && r.live.as_ref().is_none_or(|l| SyncOptions::of_object(l).prune)))
    });
    let desired = comparison.resources.iter().any(|r| !r.hook && r.desired.is_some());
    actionable && (desired || auto.allow_empty)
}

/// When the failed automated sync in `status` may be retried (zero: now), per `syncPolicy.retry`;
/// `None` when it is not retried (no retry policy, the limit reached, stopped by a person, or the
/// last operation did not fail).
pub fn retry_due_in(app: &Application, status: &ApplicationStatus) -> Option<Duration> {
    let policy = app.spec.sync_policy.as_ref()?;
    policy.automated.as_ref()?;
    let retry = policy.retry.as_ref()?;
    let last = status.operation_state.as_ref()?;
    if matches!(last.phase, OperationPhase::Succeeded | OperationPhase::Running) || last.terminated_by.is_some() {
        return None;
    }
    if retry.limit >= 0 && last.retry_count >= retry.limit {
        return None;
    }
    let backoff = retry.backoff.clone().unwrap_or_default();
    let duration = |text: &str, field: &str, default: Duration| {
        if text.trim().is_empty() {
            return default;
        }
        parse_duration(text).unwrap_or_else(|| {
            tracing::warn!(value = text, field, "not a duration; using {}s", default.as_secs());
            default
        })
    };
    let base = duration(&backoff.duration, "retry.backoff.duration", Duration::from_secs(5));
    let max = duration(
        &backoff.max_duration,
        "retry.backoff.maxDuration",
        Duration::from_secs(180),
    );
    let factor = backoff.factor.unwrap_or(2).max(1) as u32;
    let delay = base
        .saturating_mul(factor.saturating_pow(last.retry_count.clamp(0, 16) as u32))
        .min(max);
    let Some(elapsed) = last.finished_at.as_deref().and_then(clock::since) else {
        return Some(Duration::ZERO);
    };
    Some(delay.saturating_sub(elapsed))
}

/// Parse a retry duration as Argo CD reads it: a bare number is seconds (`7`), anything else a
/// Go-style duration (`500ms`, `5s`, `1m30s`, `2h`), parsed by `humantime`. `None` when it is not one.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    humantime::parse_duration(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::application::OperationState;
    use capstan_kube::ObjectKey;

    fn state(name: &str, sync: SyncCode, desired: bool, requires_pruning: bool) -> capstan_compare::ResourceState {
        use kube::core::GroupVersionKind;
        use kube::discovery::ApiResource;
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        capstan_compare::ResourceState {
            key: ObjectKey::of(&cm).expect("key"),
            api_version: "v1".into(),
            info: capstan_kube::KindInfo {
                resource: ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("", "v1", "ConfigMap"),
                    "configmaps",
                ),
                namespaced: true,
                status_subresource: None,
            },
            desired: desired.then(|| cm.clone()),
            live: (!desired || sync == SyncCode::Synced).then(|| cm.clone()),
            predicted: None,
            sync,
            requires_pruning,
            hook: false,
            wave: 0,
            owned_by_other: None,
            error: None,
        }
    }

    fn automated_app(prune: bool, allow_empty: bool) -> Application {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "namespace": "capstan"},
            "spec": {
                "source": {"repoURL": "file:///repo", "path": "."},
                "destination": {"server": "https://kubernetes.default.svc", "namespace": "n"},
                "syncPolicy": {"automated": {"prune": prune, "allowEmpty": allow_empty},
                    "retry": {"limit": 3}},
            },
        }))
        .expect("application")
    }

    #[test]
    fn automated_syncs_act_only_when_they_can_change_something() {
        let comparison = |resources| capstan_compare::Comparison { resources };
        let kept = state("kept", SyncCode::Synced, true, false);
        let changed = state("changed", SyncCode::OutOfSync, true, false);
        let removed = state("removed", SyncCode::OutOfSync, false, true);
        // Only an object to prune, with prune off: a sync (or a retry of one) would change nothing,
        // so a failed sync's retry must not be waited for either (it would requeue forever).
        let only_prune = comparison(vec![kept.clone(), removed.clone()]);
        assert!(!automated_could_act(&automated_app(false, false), &only_prune));
        assert!(automated_could_act(&automated_app(true, false), &only_prune));
        assert!(automated_could_act(
            &automated_app(false, false),
            &comparison(vec![kept.clone(), changed])
        ));
        assert!(!automated_could_act(
            &automated_app(true, false),
            &comparison(vec![kept])
        ));
        // Git renders nothing: pruning everything needs allowEmpty.
        let empty = comparison(vec![removed]);
        assert!(!automated_could_act(&automated_app(true, false), &empty));
        assert!(automated_could_act(&automated_app(true, true), &empty));
        let mut manual = automated_app(true, true);
        manual.spec.sync_policy = None;
        assert!(!automated_could_act(&manual, &empty));
    }

    fn finished(phase: OperationPhase, revision: &str, terminated_by: Option<&str>) -> ApplicationStatus {
        ApplicationStatus {
            operation_state: Some(OperationState {
                phase,
                revision: revision.into(),
                finished_at: Some(clock::now_precise()),
                terminated_by: terminated_by.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn automated_syncs_follow_the_last_operation() {
        let app = automated_app(true, false);
        let out_of_sync = capstan_compare::Comparison {
            resources: vec![state("changed", SyncCode::OutOfSync, true, false)],
        };
        let decide = |status: &ApplicationStatus| automated(&app, status, "abc", &out_of_sync);
        let op = decide(&ApplicationStatus::default()).expect("a first sync");
        assert_eq!(
            (op.initiated_by.as_str(), op.sync.map(|s| s.prune)),
            ("automated", Some(true))
        );
        assert!(
            decide(&finished(OperationPhase::Succeeded, "old", None)).is_some(),
            "a new revision"
        );
        assert!(
            decide(&finished(OperationPhase::Running, "abc", None)).is_none(),
            "one runs"
        );
        assert!(
            decide(&finished(OperationPhase::Succeeded, "abc", None)).is_none(),
            "no selfHeal"
        );
        let mut healing = automated_app(true, false);
        if let Some(auto) = healing.spec.sync_policy.as_mut().and_then(|p| p.automated.as_mut()) {
            auto.self_heal = true;
        }
        let healed = finished(OperationPhase::Succeeded, "abc", None);
        assert!(automated(&healing, &healed, "abc", &out_of_sync).is_some(), "selfHeal");
        // A failure is retried after its backoff (5 s by default), not at once.
        let failed = finished(OperationPhase::Failed, "abc", None);
        assert!(decide(&failed).is_none());
        assert!(retry_due_in(&app, &failed).is_some_and(|d| d > Duration::ZERO));
        let long_ago = ApplicationStatus {
            operation_state: failed.operation_state.clone().map(|o| OperationState {
                finished_at: Some("2000-01-01T00:00:00.000Z".into()),
                ..o
            }),
            ..Default::default()
        };
        assert!(decide(&long_ago).is_some());
        assert_eq!(retry_due_in(&app, &long_ago), Some(Duration::ZERO));
        // One a person stopped is not retried at the same revision, however long ago.
        let stopped = ApplicationStatus {
            operation_state: long_ago.operation_state.clone().map(|o| OperationState {
                terminated_by: Some("admin".into()),
                message: "terminated by admin".into(),
                ..o
            }),
            ..Default::default()
        };
        assert!(decide(&stopped).is_none());
        assert_eq!(retry_due_in(&app, &stopped), None);
        // The retry limit (3) reached.
        let exhausted = ApplicationStatus {
            operation_state: long_ago
                .operation_state
                .clone()
                .map(|o| OperationState { retry_count: 3, ..o }),
            ..Default::default()
        };
        assert_eq!(retry_due_in(&app, &exhausted), None);
    }

    #[test]
    fn parses_go_style_durations() {
        assert_eq!(parse_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration(""), None);
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(
            parse_duration(&format!("{}s", "9".repeat(400))),
            None,
            "overflow is not a panic"
        );
    }
}
