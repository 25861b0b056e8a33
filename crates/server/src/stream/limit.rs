//! How many live-update streams may be open: per principal and in all.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::auth::rbac::Source;

/// Open streams allowed per principal.
/// (Each browser tab of the web UI holds one: its WebSocket.)
pub const PER_PRINCIPAL: usize = 16;
/// Open streams allowed in all.
pub const GLOBAL: usize = 256;
/// Counts of open streams, per principal and in all.
#[derive(Debug, Default)]
pub struct StreamLimiter {
    open: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per: HashMap<(Source, String), usize>,
}

impl StreamLimiter {
    /// Count one more stream of `key` unless it is over a limit.
    pub(crate) fn acquire(&self, key: &(Source, String)) -> bool {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let mine = open.per.get(key).copied().unwrap_or(0);
        if open.total >= GLOBAL || mine >= PER_PRINCIPAL {
            return false;
        }
        open.total += 1;
        open.per.insert(key.clone(), mine + 1);
        true
    }

    pub(crate) fn release(&self, key: &(Source, String)) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.per.remove(key);
            }
        }
    }

    /// How many streams are open.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_bounded_per_principal_and_in_all() {
        let l = StreamLimiter::default();
        let dev = (Source::Local, "dev".to_string());
        for _ in 0..PER_PRINCIPAL {
            assert!(l.acquire(&dev));
        }
        assert!(!l.acquire(&dev), "the ninth stream of one principal");
        assert!(
            l.acquire(&(Source::Sso, "dev".to_string())),
            "an SSO user of the same name is another principal"
        );
        l.release(&dev);
        assert!(l.acquire(&dev), "a closed stream frees its place");
        for i in l.open()..GLOBAL {
            assert!(l.acquire(&(Source::Token, format!("bot-{i}"))));
        }
        assert_eq!(l.open(), GLOBAL);
        assert!(!l.acquire(&(Source::Local, "fresh".to_string())), "over the global cap");
    }
}
