//! The render cache: rendered objects by a string key (revision, path, parameters, tool identity),
//! bounded by evicting the oldest insertions first, with hit and miss counters.

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
    entries: HashMap<String, Rendered>,
    order: VecDeque<String>,
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
        let found = self.lock().entries.get(key).cloned();
        let counter = if found.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    pub(crate) fn insert(&self, key: String, value: Rendered) {
        if self.capacity == 0 {
            return;
        }
        let mut inner = self.lock();
        if inner.entries.insert(key.clone(), value).is_none() {
            inner.order.push_back(key);
        }
        while inner.order.len() > self.capacity {
            if let Some(oldest) = inner.order.pop_front() {
                inner.entries.remove(&oldest);
            }
        }
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

    #[test]
    fn evicts_oldest_insertions_and_counts() {
        let cache = Cache::new(2);
        cache.insert("a".into(), rendered(1));
        cache.insert("b".into(), rendered(2));
        cache.insert("a".into(), rendered(3));
        assert_eq!(cache.len(), 2);
        cache.insert("c".into(), rendered(4));
        assert_eq!(cache.len(), 2);
        assert!(cache.get("a").is_none());
        assert_eq!(cache.get("b"), Some(rendered(2)));
        assert_eq!(cache.get("c"), Some(rendered(4)));
        assert_eq!(cache.stats(), (2, 1));
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let cache = Cache::new(0);
        cache.insert("a".into(), rendered(1));
        assert!(cache.get("a").is_none());
    }
}
