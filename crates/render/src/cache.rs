//! The render cache: rendered objects by a string key (revision, path, parameters, tool identity),
//! bounded by evicting the oldest insertions first, with hit and miss counters.
//!
//! Each entry also carries a scope (repository, path, application, namespace): invalidating a scope
//! drops its entries and bumps an epoch, and a render that started before the bump does not store its
//! result, so nothing computed before an invalidation is served after it.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Rendered;

pub(crate) struct Cache {
    capacity: usize,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    order: VecDeque<String>,
    /// Bumped by every invalidation.
    epoch: u64,
}

struct Entry {
    scope: String,
    value: Rendered,
}

impl Cache {
    pub(crate) fn new(capacity: usize) -> Self {
        Cache {
            capacity,
            inner: Mutex::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// A clone of the cached value, counting a hit or a miss.
    pub(crate) fn get(&self, key: &str) -> Option<Rendered> {
        let found = self.lock().entries.get(key).map(|e| e.value.clone());
        let counter = if found.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// A clone of the cached value, not counted (a second look after waiting for another render).
    pub(crate) fn peek(&self, key: &str) -> Option<Rendered> {
        self.lock().entries.get(key).map(|e| e.value.clone())
    }

    /// The current epoch: read it before looking up, and pass it to [`Cache::insert`].
    pub(crate) fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Store `value` under `key` (replacing what was there), unless an invalidation happened since
    /// `epoch` was read: the value may predate what that invalidation asked for. Returns whether it
    /// was stored.
    pub(crate) fn insert(&self, key: String, scope: String, value: Rendered, epoch: u64) -> bool {
        if self.capacity == 0 {
            return false;
        }
        let mut inner = self.lock();
        if inner.epoch != epoch {
            return false;
        }
        if inner.entries.insert(key.clone(), Entry { scope, value }).is_none() {
            inner.order.push_back(key);
        }
        while inner.order.len() > self.capacity {
            if let Some(oldest) = inner.order.pop_front() {
                inner.entries.remove(&oldest);
            }
        }
        true
    }

    /// Drop every entry of `scope` and start a new epoch. Returns how many entries were dropped.
    pub(crate) fn invalidate(&self, scope: &str) -> usize {
        let mut inner = self.lock();
        inner.epoch += 1;
        let before = inner.entries.len();
        inner.entries.retain(|_, e| e.scope != scope);
        let dropped = before - inner.entries.len();
        if dropped > 0 {
            let Inner { entries, order, .. } = &mut *inner;
            order.retain(|k| entries.contains_key(k));
        }
        dropped
    }

    pub(crate) fn stats(&self) -> (u64, u64) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed))
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tool;

    fn rendered(n: usize) -> Rendered {
        Rendered {
            objects: vec![serde_json::json!({ "n": n })],
            tool: Tool::Directory,
        }
    }

    /// Insert into scope `s` at the current epoch.
    fn put(cache: &Cache, key: &str, value: Rendered) -> bool {
        cache.insert(key.into(), "s".into(), value, cache.epoch())
    }

    #[test]
    fn evicts_oldest_insertions_and_counts() {
        let cache = Cache::new(2);
        put(&cache, "a", rendered(1));
        put(&cache, "b", rendered(2));
        put(&cache, "a", rendered(3));
        assert_eq!(cache.len(), 2);
        put(&cache, "c", rendered(4));
        assert_eq!(cache.len(), 2);
        assert!(cache.get("a").is_none());
        assert_eq!(cache.get("b"), Some(rendered(2)));
        assert_eq!(cache.get("c"), Some(rendered(4)));
        assert_eq!(cache.stats(), (2, 1));
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let cache = Cache::new(0);
        assert!(!put(&cache, "a", rendered(1)));
        assert!(cache.get("a").is_none());
    }

    #[test]
    fn invalidation_drops_only_its_scope_and_keeps_the_eviction_order() {
        let cache = Cache::new(3);
        let epoch = cache.epoch();
        assert!(cache.insert("a1".into(), "a".into(), rendered(1), epoch));
        assert!(cache.insert("b1".into(), "b".into(), rendered(2), epoch));
        assert!(cache.insert("a2".into(), "a".into(), rendered(3), epoch));
        assert_eq!(cache.invalidate("a"), 2);
        assert_eq!(cache.len(), 1);
        assert!(cache.get("a1").is_none());
        assert!(cache.get("a2").is_none());
        assert_eq!(cache.get("b1"), Some(rendered(2)));
        assert_eq!(cache.invalidate("a"), 0, "nothing left in that scope");

        // The dropped keys left the eviction order too: three more fit beside b1 only by evicting b1.
        let epoch = cache.epoch();
        for (i, k) in ["c", "d"].iter().enumerate() {
            assert!(cache.insert((*k).into(), "c".into(), rendered(10 + i), epoch));
        }
        assert_eq!(cache.len(), 3);
        assert!(cache.insert("e".into(), "c".into(), rendered(20), epoch));
        assert_eq!(cache.len(), 3);
        assert!(cache.get("b1").is_none(), "the oldest remaining entry was evicted");
    }

    #[test]
    fn a_render_started_before_an_invalidation_is_not_stored() {
        let cache = Cache::new(4);
        let started = cache.epoch();
        cache.invalidate("a");
        assert!(!cache.insert("a1".into(), "a".into(), rendered(1), started));
        assert!(cache.get("a1").is_none());
        assert!(cache.insert("a1".into(), "a".into(), rendered(2), cache.epoch()));
        assert_eq!(cache.get("a1"), Some(rendered(2)));
    }
}
