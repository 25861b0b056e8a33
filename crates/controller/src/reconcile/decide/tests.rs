//! The decision of one reconcile, on plain values: no control plane.

use std::time::Duration;

use capstan_api::Application;
use capstan_api::application::ApplicationStatus;
use capstan_api::labels::REFRESH_ANNOTATION;
use capstan_api::operation::{OPERATION_ANNOTATION, OperationPhase};
use capstan_api::status::ConditionType;
use capstan_compare::{Comparison, ResourceState, SyncCode};
use capstan_kube::{KindInfo, ObjectKey};
use capstan_project::windows::{DateTime, Utc, Verdict};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::json;

use super::*;
use crate::dependencies::Waiting;
use crate::reconcile::requests::Requests;

fn app(automated: bool, annotations: serde_json::Value) -> Application {
    let mut spec =
        json!({"destination": {"namespace": "d"}, "source": {"repoURL": "https://git.example/r.git", "path": "."}});
    if automated {
        spec["syncPolicy"] = json!({"automated": {"prune": true}});
    }
    serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "a", "namespace": "capstan", "annotations": annotations},
        "spec": spec,
    }))
    .expect("a valid Application")
}

fn comparison(sync: SyncCode) -> Comparison {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d"}});
    Comparison {
        resources: vec![ResourceState {
            key: ObjectKey::of(&cm).expect("key"),
            api_version: "v1".into(),
            info: KindInfo {
                resource: ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("", "v1", "ConfigMap"),
                    "configmaps",
                ),
                namespaced: true,
                status_subresource: None,
            },
            desired: Some(cm.clone()),
            live: (sync == SyncCode::Synced).then(|| cm.clone()),
            predicted: None,
            sync,
            requires_pruning: false,
            hook: false,
            wave: 0,
            owned_by_other: None,
            error: None,
        }],
    }
}

fn ready() -> Gates {
    Gates {
        dependencies: Gate::Ready,
        windows: None,
    }
}

fn waiting() -> Gates {
    Gates {
        dependencies: Gate::Waiting(vec![Waiting {
            name: "db".into(),
            state: "Progressing".into(),
        }]),
        windows: None,
    }
}

fn closed_window(next_change: Option<DateTime<Utc>>) -> Gates {
    Gates {
        dependencies: Gate::Ready,
        windows: Some(Windows {
            project: "default".into(),
            automated: Verdict::Denied(vec![0]),
            manual: Verdict::Allowed,
            next_allowed: None,
            next_change,
            errors: Vec::new(),
        }),
    }
}

fn sync_request() -> serde_json::Value {
    json!({OPERATION_ANNOTATION: json!({"sync": {}, "initiatedBy": "ann", "id": "1"}).to_string()})
}

fn decide_on(app: &Application, comparison: &Comparison, gates: &Gates) -> Decision {
    let status = app.status.clone().unwrap_or_default();
    let compared = Compared {
        revision: "abc",
        comparison,
        gates,
    };
    decide(app, &status, Requests::read(app), Some(compared))
}

fn has(status: &ApplicationStatus, type_: ConditionType) -> bool {
    status.conditions.iter().any(|c| c.type_ == type_)
}

#[test]
fn a_failed_comparison_is_reported_and_a_request_recorded_as_failed_to_start() {
    let app = app(true, sync_request());
    let d = decide(&app, &ApplicationStatus::default(), Requests::read(&app), None);
    assert!(matches!(d.act, Act::ReportFailure { failed_request: Some(ref op) } if op.id == "1"));
    let plain = self::app(true, json!({REFRESH_ANNOTATION: "normal"}));
    let d = decide(&plain, &ApplicationStatus::default(), Requests::read(&plain), None);
    assert!(matches!(d.act, Act::ReportFailure { failed_request: None }));
    assert!(d.stamp, "a refresh is visible even when the comparison fails");
}

#[test]
fn an_automated_sync_of_drift_runs_on_a_fresh_comparison() {
    let app = app(true, json!({}));
    let d = decide_on(&app, &comparison(SyncCode::OutOfSync), &ready());
    match d.act {
        Act::Operate {
            op,
            fresh,
            from_request,
        } => {
            assert_eq!(op.initiated_by, "automated");
            assert!(fresh && !from_request);
        }
        other => panic!("expected an operation, got {other:?}"),
    }
    assert!(!d.stamp);
}

#[test]
fn nothing_runs_without_automation_or_when_synced() {
    let manual = app(false, json!({}));
    assert!(matches!(
        decide_on(&manual, &comparison(SyncCode::OutOfSync), &ready()).act,
        Act::Record
    ));
    let synced = app(true, json!({}));
    assert!(matches!(
        decide_on(&synced, &comparison(SyncCode::Synced), &ready()).act,
        Act::Record
    ));
}

#[test]
fn a_requested_sync_with_nothing_to_do_acts_on_the_cached_comparison() {
    let app = app(false, sync_request());
    match decide_on(&app, &comparison(SyncCode::Synced), &ready()).act {
        Act::Operate {
            fresh, from_request, ..
        } => assert!(!fresh && from_request),
        other => panic!("expected an operation, got {other:?}"),
    }
}

#[test]
fn dependencies_not_ready_hold_an_automated_sync_and_refuse_a_requested_one() {
    let auto = app(true, json!({}));
    let d = decide_on(&auto, &comparison(SyncCode::OutOfSync), &waiting());
    assert!(matches!(d.act, Act::Record));
    assert!(d.held.dependencies && !d.held.request);
    let mut status = ApplicationStatus::default();
    d.record(&mut status, Some(&waiting()));
    assert!(has(&status, dependencies::WAITING_CONDITION));
    assert!(status.operation_state.is_none());

    let requested = app(false, sync_request());
    let d = decide_on(&requested, &comparison(SyncCode::OutOfSync), &waiting());
    assert!(matches!(d.act, Act::Record));
    assert!(d.held.request);
    let mut status = ApplicationStatus::default();
    d.record(&mut status, Some(&waiting()));
    let state = status.operation_state.clone().expect("the refused request is recorded");
    assert_eq!(state.phase, OperationPhase::Failed);
    assert!(state.message.contains("db"), "{}", state.message);
    assert!(has(&status, dependencies::WAITING_CONDITION));
}

#[test]
fn a_closed_window_holds_an_automated_sync_not_a_manual_one() {
    let auto = app(true, json!({}));
    let gates = closed_window(None);
    let d = decide_on(&auto, &comparison(SyncCode::OutOfSync), &gates);
    assert!(matches!(d.act, Act::Record) && d.held.window);
    let mut status = ApplicationStatus::default();
    d.record(&mut status, Some(&gates));
    assert!(has(&status, gates::WINDOW_CONDITION));

    let requested = app(true, sync_request());
    let d = decide_on(&requested, &comparison(SyncCode::OutOfSync), &gates);
    assert!(matches!(d.act, Act::Operate { from_request: true, .. }));
    let mut status = ApplicationStatus::default();
    d.record(&mut status, Some(&gates));
    assert!(!has(&status, gates::WINDOW_CONDITION), "only a held sync is reported");
}

#[test]
fn a_running_operation_goes_on_whatever_the_gates_say() {
    let mut app = app(true, json!({}));
    app.status = Some(
        serde_json::from_value(json!({"operationState": {
            "phase": "Running", "startedAt": "2026-01-01T00:00:00Z",
            "operation": {"sync": {}, "initiatedBy": "ann"}
        }}))
        .expect("a status"),
    );
    match decide_on(&app, &comparison(SyncCode::OutOfSync), &waiting()).act {
        Act::Operate {
            op,
            fresh,
            from_request,
        } => {
            assert_eq!(op.initiated_by, "ann");
            assert!(!fresh, "a resumed operation compared fresh already");
            assert!(!from_request);
        }
        other => panic!("expected the running operation, got {other:?}"),
    }
}

#[test]
fn a_request_that_does_not_parse_is_reported_and_nothing_runs() {
    let app = app(true, json!({OPERATION_ANNOTATION: "{oops"}));
    let d = decide_on(&app, &comparison(SyncCode::OutOfSync), &ready());
    assert!(matches!(d.act, Act::Record));
    let mut status = ApplicationStatus::default();
    d.record(&mut status, Some(&ready()));
    assert!(has(&status, ConditionType::InvalidSpecError));
}

#[test]
fn the_next_look_comes_when_a_window_changes_if_sooner_than_the_poll() {
    let app = app(false, json!({}));
    let at = |secs: i64| DateTime::<Utc>::from_timestamp(1_767_225_600 + secs, 0).expect("an instant");
    let now = at(0);
    let poll = Duration::from_secs(180);
    let synced = comparison(SyncCode::Synced);
    let status = ApplicationStatus::default();
    assert_eq!(next_look(&app, &status, &synced, None, poll, now), poll);
    let soon = closed_window(Some(at(60)));
    assert_eq!(
        next_look(&app, &status, &synced, soon.windows.as_ref(), poll, now),
        Duration::from_secs(61)
    );
    let late = closed_window(Some(at(600)));
    assert_eq!(
        next_look(&app, &status, &synced, late.windows.as_ref(), poll, now),
        poll
    );
}
