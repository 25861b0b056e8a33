use super::*;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).expect("instant").with_timezone(&Utc)
}

fn window(kind: SyncWindowKind, schedule: &str, duration: &str, zone: &str) -> SyncWindow {
    SyncWindow {
        kind,
        schedule: schedule.into(),
        duration: duration.into(),
        applications: vec!["*".into()],
        time_zone: zone.into(),
        ..Default::default()
    }
}

const APP: Target = Target {
    name: "web-prod",
    namespace: "web",
    server: "https://kubernetes.default.svc",
    cluster: "in-cluster",
};

#[test]
fn a_window_is_active_from_each_start_for_its_duration() {
    let p = parse(0, &window(SyncWindowKind::Deny, "0 22 * * *", "1h", "")).expect("parses");
    assert!(!p.active_at(at("2026-06-01T21:59:59Z")));
    assert!(p.active_at(at("2026-06-01T22:00:00Z")), "the start is inside");
    assert!(p.active_at(at("2026-06-01T22:59:59Z")));
    assert!(!p.active_at(at("2026-06-01T23:00:00Z")), "the end is outside");
    assert_eq!(
        p.next_change(at("2026-06-01T12:00:00Z")),
        Some(at("2026-06-01T22:00:00Z"))
    );
    assert_eq!(
        p.next_change(at("2026-06-01T22:10:00Z")),
        Some(at("2026-06-01T23:00:00Z"))
    );
    // Periods that overlap make one long period; ones that never stop never change.
    let long = parse(0, &window(SyncWindowKind::Deny, "0 * * * *", "90m", "")).expect("parses");
    assert!(long.active_at(at("2026-06-01T10:59:00Z")));
    assert_eq!(long.next_change(at("2026-06-01T10:59:00Z")), None, "always active");
    let every = parse(0, &window(SyncWindowKind::Deny, "*/30 * * * *", "10m", "")).expect("parses");
    assert_eq!(
        every.next_change(at("2026-06-01T10:05:00Z")),
        Some(at("2026-06-01T10:10:00Z"))
    );
}

#[test]
fn time_zones_move_the_start_across_daylight_saving() {
    // 09:00 in New York is 14:00 UTC in winter (EST) and 13:00 UTC in summer (EDT).
    let p = parse(0, &window(SyncWindowKind::Allow, "0 9 * * *", "1h", "America/New_York")).expect("parses");
    assert!(p.active_at(at("2026-01-15T14:30:00Z")));
    assert!(!p.active_at(at("2026-01-15T13:30:00Z")));
    assert!(p.active_at(at("2026-07-15T13:30:00Z")));
    assert!(!p.active_at(at("2026-07-15T14:30:00Z")));
    // The week of the change (8 March 2026): the Saturday in EST, the Monday in EDT.
    assert!(p.active_at(at("2026-03-07T14:00:00Z")));
    assert!(p.active_at(at("2026-03-09T13:00:00Z")));
    assert_eq!(
        p.next_change(at("2026-03-08T00:00:00Z")),
        Some(at("2026-03-08T13:00:00Z"))
    );
}

#[test]
fn a_window_keeps_its_length_over_a_daylight_saving_change() {
    // Berlin springs forward on 29 March 2026 at 02:00 (CET, UTC+1) to 03:00 (CEST, UTC+2). A
    // window from 01:00 local for 2h ends 2 real hours later, at 04:00 local (02:00 UTC).
    let p = parse(0, &window(SyncWindowKind::Deny, "0 1 * * *", "2h", "Europe/Berlin")).expect("parses");
    assert!(p.active_at(at("2026-03-29T00:00:00Z")));
    assert!(p.active_at(at("2026-03-29T01:59:59Z")));
    assert!(!p.active_at(at("2026-03-29T02:00:00Z")));
    assert_eq!(
        p.next_change(at("2026-03-29T00:30:00Z")),
        Some(at("2026-03-29T02:00:00Z"))
    );
}

#[test]
fn a_start_in_the_skipped_hour_runs_after_it_and_a_repeated_hour_starts_once() {
    // 02:30 does not exist in Berlin on 29 March 2026: the window starts when the clock jumps (03:00
    // CEST, 01:00 UTC).
    let p = parse(0, &window(SyncWindowKind::Deny, "30 2 * * *", "30m", "Europe/Berlin")).expect("parses");
    assert!(!p.active_at(at("2026-03-29T00:59:00Z")));
    assert!(p.active_at(at("2026-03-29T01:00:00Z")));
    assert!(p.active_at(at("2026-03-29T01:29:00Z")));
    assert!(!p.active_at(at("2026-03-29T01:30:00Z")));
    // 02:30 happens twice on 25 October 2026 (CEST, then CET): the window opens at the first only.
    assert!(p.active_at(at("2026-10-25T00:30:00Z")), "02:30 CEST");
    assert!(!p.active_at(at("2026-10-25T01:00:00Z")));
    assert!(!p.active_at(at("2026-10-25T01:30:00Z")), "02:30 CET, the second time");
    // The usual day after: 02:30 CET is 01:30 UTC.
    assert!(p.active_at(at("2026-10-26T01:30:00Z")));
}

#[test]
fn deny_wins_and_allow_windows_that_are_not_active_block() {
    let deny = window(SyncWindowKind::Deny, "0 22 * * *", "2h", "");
    let allow = window(SyncWindowKind::Allow, "0 20 * * *", "4h", "");
    let both = [allow.clone(), deny.clone()];
    assert_eq!(
        verdict(&both, &APP, false, at("2026-06-01T21:00:00Z")),
        Verdict::Allowed
    );
    assert_eq!(
        verdict(&both, &APP, false, at("2026-06-01T22:30:00Z")),
        Verdict::Denied(vec![1]),
        "deny wins over an active allow"
    );
    assert_eq!(
        verdict(&both, &APP, false, at("2026-06-01T12:00:00Z")),
        Verdict::OutsideAllow(vec![0]),
        "allow windows exist but none is active"
    );
    assert_eq!(
        verdict(std::slice::from_ref(&deny), &APP, false, at("2026-06-01T12:00:00Z")),
        Verdict::Allowed
    );
    assert!(verdict(&[], &APP, false, at("2026-06-01T12:00:00Z")).allowed());
    // The next instant a sync may run: when the deny window ends (00:00), the allow window having
    // ended with it, the next allow start (20:00 the next day).
    assert_eq!(
        next_allowed(&both, &APP, false, at("2026-06-01T22:30:00Z")),
        Some(at("2026-06-02T20:00:00Z"))
    );
    assert_eq!(
        next_allowed(&[deny], &APP, false, at("2026-06-01T22:30:00Z")),
        Some(at("2026-06-02T00:00:00Z"))
    );
}

#[test]
fn manual_syncs_follow_manual_sync() {
    let mut deny = window(SyncWindowKind::Deny, "* * * * *", "1h", "");
    let now = at("2026-06-01T12:00:00Z");
    assert_eq!(verdict(&[deny.clone()], &APP, true, now), Verdict::Denied(vec![0]));
    deny.manual_sync = true;
    assert_eq!(verdict(&[deny.clone()], &APP, true, now), Verdict::Allowed);
    assert_eq!(
        verdict(&[deny.clone()], &APP, false, now),
        Verdict::Denied(vec![0]),
        "automated still waits"
    );
    // Every active deny window must allow it.
    let strict = window(SyncWindowKind::Deny, "0 * * * *", "1h", "");
    assert_eq!(verdict(&[deny, strict], &APP, true, now), Verdict::Denied(vec![0, 1]));
    // Outside allow windows: any of them allowing manual syncs is enough.
    let mut allow = window(SyncWindowKind::Allow, "0 3 * * *", "1h", "");
    assert_eq!(
        verdict(&[allow.clone()], &APP, true, now),
        Verdict::OutsideAllow(vec![0])
    );
    let closed = allow.clone();
    allow.manual_sync = true;
    assert_eq!(verdict(&[closed, allow], &APP, true, now), Verdict::Allowed);
}

#[test]
fn windows_apply_by_application_namespace_or_cluster() {
    let mut w = window(SyncWindowKind::Deny, "* * * * *", "1h", "");
    w.applications = vec!["*-prod".into()];
    assert!(applies(&w, &APP));
    w.applications = vec!["other".into()];
    assert!(!applies(&w, &APP));
    w.namespaces = vec!["we*".into()];
    assert!(applies(&w, &APP), "any list matching is enough");
    w.and_operator = true;
    assert!(!applies(&w, &APP), "with andOperator every list set must match");
    w.applications = vec!["web-*".into()];
    w.clusters = vec!["in-cluster".into()];
    assert!(applies(&w, &APP));
    w.clusters = vec!["https://kubernetes.default.*".into()];
    assert!(applies(&w, &APP), "a cluster by server URL");
    let none = SyncWindow {
        applications: vec![],
        ..window(SyncWindowKind::Deny, "* * * * *", "1h", "")
    };
    assert!(!applies(&none, &APP), "a window with no list applies to nothing");
}

#[test]
fn bad_windows_are_named_and_block() {
    let bad_schedule = window(SyncWindowKind::Allow, "61 * * * *", "1h", "");
    let e = parse(2, &bad_schedule).expect_err("minute 61");
    assert_eq!((e.index, e.field), (2, WindowField::Schedule));
    assert!(
        e.to_string().starts_with("syncWindows[2]: schedule \"61 * * * *\""),
        "{e}"
    );
    for schedule in ["", "* * * *", "0 * * * * *", "@daily", "not a cron"] {
        assert!(
            parse(0, &window(SyncWindowKind::Allow, schedule, "1h", "")).is_err(),
            "{schedule:?}"
        );
    }
    for duration in ["", "1 hour", "-1h", "h", "1x", "60"] {
        let e = parse(0, &window(SyncWindowKind::Allow, "* * * * *", duration, "")).expect_err(duration);
        assert_eq!(e.field, WindowField::Duration, "{duration:?}");
    }
    assert!(parse(0, &window(SyncWindowKind::Allow, "* * * * *", "1h30m", "")).is_ok());
    let e = parse(0, &window(SyncWindowKind::Allow, "* * * * *", "1h", "Mars/Olympus")).expect_err("zone");
    assert_eq!(e.field, WindowField::TimeZone);
    assert!(e.to_string().contains("Mars/Olympus"), "{e}");
    let now = at("2026-06-01T12:00:00Z");
    let v = verdict(
        &[window(SyncWindowKind::Deny, "* * * * *", "1h", "Mars/Olympus")],
        &APP,
        true,
        now,
    );
    assert!(matches!(v, Verdict::Invalid(ref e) if e.len() == 1), "{v:?}");
    assert!(v.to_string().contains("syncWindows[0]: timeZone"), "{v}");
    assert_eq!(
        next_allowed(&[window(SyncWindowKind::Deny, "x", "1h", "")], &APP, false, now),
        None
    );
    // Impossible dates never start (30 February): never active, never a panic.
    let never = parse(0, &window(SyncWindowKind::Deny, "0 0 30 2 *", "1h", "")).expect("parses");
    assert!(!never.active_at(now));
    let s = states(&[window(SyncWindowKind::Deny, "0 0 30 2 *", "1h", "")], now);
    assert!(!s[0].active);
}

#[test]
fn the_next_allowed_instant_follows_the_zone_across_daylight_saving() {
    let allow = [window(SyncWindowKind::Allow, "0 9 * * *", "1h", "America/New_York")];
    // Saturday 7 March 2026, after the window (EST): the next is Sunday 09:00 EDT, 13:00 UTC.
    assert_eq!(
        next_allowed(&allow, &APP, false, at("2026-03-07T15:00:00Z")),
        Some(at("2026-03-08T13:00:00Z"))
    );
    // Inside the window: now.
    assert_eq!(
        next_allowed(&allow, &APP, false, at("2026-03-07T14:10:00Z")),
        Some(at("2026-03-07T14:10:00Z"))
    );
    // The reconcile after a change is due when the window closes, then when it opens.
    assert_eq!(
        next_change(&allow, &APP, at("2026-03-07T14:10:00Z")),
        Some(at("2026-03-07T15:00:00Z"))
    );
    assert_eq!(
        next_change(&allow, &APP, at("2026-03-07T15:00:00Z")),
        Some(at("2026-03-08T13:00:00Z"))
    );
}
