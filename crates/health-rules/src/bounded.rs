//! Evaluations on a thread of their own, waited for at most a deadline.
//!
//! Health is asked for inside the controller's reconciles and the server's requests. A rule that
//! loops inside one call of its language's library (a C loop of Lua's, a CEL comprehension) cannot
//! be interrupted there, so the caller does not run it itself: it waits for the answer at most
//! `limit`, and the rule is quarantined by its owner when the answer does not come. The thread left
//! behind finishes on its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Whether a rule may still be evaluated.
#[derive(Debug, Default)]
pub struct Quarantine(AtomicBool);

impl Quarantine {
    /// Whether an earlier evaluation of the rule did not finish in time.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The result of `f`, run on a new thread; an error when it did not finish within `limit` (then
/// `quarantine` is set) or the thread could not start.
pub fn run<T: Send + 'static>(
    limit: Duration,
    quarantine: &Quarantine,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    if quarantine.is_set() {
        return Err(quarantined(limit));
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("health-rule".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| format!("could not start an evaluation: {e}"))?;
    match rx.recv_timeout(limit) {
        Ok(answer) => Ok(answer),
        Err(_) => {
            quarantine.set();
            Err(quarantined(limit))
        }
    }
}

fn quarantined(limit: Duration) -> String {
    format!(
        "quarantined: an evaluation did not finish within {} ms (until capstan-cm changes)",
        limit.as_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_in_time_pass_and_late_ones_quarantine_the_rule() {
        let q = Quarantine::default();
        assert_eq!(run(Duration::from_secs(5), &q, || 7), Ok(7));
        let late = run(Duration::from_millis(20), &q, || {
            std::thread::sleep(Duration::from_millis(300))
        });
        assert!(late.unwrap_err().contains("quarantined"));
        assert!(q.is_set());
        // Not run again: answered at once.
        let again = run(Duration::from_secs(5), &q, || 7);
        assert!(again.unwrap_err().contains("quarantined"));
    }
}
