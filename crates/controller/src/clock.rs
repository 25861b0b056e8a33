//! Time as the controller records it: timestamps in status (RFC 3339, UTC, `Z`), the time since one,
//! and the jitter that spreads periodic work out; and the [`Clock`] that decisions depending on the
//! time of day (sync windows) read, which tests can set.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

/// The clock sync windows are judged by: the system's, or one a test sets.
#[derive(Clone, Default)]
pub struct Clock {
    fixed: Option<Arc<dyn Fn() -> Timestamp + Send + Sync>>,
}

impl Clock {
    /// A clock that tells the time `now` answers (tests: a fixed or moving instant).
    pub fn from_fn(now: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        Self {
            fixed: Some(Arc::new(now)),
        }
    }

    /// The current instant.
    pub fn now(&self) -> Timestamp {
        match &self.fixed {
            Some(now) => now(),
            None => Timestamp::now(),
        }
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.fixed.is_some() {
            "Clock(set)"
        } else {
            "Clock(system)"
        })
    }
}

/// Now, to the second (as Kubernetes writes `metav1.Time`): condition transitions, history entries.
pub fn now() -> String {
    to_seconds(Timestamp::now())
}

/// Now, to the millisecond: `reconciledAt` must change between two reconciles in one second, since
/// clients wait for it to change after a refresh; operations that follow each other within a second
/// (a rollout's steps) keep their order.
pub fn now_precise() -> String {
    to_millis(Timestamp::now())
}

/// `t` to the second (truncated).
pub fn to_seconds(t: Timestamp) -> String {
    format!("{t:.0}")
}

/// `t` to the millisecond (truncated; always three digits).
pub fn to_millis(t: Timestamp) -> String {
    format!("{t:.3}")
}

/// A timestamp as recorded in status (any RFC 3339 spelling); `None` when it is not one.
pub fn parse(text: &str) -> Option<Timestamp> {
    text.parse().ok()
}

/// How long ago the recorded timestamp `text` was (zero for one in the future); `None` when it is not
/// a timestamp.
pub fn since(text: &str) -> Option<Duration> {
    let then = parse(text)?;
    let elapsed = Timestamp::now().duration_since(then);
    Some(Duration::try_from_secs_f64(elapsed.as_secs_f64().max(0.0)).unwrap_or(Duration::ZERO))
}

/// `base` plus up to 10 % that is stable per `key` (an Application, a repository URL), so polls
/// spread out.
pub fn jitter(base: Duration, key: &str) -> Duration {
    let hash = {
        use std::hash::Hasher;
        let mut h = fnv::FnvHasher::default();
        h.write(key.as_bytes());
        h.finish()
    };
    let extra = base.as_millis() as u64 / 10;
    base + Duration::from_millis(if extra == 0 { 0 } else { hash % extra })
}

/// Per key, how long it has been in its current state (a revision an Application has been Degraded
/// at, for `spec.syncPolicy.autoRevert`), as this process saw it.
#[derive(Default)]
pub struct Stopwatches {
    since: std::sync::Mutex<std::collections::HashMap<String, (String, std::time::Instant)>>,
}

impl Stopwatches {
    /// How long `key` has been in `state` (`None`: in none, its stopwatch is dropped), starting
    /// its stopwatch when it was in none or in another state.
    pub fn running(&self, key: &str, state: Option<&str>) -> Option<Duration> {
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        let Some(state) = state else {
            since.remove(key);
            return None;
        };
        let entry = since
            .entry(key.to_string())
            .or_insert_with(|| (state.to_string(), std::time::Instant::now()));
        if entry.0 != state {
            *entry = (state.to_string(), std::time::Instant::now());
        }
        Some(entry.1.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_written_as_before_truncated_to_their_precision() {
        let t: Timestamp = "2024-05-01T10:00:00.999999Z".parse().expect("timestamp");
        assert_eq!(to_seconds(t), "2024-05-01T10:00:00Z");
        assert_eq!(to_millis(t), "2024-05-01T10:00:00.999Z");
        let whole: Timestamp = "2024-05-01T10:00:00Z".parse().expect("timestamp");
        assert_eq!(to_millis(whole), "2024-05-01T10:00:00.000Z");
        assert_eq!(
            to_seconds(whole),
            whole.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "as metav1.Time writes it"
        );
        assert_eq!(
            parse(&to_millis(t)),
            Some("2024-05-01T10:00:00.999Z".parse().expect("timestamp"))
        );
        assert_eq!(parse("yesterday"), None);
        assert!(now_precise().ends_with('Z') && now().ends_with('Z'));
    }

    #[test]
    fn time_since_a_recorded_timestamp() {
        assert_eq!(since("not a time"), None);
        assert_eq!(since("2999-01-01T00:00:00Z"), Some(Duration::ZERO), "the future is now");
        assert!(since("2000-01-01T00:00:00Z").is_some_and(|d| d > Duration::from_secs(3600)));
    }

    #[test]
    fn jitter_adds_at_most_a_tenth_stably_per_key() {
        let base = Duration::from_secs(100);
        let a = jitter(base, "https://example.com/a.git");
        assert_eq!(a, jitter(base, "https://example.com/a.git"));
        assert!(a >= base && a < base + Duration::from_secs(10));
        assert_eq!(jitter(Duration::from_millis(5), "x"), Duration::from_millis(5));
    }

    #[test]
    fn a_stopwatch_restarts_with_another_state_and_stops_without_one() {
        let clocks = Stopwatches::default();
        assert_eq!(clocks.running("a", None), None);
        let first = clocks.running("a", Some("v2")).expect("started");
        assert!(first < Duration::from_secs(1));
        std::thread::sleep(Duration::from_millis(20));
        assert!(clocks.running("a", Some("v2")).expect("running") >= Duration::from_millis(20));
        assert!(clocks.running("a", Some("v3")).expect("restarted") < Duration::from_millis(20));
        assert_eq!(clocks.running("a", None), None);
    }
}
