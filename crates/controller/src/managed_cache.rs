//! The cache of one kind's managed objects as its watch last saw them: each object kept as its JSON
//! text, indexed by the value of its tracking label (the Application that manages it).
//!
//! Written here instead of using kube-runtime's reflector `Store`, for what the scaling benchmark
//! measured at thousands of Applications:
//!
//! - the `Store` is one flat map per kind, so finding one Application's objects walked (and
//!   cloned a handle to) every managed object of the kind on every comparison: work that grew with
//!   the number of Applications squared;
//! - an object kept as a `DynamicObject` is a tree of `serde_json` maps: about 4 KB of heap for a
//!   small Service (heaptrack, 1,000 Applications of 4 objects: 17 MB of the controller's 43 MB),
//!   where its JSON text is a fifth of that. A comparison parses the few objects of its
//!   Application again, which costs less than the copy the `Store` needed.
//!
//! It keeps the reflector's semantics: a (re-)list fills a new set that replaces the contents only
//! once complete, and until then readers see the contents from before it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use capstan_api::labels::TRACKING_LABEL;
use kube::api::DynamicObject;
use kube::core::TypeMeta;
use serde_json::Value;

/// An object's namespace (empty for a cluster-scoped one) and name.
type Key = (String, String);

/// One cached object.
struct Entry {
    /// Its tracking label's value, shared with the index.
    label: Arc<str>,
    resource_version: Option<String>,
    json: Arc<str>,
}

#[derive(Default)]
struct Contents {
    objects: HashMap<Key, Entry>,
    by_label: HashMap<Arc<str>, HashSet<Key>>,
}

impl Contents {
    fn insert(&mut self, key: Key, label: &str, resource_version: Option<String>, json: Arc<str>) {
        self.remove(&key);
        let label = match self.by_label.get_key_value(label) {
            Some((shared, _)) => shared.clone(),
            None => Arc::from(label),
        };
        self.by_label.entry(label.clone()).or_default().insert(key.clone());
        self.objects.insert(
            key,
            Entry {
                label,
                resource_version,
                json,
            },
        );
    }

    fn remove(&mut self, key: &Key) {
        let Some(old) = self.objects.remove(key) else {
            return;
        };
        if let Some(keys) = self.by_label.get_mut(&old.label) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_label.remove(&old.label);
            }
        }
    }
}

#[derive(Default)]
struct State {
    contents: Contents,
    /// The list under way: it replaces `contents` when complete.
    listing: Option<Contents>,
}

/// The managed objects of one kind (see the module's documentation).
pub struct ManagedCache {
    types: TypeMeta,
    state: RwLock<State>,
}

impl ManagedCache {
    /// An empty cache of objects whose `apiVersion` and `kind` are `types` (a list's items come
    /// without them; the cached text has them).
    pub fn new(types: TypeMeta) -> Self {
        Self {
            types,
            state: RwLock::default(),
        }
    }

    /// The watch saw `obj` created or changed.
    pub fn apply(&self, obj: &DynamicObject) {
        if let Some((key, label, version, json)) = self.entry(obj) {
            write(&self.state).contents.insert(key, &label, version, json);
        }
    }

    /// The watch saw `obj` deleted.
    pub fn delete(&self, obj: &DynamicObject) {
        write(&self.state).contents.remove(&key_of(obj));
    }

    /// A (re-)list starts: what follows is collected apart until [`ManagedCache::listed`].
    pub fn listing(&self) {
        write(&self.state).listing = Some(Contents::default());
    }

    /// An object of the list under way.
    pub fn listed_object(&self, obj: &DynamicObject) {
        if let Some((key, label, version, json)) = self.entry(obj) {
            let mut state = write(&self.state);
            state
                .listing
                .get_or_insert_with(Contents::default)
                .insert(key, &label, version, json);
        }
    }

    /// The list is complete: it is now the cache's contents.
    pub fn listed(&self) {
        let mut state = write(&self.state);
        let listed = state.listing.take().unwrap_or_default();
        state.contents = listed;
    }

    /// The resourceVersion of the cached `namespace`/`name` (`namespace` empty when cluster-scoped).
    pub fn resource_version(&self, namespace: &str, name: &str) -> Option<String> {
        let key = (namespace.to_string(), name.to_string());
        read(&self.state)
            .contents
            .objects
            .get(&key)
            .and_then(|e| e.resource_version.clone())
    }

    /// The cached objects whose tracking label is `label`, in `namespace` when given.
    pub fn objects_of(&self, label: &str, namespace: Option<&str>) -> Vec<Value> {
        let texts: Vec<Arc<str>> = {
            let state = read(&self.state);
            let Some(keys) = state.contents.by_label.get(label) else {
                return Vec::new();
            };
            keys.iter()
                .filter(|(ns, _)| namespace.is_none_or(|n| n == ns))
                .filter_map(|k| state.contents.objects.get(k).map(|e| e.json.clone()))
                .collect()
        };
        texts.iter().filter_map(|t| serde_json::from_str(t).ok()).collect()
    }

    /// The cached form of `obj`: key, label, version and JSON text with its type set.
    fn entry(&self, obj: &DynamicObject) -> Option<(Key, String, Option<String>, Arc<str>)> {
        let label = obj
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(TRACKING_LABEL))
            .cloned()
            .unwrap_or_default();
        let mut typed = obj.clone();
        typed.types = Some(self.types.clone());
        let json = serde_json::to_string(&typed).ok()?;
        Some((
            key_of(obj),
            label,
            obj.metadata.resource_version.clone(),
            Arc::from(json),
        ))
    }
}

fn key_of(obj: &DynamicObject) -> Key {
    (
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone().unwrap_or_default(),
    )
}

fn read(lock: &RwLock<State>) -> std::sync::RwLockReadGuard<'_, State> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

fn write(lock: &RwLock<State>) -> std::sync::RwLockWriteGuard<'_, State> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cache() -> ManagedCache {
        ManagedCache::new(TypeMeta {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        })
    }

    fn cm(ns: &str, name: &str, app: &str, rv: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rv,
                         "labels": {TRACKING_LABEL: app}},
            "data": {"k": rv},
        }))
        .expect("a ConfigMap")
    }

    fn names(values: &[Value]) -> Vec<String> {
        let mut names: Vec<String> = values
            .iter()
            .map(|v| {
                format!(
                    "{}/{}",
                    v["metadata"]["namespace"].as_str().unwrap_or(""),
                    v["metadata"]["name"].as_str().unwrap_or("")
                )
            })
            .collect();
        names.sort();
        names
    }

    #[test]
    fn objects_are_found_by_their_application_and_namespace_with_their_type() {
        let c = cache();
        c.apply(&cm("a", "one", "web", "1"));
        c.apply(&cm("b", "two", "web", "2"));
        c.apply(&cm("a", "three", "db", "3"));
        assert_eq!(names(&c.objects_of("web", None)), ["a/one", "b/two"]);
        assert_eq!(names(&c.objects_of("web", Some("b"))), ["b/two"]);
        assert_eq!(names(&c.objects_of("db", None)), ["a/three"]);
        assert!(c.objects_of("other", None).is_empty());
        let one = &c.objects_of("web", Some("a"))[0];
        assert_eq!(one["apiVersion"], "v1");
        assert_eq!(one["kind"], "ConfigMap");
        assert_eq!(one["data"]["k"], "1");
    }

    #[test]
    fn a_change_replaces_and_a_relabel_moves_and_a_delete_removes() {
        let c = cache();
        c.apply(&cm("a", "one", "web", "1"));
        c.apply(&cm("a", "one", "web", "2"));
        assert_eq!(c.objects_of("web", None).len(), 1);
        assert_eq!(c.resource_version("a", "one").as_deref(), Some("2"));
        c.apply(&cm("a", "one", "db", "3"));
        assert!(c.objects_of("web", None).is_empty(), "moved to another Application");
        assert_eq!(c.objects_of("db", None).len(), 1);
        c.delete(&cm("a", "one", "db", "3"));
        assert!(c.objects_of("db", None).is_empty());
        assert_eq!(c.resource_version("a", "one"), None);
        let state = read(&c.state);
        assert!(state.contents.by_label.is_empty(), "no empty index entries are left");
    }

    #[test]
    fn a_relist_shows_only_when_complete_and_drops_what_it_did_not_list() {
        let c = cache();
        c.apply(&cm("a", "old", "web", "1"));
        c.listing();
        c.listed_object(&cm("a", "new", "web", "5"));
        assert_eq!(
            names(&c.objects_of("web", None)),
            ["a/old"],
            "the old contents until complete"
        );
        assert_eq!(c.resource_version("a", "new"), None);
        c.listed();
        assert_eq!(names(&c.objects_of("web", None)), ["a/new"]);
    }
}
