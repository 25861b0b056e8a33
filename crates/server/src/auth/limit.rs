//! Failed-login limits and the bound on concurrent password checks, so that a flood of logins can
//! neither guess passwords quickly nor starve the blocking pool (which rendering also uses) with
//! PBKDF2 runs.
//!
//! Failures are counted per user name and per client address in fixed one-minute windows that start
//! at the first failure; over the limit, a login is refused with 429 before its password is checked.
//! A successful login clears the user's counter. This is a small map with expiry rather than a
//! rate-limiting crate such as `governor`: what is limited is *failures* (known only after the
//! check) and a success must reset a key, which token-bucket limiters do not offer; the map is
//! pruned of expired windows so it cannot grow without bound.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Failed logins allowed per user name and window.
pub const USER_FAILURES: u32 = 5;
/// Failed logins allowed per client address and window.
pub const ADDRESS_FAILURES: u32 = 20;
/// Length of a window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Password checks running at once.
pub const CONCURRENT_CHECKS: usize = 2;
/// How long a login waits for its turn to check a password before it is refused with 503.
pub const QUEUE_WAIT: Duration = Duration::from_secs(10);
/// Above this many keys, expired windows are pruned.
const PRUNE_ABOVE: usize = 4096;

/// What a failure counter is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    User(String),
    Address(IpAddr),
}

#[derive(Debug, Clone, Copy)]
struct Window {
    failures: u32,
    ends: Instant,
}

/// Failed-login counters and the password-check semaphore.
#[derive(Debug)]
pub struct LoginLimiter {
    windows: Mutex<HashMap<Key, Window>>,
    checks: std::sync::Arc<Semaphore>,
    checked: AtomicU64,
}

impl Default for LoginLimiter {
    fn default() -> Self {
        LoginLimiter {
            windows: Mutex::new(HashMap::new()),
            checks: std::sync::Arc::new(Semaphore::new(CONCURRENT_CHECKS)),
            checked: AtomicU64::new(0),
        }
    }
}

impl LoginLimiter {
    /// `Err(retry after)` when `user` or `address` has used up its failures at `now`.
    pub fn check(&self, user: &str, address: Option<IpAddr>, now: Instant) -> Result<(), Duration> {
        let windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let over = |key: Key, limit: u32| {
            windows
                .get(&key)
                .filter(|w| w.ends > now && w.failures >= limit)
                .map(|w| w.ends - now)
        };
        let user = over(Key::User(user.to_string()), USER_FAILURES);
        let address = address.and_then(|a| over(Key::Address(a), ADDRESS_FAILURES));
        match user.into_iter().chain(address).max() {
            Some(wait) => Err(wait),
            None => Ok(()),
        }
    }

    /// Count a failed login of `user` (`None`: not a possible account name) from `address` at `now`.
    pub fn failed(&self, user: Option<&str>, address: Option<IpAddr>, now: Instant) {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if windows.len() > PRUNE_ABOVE {
            windows.retain(|_, w| w.ends > now);
        }
        let keys = user
            .map(|u| Key::User(u.to_string()))
            .into_iter()
            .chain(address.map(Key::Address));
        for key in keys {
            let w = windows.entry(key).or_insert(Window {
                failures: 0,
                ends: now + WINDOW,
            });
            if w.ends <= now {
                *w = Window {
                    failures: 0,
                    ends: now + WINDOW,
                };
            }
            w.failures = w.failures.saturating_add(1);
        }
    }

    /// A successful login of `user`: its counter starts again.
    pub fn succeeded(&self, user: &str) {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        windows.remove(&Key::User(user.to_string()));
    }

    /// A turn to check a password (at most [`CONCURRENT_CHECKS`] at once), or `None` after waiting
    /// [`QUEUE_WAIT`] in vain. Counts the checks started (see [`LoginLimiter::checks_started`]).
    pub async fn turn(&self) -> Option<OwnedSemaphorePermit> {
        let permit = tokio::time::timeout(QUEUE_WAIT, self.checks.clone().acquire_owned())
            .await
            .ok()?
            .ok()?;
        self.checked.fetch_add(1, Ordering::SeqCst);
        Some(permit)
    }

    /// How many password checks have started since the server started.
    pub fn checks_started(&self) -> u64 {
        self.checked.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_limited_per_user_and_per_address_within_a_window() {
        let l = LoginLimiter::default();
        let t0 = Instant::now();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..USER_FAILURES {
            assert_eq!(l.check("admin", Some(a), t0), Ok(()));
            l.failed(Some("admin"), Some(a), t0);
        }
        assert_eq!(l.check("admin", Some(a), t0), Err(WINDOW));
        assert_eq!(
            l.check("admin", Some(b), t0),
            Err(WINDOW),
            "per user, whatever the address"
        );
        assert_eq!(l.check("dev", Some(a), t0), Ok(()), "other users from the same address");
        // The window ends.
        assert_eq!(l.check("admin", Some(a), t0 + WINDOW), Ok(()));
        // Per address: many user names from one address.
        for i in 0..(ADDRESS_FAILURES - USER_FAILURES) {
            l.failed(Some(&format!("u{i}")), Some(a), t0);
        }
        assert!(l.check("fresh", Some(a), t0).is_err());
        assert_eq!(l.check("fresh", Some(b), t0), Ok(()));
    }

    #[test]
    fn a_success_resets_the_users_counter() {
        let l = LoginLimiter::default();
        let t0 = Instant::now();
        for _ in 0..USER_FAILURES {
            l.failed(Some("admin"), None, t0);
        }
        assert!(l.check("admin", None, t0).is_err());
        l.succeeded("admin");
        assert_eq!(l.check("admin", None, t0), Ok(()));
    }
}
