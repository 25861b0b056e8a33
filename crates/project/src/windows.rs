//! Sync windows (`AppProject.spec.syncWindows`): whether a window is active at an instant, whether
//! an Application may sync now, and when that changes. Pure functions of the windows, the
//! Application's name and destination, and an instant.
//!
//! The rules are Argo CD's (`SyncWindows.Matches`, `CanSync`, `hasDeny`, `InactiveAllows`):
//!
//! - A window applies to an Application when one of its lists (`applications` on the name,
//!   `namespaces` on the destination namespace, `clusters` on the destination server or name) has a
//!   glob matching it; with `andOperator`, every list that is set must match. A window with no list
//!   applies to nothing.
//! - A window is active from each start of its `schedule` (five cron fields, read in `timeZone`,
//!   UTC by default) for `duration`.
//! - An active deny window blocks every sync (deny wins over allow); a manual sync still runs when
//!   every active deny window has `manualSync`.
//! - Otherwise an active allow window allows syncs. When allow windows apply but none is active, no
//!   sync runs, except a manual one when one of those allow windows has `manualSync`.
//! - No window applies: syncs run.
//!
//! Beyond Argo CD, time zones are honoured at every instant (a daylight-saving change moves a
//! window's wall-clock start, never its length), and a window that does not parse (schedule,
//! duration or time zone) blocks the Applications it applies to, with a message naming its index:
//! a mistyped freeze must not let syncs through.
//!
//! Cron schedules are parsed and stepped by `croner` (which handles the wall-clock times a
//! daylight-saving change skips or repeats), time zones come from `chrono-tz`.

use std::time::Duration;

use capstan_api::sync_window::{SyncWindow, SyncWindowKind};
use chrono::TimeZone;
pub use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// What a sync window is matched against: the Application and its destination.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The Application's name.
    pub name: &'a str,
    /// The destination namespace.
    pub namespace: &'a str,
    /// The destination server URL (may be empty when only a name is given).
    pub server: &'a str,
    /// The destination cluster name (may be empty).
    pub cluster: &'a str,
}

/// The field of a window that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowField {
    /// `schedule`.
    Schedule,
    /// `duration`.
    Duration,
    /// `timeZone`.
    TimeZone,
}

impl WindowField {
    /// The field's name as written in the AppProject.
    pub fn as_str(self) -> &'static str {
        match self {
            WindowField::Schedule => "schedule",
            WindowField::Duration => "duration",
            WindowField::TimeZone => "timeZone",
        }
    }
}

/// A window that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("syncWindows[{index}]: {} {value:?} {reason}", field.as_str())]
pub struct WindowError {
    /// The window's index in `syncWindows`.
    pub index: usize,
    /// The field that does not parse.
    pub field: WindowField,
    /// Its value.
    pub value: String,
    /// Why it does not parse.
    pub reason: String,
}

/// A window, parsed.
#[derive(Debug, Clone)]
pub struct Parsed {
    cron: Cron,
    length: chrono::Duration,
    zone: Tz,
}

/// Parse a window's schedule (five cron fields, as Argo CD's parser takes them: no seconds, no
/// years, no `@` descriptors), duration (Go's form: `1h`, `30m`, `1h30m`) and time zone (IANA name;
/// UTC when empty).
pub fn parse(index: usize, window: &SyncWindow) -> Result<Parsed, WindowError> {
    let error = |field, value: &str, reason: String| WindowError {
        index,
        field,
        value: value.to_string(),
        reason,
    };
    let schedule = window.schedule.trim();
    let fields = schedule.split_whitespace().count();
    if fields != 5 || schedule.contains('@') {
        return Err(error(
            WindowField::Schedule,
            &window.schedule,
            format!(
                "does not parse: a cron schedule has five fields (minute hour day-of-month month day-of-week), this has {fields}"
            ),
        ));
    }
    let cron = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(schedule)
        .map_err(|e| error(WindowField::Schedule, &window.schedule, format!("does not parse: {e}")))?;
    let length = parse_duration(&window.duration)
        .and_then(|d| chrono::Duration::from_std(d).ok())
        .ok_or_else(|| {
            error(
                WindowField::Duration,
                &window.duration,
                "does not parse: use a duration such as 30m, 1h or 1h30m".into(),
            )
        })?;
    let zone = if window.time_zone.trim().is_empty() {
        Tz::UTC
    } else {
        window.time_zone.trim().parse::<Tz>().map_err(|_| {
            error(
                WindowField::TimeZone,
                &window.time_zone,
                "is not a time zone: use an IANA name such as Europe/Berlin or UTC".into(),
            )
        })?
    };
    Ok(Parsed { cron, length, zone })
}

/// A window duration as Go's `time.ParseDuration` reads it (what Argo CD uses): a positive number
/// with a unit, possibly several (`1h30m`). `humantime` parses the same units.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() || text.starts_with('-') || text.contains(char::is_whitespace) {
        return None;
    }
    humantime::parse_duration(text).ok()
}

impl Parsed {
    /// The start of the window's latest period beginning at or before `at`, if any.
    fn last_start(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut from = at.with_timezone(&self.zone);
        let mut inclusive = true;
        for _ in 0..CHECKS {
            let found = self.cron.find_previous_occurrence(&from, inclusive).ok()?;
            if self.matches(found.naive_local()) {
                return Some(found.with_timezone(&Utc));
            }
            // croner answers the last second before a daylight-saving gap for a time the gap
            // skipped: the window starts when the gap ends.
            let after = found + chrono::Duration::seconds(1);
            if self.skipped(found.naive_local() + chrono::Duration::seconds(1), after.naive_local())
                && after.with_timezone(&Utc) <= at
            {
                return Some(after.with_timezone(&Utc));
            }
            (from, inclusive) = (found, false);
        }
        None
    }

    /// The first start strictly after `at`, if any.
    fn next_start(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut from = at.with_timezone(&self.zone);
        for _ in 0..CHECKS {
            let found = self.cron.find_next_occurrence(&from, false).ok()?;
            // A time the schedule matches, or the end of a daylight-saving gap that skipped one.
            // (croner 3.0 also answers the end of a gap for schedules that match no time in it,
            // e.g. `0 1 * * *` on the day Berlin skips 02:00–03:00.)
            let before = (found - chrono::Duration::seconds(1)).naive_local() + chrono::Duration::seconds(1);
            if self.matches(found.naive_local()) || self.skipped(before, found.naive_local()) {
                return Some(found.with_timezone(&Utc));
            }
            from = found;
        }
        None
    }

    /// Whether the schedule matches the wall-clock time `naive`.
    fn matches(&self, naive: chrono::NaiveDateTime) -> bool {
        self.cron
            .is_time_matching(&Utc.from_utc_datetime(&naive))
            .unwrap_or(false)
    }

    /// Whether the schedule matches a wall-clock minute in `[from, to)` (a daylight-saving gap;
    /// empty when there is none).
    fn skipped(&self, from: chrono::NaiveDateTime, to: chrono::NaiveDateTime) -> bool {
        let mut t = from;
        while t < to {
            if self.matches(t) {
                return true;
            }
            t += chrono::Duration::minutes(1);
        }
        false
    }

    /// Whether the window is active at `at`: a start `s` with `s <= at < s + duration`.
    pub fn active_at(&self, at: DateTime<Utc>) -> bool {
        self.last_start(at).is_some_and(|s| at < s + self.length)
    }

    /// The first instant after `at` at which the window turns active or inactive; `None` when it
    /// never changes again (never starts again, or its periods overlap without end).
    pub fn next_change(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if !self.active_at(at) {
            return self.next_start(at);
        }
        let mut end = self.last_start(at)? + self.length;
        let mut from = at;
        // Periods that start before the current one ends extend it.
        for _ in 0..MAX_STEPS {
            match self.next_start(from) {
                Some(next) if next < end => {
                    end = end.max(next + self.length);
                    from = next;
                }
                _ => return Some(end),
            }
        }
        None
    }
}

/// How many answers of croner are checked before giving up on finding a start.
const CHECKS: usize = 8;

/// How many cron starts are stepped through looking for a change (a window that starts every
/// minute and lasts an hour never closes).
const MAX_STEPS: usize = 2000;

/// Whether `window` applies to `target` (Argo CD's `SyncWindows.Matches`).
pub fn applies(window: &SyncWindow, target: &Target) -> bool {
    let any = |globs: &[String], texts: &[&str]| {
        globs
            .iter()
            .any(|g| texts.iter().any(|t| !t.is_empty() && glob_match(g, t)))
    };
    let lists = [
        (&window.applications, vec![target.name]),
        (&window.namespaces, vec![target.namespace]),
        (&window.clusters, vec![target.server, target.cluster]),
    ];
    let set: Vec<_> = lists.iter().filter(|(globs, _)| !globs.is_empty()).collect();
    if set.is_empty() {
        return false;
    }
    if window.and_operator {
        set.iter().all(|(globs, texts)| any(globs, texts))
    } else {
        set.iter().any(|(globs, texts)| any(globs, texts))
    }
}

/// A glob as Argo CD's `glob.Match` reads it: `*` matches any run of characters, `/` included. A
/// pattern that is not a glob matches only itself.
fn glob_match(pattern: &str, text: &str) -> bool {
    match globset::GlobBuilder::new(pattern).literal_separator(false).build() {
        Ok(glob) => glob.compile_matcher().is_match(text),
        Err(_) => pattern == text,
    }
}

/// One window as it stands at an instant (for `capstan project windows` and status).
#[derive(Debug, Clone)]
pub struct WindowState {
    /// Its index in `syncWindows`.
    pub index: usize,
    /// The window as written.
    pub window: SyncWindow,
    /// Parsed, or why not.
    pub parsed: Result<Parsed, WindowError>,
    /// Whether it is active (false when it does not parse).
    pub active: bool,
    /// When it turns active or inactive next.
    pub next_change: Option<DateTime<Utc>>,
}

/// Every window of a project at `at`.
pub fn states(windows: &[SyncWindow], at: DateTime<Utc>) -> Vec<WindowState> {
    windows
        .iter()
        .enumerate()
        .map(|(index, window)| {
            let parsed = parse(index, window);
            let (active, next_change) = match &parsed {
                Ok(p) => (p.active_at(at), p.next_change(at)),
                Err(_) => (false, None),
            };
            WindowState {
                index,
                window: window.clone(),
                parsed,
                active,
                next_change,
            }
        })
        .collect()
}

/// Whether a sync may run, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It may run.
    Allowed,
    /// Blocked by the active deny windows with these indices.
    Denied(Vec<usize>),
    /// Allow windows (these indices) apply, none is active.
    OutsideAllow(Vec<usize>),
    /// These windows do not parse (they apply to the Application; syncs are blocked).
    Invalid(Vec<WindowError>),
}

impl Verdict {
    /// Whether the sync may run.
    pub fn allowed(&self) -> bool {
        *self == Verdict::Allowed
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[usize]| {
            v.iter()
                .map(|i| format!("syncWindows[{i}]"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Verdict::Allowed => write!(f, "syncs allowed"),
            Verdict::Denied(v) => write!(f, "deny window {} active", list(v)),
            Verdict::OutsideAllow(v) => write!(f, "outside allow window {}", list(v)),
            Verdict::Invalid(errors) => {
                let each: Vec<String> = errors.iter().map(ToString::to_string).collect();
                write!(f, "sync window does not parse: {}", each.join("; "))
            }
        }
    }
}

/// Whether a sync (`manual` or automated) of `target` may run at `at` under `windows` (Argo CD's
/// `CanSync`; see the module documentation).
pub fn verdict(windows: &[SyncWindow], target: &Target, manual: bool, at: DateTime<Utc>) -> Verdict {
    let applying: Vec<(usize, &SyncWindow)> = windows.iter().enumerate().filter(|(_, w)| applies(w, target)).collect();
    if applying.is_empty() {
        return Verdict::Allowed;
    }
    let mut parsed = Vec::new();
    let mut errors = Vec::new();
    for (i, w) in &applying {
        match parse(*i, w) {
            Ok(p) => parsed.push((*i, *w, p)),
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Verdict::Invalid(errors);
    }
    let active: Vec<&(usize, &SyncWindow, Parsed)> = parsed.iter().filter(|(_, _, p)| p.active_at(at)).collect();
    let denying: Vec<&&(usize, &SyncWindow, Parsed)> = active
        .iter()
        .filter(|(_, w, _)| w.kind == SyncWindowKind::Deny)
        .collect();
    if !denying.is_empty() {
        // A manual sync runs only when every active deny window lets it.
        if manual && denying.iter().all(|(_, w, _)| w.manual_sync) {
            return Verdict::Allowed;
        }
        return Verdict::Denied(denying.iter().map(|(i, _, _)| *i).collect());
    }
    if active.iter().any(|(_, w, _)| w.kind == SyncWindowKind::Allow) {
        return Verdict::Allowed;
    }
    let inactive_allows: Vec<&(usize, &SyncWindow, Parsed)> = parsed
        .iter()
        .filter(|(_, w, _)| w.kind == SyncWindowKind::Allow)
        .collect();
    if inactive_allows.is_empty() {
        return Verdict::Allowed;
    }
    // A manual sync runs when any of the inactive allow windows lets it.
    if manual && inactive_allows.iter().any(|(_, w, _)| w.manual_sync) {
        return Verdict::Allowed;
    }
    Verdict::OutsideAllow(inactive_allows.iter().map(|(i, _, _)| *i).collect())
}

/// The first instant after `at` at which any window applying to `target` turns active or inactive
/// (when the verdict may change); `None` when none ever does.
pub fn next_change(windows: &[SyncWindow], target: &Target, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    windows
        .iter()
        .enumerate()
        .filter(|(_, w)| applies(w, target))
        .filter_map(|(i, w)| parse(i, w).ok())
        .filter_map(|p| p.next_change(at))
        .min()
}

/// The first instant at or after `at` at which a sync (`manual` or automated) of `target` may run;
/// `None` when none within a year (or the windows do not parse).
pub fn next_allowed(windows: &[SyncWindow], target: &Target, manual: bool, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let horizon = at + chrono::Duration::days(366);
    let mut t = at;
    for _ in 0..MAX_STEPS {
        match verdict(windows, target, manual, t) {
            Verdict::Allowed => return Some(t),
            Verdict::Invalid(_) => return None,
            _ => {}
        }
        t = next_change(windows, target, t)?;
        if t > horizon {
            return None;
        }
    }
    None
}

/// An instant in RFC 3339, UTC, to the second.
pub fn format_instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A Unix time (seconds, nanoseconds) as an instant; `None` out of range.
pub fn instant(seconds: i64, nanos: u32) -> Option<DateTime<Utc>> {
    Utc.timestamp_opt(seconds, nanos).single()
}

#[cfg(test)]
mod tests;
