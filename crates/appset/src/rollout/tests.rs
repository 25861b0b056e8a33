//! Unit tests of RollingSync planning over snapshots of generated Applications.

use super::*;

fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

fn step(key: &str, value: &str, max: Option<IntOrString>) -> RollingSyncStep {
    RollingSyncStep {
        match_expressions: vec![req(key, "In", &[value])],
        max_update: max,
    }
}

fn app(name: &str, stage: &str, sync: &str, health: &str) -> AppView {
    AppView {
        name: name.into(),
        labels: [("stage".to_string(), stage.to_string())].into(),
        source: "git://repo@main".into(),
        sync: (!sync.is_empty()).then(|| SyncCode::parse(sync).expect("a sync status")),
        revision: "bbbbbbbbbb".into(),
        health: (!health.is_empty()).then(|| HealthCode::parse(health).expect("a health status")),
        ..Default::default()
    }
}

fn two_steps() -> Vec<RollingSyncStep> {
    vec![step("stage", "one", None), step("stage", "two", None)]
}

fn t(text: &str) -> Timestamp {
    text.parse().expect("timestamp")
}

fn status_of<'a>(plan: &'a Plan, name: &str) -> &'a ApplicationSetApplicationStatus {
    plan.statuses.iter().find(|s| s.application == name).expect("status")
}

#[test]
fn requirements_match_like_label_selectors() {
    let labels: BTreeMap<String, String> = [("env".to_string(), "prod".to_string())].into();
    assert!(matches(&[req("env", "In", &["prod", "staging"])], &labels));
    assert!(!matches(&[req("env", "NotIn", &["prod"])], &labels));
    assert!(matches(&[req("tier", "NotIn", &["x"])], &labels));
    assert!(matches(&[req("env", "Exists", &[])], &labels));
    assert!(!matches(&[req("env", "DoesNotExist", &[])], &labels));
    assert!(matches(&[], &labels), "no requirement matches everything");
    assert!(!matches(&[req("env", "Bogus", &["prod"])], &labels));
}

#[test]
fn invalid_steps_are_named() {
    let bad = vec![
        step("stage", "one", None),
        RollingSyncStep {
            match_expressions: vec![req("stage", "Equals", &["two"])],
            max_update: None,
        },
    ];
    let err = validate(&bad).expect_err("unknown operator");
    assert_eq!((err.step, err.expression), (1, 0));
    assert!(err.to_string().contains("steps[1].matchExpressions[0]"), "{err}");
    assert!(err.to_string().contains("\"Equals\""), "{err}");
    let no_values = vec![RollingSyncStep {
        match_expressions: vec![req("stage", "In", &[])],
        max_update: None,
    }];
    assert!(validate(&no_values).is_err());
    let bad_max = vec![step("stage", "one", Some(IntOrString::String("ten".into())))];
    assert!(validate(&bad_max).is_err());
    assert!(validate(&two_steps()).is_ok());
}

#[test]
fn max_update_numbers_and_percentages() {
    assert_eq!(max_update(None, 10), None);
    assert_eq!(max_update(Some(&IntOrString::Int(0)), 10), None);
    assert_eq!(max_update(Some(&IntOrString::Int(2)), 10), Some(2));
    assert_eq!(max_update(Some(&IntOrString::String("50%".into())), 5), Some(2));
    assert_eq!(
        max_update(Some(&IntOrString::String("10%".into())), 3),
        Some(1),
        "at least one"
    );
    assert_eq!(
        max_update(Some(&IntOrString::String("0%".into())), 3),
        None,
        "0% means no limit, like 0"
    );
    assert_eq!(max_update(Some(&IntOrString::String(" 0 %".into())), 3), None);
}

#[test]
fn only_the_first_unhealthy_step_syncs() {
    let apps = vec![
        app("a1", "one", "OutOfSync", "Healthy"),
        app("a2", "one", "OutOfSync", "Healthy"),
        app("b1", "two", "OutOfSync", "Healthy"),
    ];
    let plan = plan(&two_steps(), &apps, &[], t("2024-01-01T00:00:00Z"));
    assert_eq!(plan.sync, ["a1", "a2"]);
    assert_eq!(status_of(&plan, "a1").status, RolloutStatus::Progressing);
    assert_eq!(status_of(&plan, "a1").step, "1");
    assert_eq!(status_of(&plan, "b1").status, RolloutStatus::Waiting);
    assert_eq!(status_of(&plan, "b1").step, "2");
    assert!(matches!(plan.summary, Summary::Progressing(ref m) if m.starts_with("step 1 of 2")));
}

#[test]
fn next_step_starts_when_the_previous_is_synced_and_healthy() {
    let steps = two_steps();
    let mut apps = vec![
        app("a1", "one", "OutOfSync", "Healthy"),
        app("b1", "two", "OutOfSync", "Healthy"),
    ];
    let p1 = plan(&steps, &apps, &[], t("2024-01-01T00:00:00Z"));
    assert_eq!(p1.sync, ["a1"]);

    // Request consumed, operation running: still in flight, nothing new.
    apps[0].operation = Some(OperationView {
        phase: OperationPhase::Running,
        started_at: "2024-01-01T00:00:01Z".into(),
        initiated_by: INITIATED_BY.into(),
        ..Default::default()
    });
    let p2 = plan(&steps, &apps, &p1.statuses, t("2024-01-01T00:00:02Z"));
    assert!(p2.sync.is_empty());
    assert_eq!(status_of(&p2, "a1").status, RolloutStatus::Progressing);
    assert_eq!(status_of(&p2, "a1").last_transition_time, "2024-01-01T00:00:00Z");

    // Synced but still Progressing health: step 2 still waits.
    apps[0].operation.as_mut().expect("op").phase = OperationPhase::Succeeded;
    apps[0].sync = Some(SyncCode::Synced);
    apps[0].health = Some(HealthCode::Progressing);
    let p3 = plan(&steps, &apps, &p2.statuses, t("2024-01-01T00:00:03Z"));
    assert!(p3.sync.is_empty());
    assert_eq!(status_of(&p3, "b1").status, RolloutStatus::Waiting);

    // Healthy: step 2 starts.
    apps[0].health = Some(HealthCode::Healthy);
    let p4 = plan(&steps, &apps, &p3.statuses, t("2024-01-01T00:00:04Z"));
    assert_eq!(status_of(&p4, "a1").status, RolloutStatus::Healthy);
    assert_eq!(p4.sync, ["b1"]);
}

#[test]
fn a_consumed_request_is_not_repeated_before_its_operation_starts() {
    let steps = two_steps();
    let mut apps = vec![app("a1", "one", "OutOfSync", "Healthy")];
    apps[0].request_pending = true;
    // An older rollout operation (before this request) must not be mistaken for this one.
    apps[0].operation = Some(OperationView {
        phase: OperationPhase::Succeeded,
        started_at: "2023-12-31T00:00:00Z".into(),
        initiated_by: INITIATED_BY.into(),
        ..Default::default()
    });
    let previous = vec![ApplicationSetApplicationStatus {
        application: "a1".into(),
        status: RolloutStatus::Progressing,
        message: format!("{REQUESTED} (step 1)"),
        step: "1".into(),
        target_revision: "bbbbbbbbbb".into(),
        last_transition_time: "2024-01-01T00:00:00Z".into(),
    }];
    let p = plan(&steps, &apps, &previous, t("2024-01-01T00:00:05Z"));
    assert!(p.sync.is_empty(), "pending request");
    apps[0].request_pending = false; // consumed, operation not yet recorded
    let p = plan(&steps, &apps, &previous, t("2024-01-01T00:00:06Z"));
    assert!(p.sync.is_empty(), "consumed request still in flight");
    assert_eq!(status_of(&p, "a1").status, RolloutStatus::Progressing);
    // Long after, with nothing started, the request counts as lost and is made again.
    let p = plan(&steps, &apps, &previous, t("2024-01-01T01:00:00Z"));
    assert_eq!(p.sync, ["a1"]);
}

#[test]
fn max_update_limits_syncs_counting_those_in_flight() {
    let steps = vec![step("stage", "one", Some(IntOrString::Int(2)))];
    let mut apps = vec![
        app("a1", "one", "OutOfSync", "Healthy"),
        app("a2", "one", "OutOfSync", "Healthy"),
        app("a3", "one", "OutOfSync", "Healthy"),
    ];
    apps[0].operation = Some(OperationView {
        phase: OperationPhase::Running,
        initiated_by: "cli".into(),
        ..Default::default()
    });
    let p = plan(&steps, &apps, &[], t("2024-01-01T00:00:00Z"));
    assert_eq!(p.sync, ["a2"], "one slot left of two");
    assert_eq!(status_of(&p, "a3").status, RolloutStatus::Pending);
    assert!(
        status_of(&p, "a3").message.contains("maxUpdate"),
        "{:?}",
        status_of(&p, "a3")
    );
}

#[test]
fn a_failed_sync_stops_the_rollout_and_says_where() {
    let steps = two_steps();
    let mut apps = vec![
        app("a1", "one", "OutOfSync", "Progressing"),
        app("a2", "one", "OutOfSync", "Healthy"),
        app("b1", "two", "OutOfSync", "Healthy"),
    ];
    let steps1 = vec![
        RollingSyncStep {
            max_update: Some(IntOrString::Int(1)),
            ..steps[0].clone()
        },
        steps[1].clone(),
    ];
    let p1 = plan(&steps1, &apps, &[], t("2024-01-01T00:00:00Z"));
    assert_eq!(p1.sync, ["a1"]);
    apps[0].operation = Some(OperationView {
        phase: OperationPhase::Failed,
        message: "wave 0 did not become healthy within 10s: Deployment stuck".into(),
        started_at: "2024-01-01T00:00:01Z".into(),
        initiated_by: INITIATED_BY.into(),
    });
    let p2 = plan(&steps1, &apps, &p1.statuses, t("2024-01-01T00:00:20Z"));
    assert!(p2.sync.is_empty(), "nothing more is synced: {:?}", p2.sync);
    assert_eq!(status_of(&p2, "a1").status, RolloutStatus::Failed);
    assert!(status_of(&p2, "a1").message.contains("did not become healthy"));
    let Summary::Stopped(msg) = &p2.summary else {
        panic!("stopped expected: {:?}", p2.summary)
    };
    assert!(
        msg.contains("step 1 of 2") && msg.contains("a1") && msg.contains("Deployment stuck"),
        "{msg}"
    );
    assert_eq!(status_of(&p2, "b1").status, RolloutStatus::Waiting);

    // Still failed on the next round (the operation state is the same).
    let p3 = plan(&steps1, &apps, &p2.statuses, t("2024-01-01T00:00:30Z"));
    assert!(matches!(p3.summary, Summary::Stopped(_)));
    // Even once the operation state is replaced by something unrelated, the failure sticks for
    // that commit ...
    apps[0].operation = None;
    let p4 = plan(&steps1, &apps, &p3.statuses, t("2024-01-01T00:00:40Z"));
    assert!(matches!(p4.summary, Summary::Stopped(_)), "{:?}", p4.summary);
    // ... and a new commit (a fix) gets a new chance.
    for a in &mut apps {
        a.revision = "cccccccccc".into();
    }
    let p5 = plan(&steps1, &apps, &p4.statuses, t("2024-01-01T00:00:50Z"));
    assert_eq!(p5.sync, ["a1"]);
}

#[test]
fn degraded_after_the_rollouts_sync_is_a_failure() {
    let steps = two_steps();
    let mut apps = vec![
        app("a1", "one", "OutOfSync", "Healthy"),
        app("b1", "two", "OutOfSync", "Healthy"),
    ];
    let p1 = plan(&steps, &apps, &[], t("2024-01-01T00:00:00Z"));
    apps[0].operation = Some(OperationView {
        phase: OperationPhase::Succeeded,
        started_at: "2024-01-01T00:00:00Z".into(),
        initiated_by: INITIATED_BY.into(),
        ..Default::default()
    });
    apps[0].sync = Some(SyncCode::Synced);
    apps[0].health = Some(HealthCode::Degraded);
    apps[0].health_message = "CrashLoopBackOff".into();
    let p2 = plan(&steps, &apps, &p1.statuses, t("2024-01-01T00:00:05Z"));
    assert_eq!(status_of(&p2, "a1").status, RolloutStatus::Failed);
    assert!(p2.summary.message().contains("CrashLoopBackOff"), "{:?}", p2.summary);
    assert!(p2.sync.is_empty());
}

#[test]
fn applications_of_no_step_are_never_synced() {
    let apps = vec![
        app("x", "three", "OutOfSync", "Healthy"),
        app("a1", "one", "Synced", "Healthy"),
    ];
    let p = plan(&two_steps(), &apps, &[], t("2024-01-01T00:00:00Z"));
    assert!(p.sync.is_empty());
    assert_eq!(status_of(&p, "x").status, RolloutStatus::Waiting);
    assert_eq!(status_of(&p, "x").step, "");
    assert!(matches!(p.summary, Summary::Complete(_)), "{:?}", p.summary);
}

#[test]
fn differing_commits_of_one_source_hold_the_rollout() {
    // Step 2 has seen the new commit, step 1 has not been compared yet: it looks Synced and
    // Healthy at the old commit, but step 2 must not run ahead.
    let mut apps = vec![
        app("a1", "one", "Synced", "Healthy"),
        app("b1", "two", "OutOfSync", "Healthy"),
    ];
    apps[0].revision = "aaaaaaaaaa".into();
    let p = plan(&two_steps(), &apps, &[], t("2024-01-01T00:00:00Z"));
    assert!(p.sync.is_empty(), "{:?}", p.sync);
    assert!(p.summary.message().contains("different commits"), "{:?}", p.summary);
    // Once step 1 has been compared too, it syncs first.
    apps[0].revision = "bbbbbbbbbb".into();
    apps[0].sync = Some(SyncCode::OutOfSync);
    let p = plan(&two_steps(), &apps, &[], t("2024-01-01T00:00:01Z"));
    assert_eq!(p.sync, ["a1"]);
}

#[test]
fn unchanged_statuses_keep_their_transition_time() {
    let apps = vec![app("a1", "one", "Synced", "Healthy")];
    let p1 = plan(&two_steps(), &apps, &[], t("2024-01-01T00:00:00Z"));
    let p2 = plan(&two_steps(), &apps, &p1.statuses, t("2024-01-01T00:10:00Z"));
    assert_eq!(p1.statuses, p2.statuses);
}
