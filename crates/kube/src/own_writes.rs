//! The versions of objects Capstan itself wrote, so that a watch can tell the echo of its own write
//! from a change someone else made.
//!
//! Every write to the API server returns the object's new `resourceVersion`, and the watch later
//! delivers an event carrying exactly that version. A sync records each version it wrote; the
//! watches ([`OwnWrites::take`]) skip the reconcile such an event would trigger (the sync reports the
//! state after itself), while any change by someone else carries another version and is compared at
//! once. Without this the echo of a self-heal used up the watch's immediate reconcile, and drift
//! arriving just after it waited for the throttle.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use crate::ObjectKey;

/// How many recorded versions are kept at most (a few hundred bytes each); the oldest are forgotten
/// first. A version whose watch event never comes (an apply that changed nothing, a watch that was
/// listing or restarted) is never taken, so the set could otherwise grow; forgetting a version only
/// costs a reconcile.
const CAPACITY: usize = 16_384;

/// Versions of objects of one cluster that Capstan wrote and whose watch events have not arrived.
#[derive(Debug, Clone, Default)]
pub struct OwnWrites(Arc<Mutex<Versions>>);

/// The recorded versions, and the order they were recorded in (for forgetting the oldest).
#[derive(Debug, Default)]
struct Versions {
    recorded: HashSet<(ObjectKey, String)>,
    order: VecDeque<(ObjectKey, String)>,
}

impl OwnWrites {
    /// Capstan wrote `key` and the API server answered with `resource_version`.
    pub fn record(&self, key: &ObjectKey, resource_version: &str) {
        if resource_version.is_empty() {
            return;
        }
        let entry = (key.clone(), resource_version.to_string());
        let mut versions = self.lock();
        if versions.recorded.insert(entry.clone()) {
            versions.order.push_back(entry);
        }
        // The order may still name versions already taken: they are dropped on the way.
        while versions.order.len() > CAPACITY {
            if let Some(oldest) = versions.order.pop_front() {
                versions.recorded.remove(&oldest);
            }
        }
    }

    /// Whether `key` at `resource_version` is a version Capstan wrote (forgetting it: the watch
    /// delivers each version once).
    pub fn take(&self, key: &ObjectKey, resource_version: &str) -> bool {
        self.lock()
            .recorded
            .remove(&(key.clone(), resource_version.to_string()))
    }

    /// How many versions wait for their watch event.
    pub fn len(&self) -> usize {
        self.lock().recorded.len()
    }

    /// Whether no version waits for its watch event.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Versions> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: "n".into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_recorded_version_is_taken_once_and_other_versions_are_not_ours() {
        let own = OwnWrites::default();
        own.record(&key("a"), "10");
        assert!(!own.take(&key("a"), "11"), "another version is someone else's change");
        assert!(!own.take(&key("b"), "10"), "another object");
        assert!(own.take(&key("a"), "10"));
        assert!(!own.take(&key("a"), "10"), "each version is delivered once");
        own.record(&key("a"), "");
        assert!(own.is_empty(), "an answer without a version records nothing");
    }

    #[test]
    fn the_set_is_bounded() {
        let own = OwnWrites::default();
        for i in 0..CAPACITY + 10 {
            own.record(&key("a"), &i.to_string());
        }
        assert!(own.len() <= CAPACITY);
        assert!(own.take(&key("a"), &(CAPACITY + 9).to_string()), "the newest is kept");
        assert!(own.take(&key("a"), "10"), "only the oldest are forgotten");
        assert!(!own.take(&key("a"), "0"), "the oldest is forgotten");
    }
}
