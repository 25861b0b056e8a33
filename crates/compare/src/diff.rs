//! Comparing desired objects with live ones under server-side-apply semantics.
//!
//! For each desired object: if every field Git sets has the same value live, and Git still sets every
//! field that Capstan's last server-side apply of it set (per the live object's `managedFields`, see
//! [`crate::owned`]), it is Synced with no request made. Otherwise a server-side-apply dry run (field
//! manager `capstan`) predicts the object after a sync; it is Synced if the prediction equals the
//! live object (the difference was only defaulting or normalisation by the API server), OutOfSync
//! otherwise (a field removed from Git is removed in the prediction). `ignoreDifferences` JSON
//! pointers, and the fields owned by its `managedFieldsManagers` ([`crate::managers`]), are removed
//! from both sides first. Tracked live objects that Git no longer has require
//! pruning, unless they carry `compare-options: IgnoreExtraneous`.

use std::collections::{BTreeMap, HashMap};

use capstan_api::application::ResourceIgnoreDifferences;
use capstan_kube::annotations::{self, HookSpec};
use capstan_kube::{KindInfo, ObjectKey, describe_kube_error};
use futures::{StreamExt, stream};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;

use crate::managers;
use crate::normalize::{Tracking, owner};
use crate::owned::owned_field_removed;
use crate::{CompareError, Result};

pub use crate::FIELD_MANAGER;

/// Sync state of one object (owned by `capstan-api`: it is the type of `status.sync.status`). A
/// comparison yields `Synced` or `OutOfSync`, never `Unknown`.
pub use capstan_api::status::SyncCode;

/// One object of an Application, desired and/or live.
#[derive(Debug, Clone)]
pub struct ResourceState {
    /// Identity.
    pub key: ObjectKey,
    /// API version to use.
    pub api_version: String,
    /// How the destination serves the kind.
    pub info: KindInfo,
    /// The prepared desired object (None: only live, i.e. extraneous).
    pub desired: Option<Value>,
    /// The live object.
    pub live: Option<Value>,
    /// The live object as a sync would leave it (from the dry run), when one was made.
    pub predicted: Option<Value>,
    /// Sync state.
    pub sync: SyncCode,
    /// Tracked but no longer in Git.
    pub requires_pruning: bool,
    /// Is a hook (not part of the sync status).
    pub hook: bool,
    /// Sync wave.
    pub wave: i64,
    /// Tracked by another Application (its tracking id).
    pub owned_by_other: Option<String>,
    /// Why the server-side dry run refused the desired object (it is then OutOfSync; a sync will
    /// fail on it with the same message).
    pub error: Option<String>,
}

/// The comparison of one Application.
#[derive(Debug, Clone, Default)]
pub struct Comparison {
    /// Every desired and every tracked object, sorted by key.
    pub resources: Vec<ResourceState>,
}

impl Comparison {
    /// Synced when no non-hook object is OutOfSync.
    pub fn sync(&self) -> SyncCode {
        if self.resources.iter().any(|r| !r.hook && r.sync == SyncCode::OutOfSync) {
            SyncCode::OutOfSync
        } else {
            SyncCode::Synced
        }
    }
}

/// A desired object with its resolved kind.
#[derive(Debug, Clone)]
pub struct Desired {
    /// Prepared object (namespace and tracking set).
    pub object: Value,
    /// Kind info.
    pub info: KindInfo,
}

/// Compare `desired` with `live` (every live object of the desired keys plus every object tracked by
/// this Application). Makes dry-run requests only for objects whose fields differ.
pub async fn compare(
    client: &kube::Client,
    desired: Vec<Desired>,
    live: Vec<(Value, KindInfo)>,
    tracking: &Tracking,
    ignore: &[ResourceIgnoreDifferences],
) -> Result<Comparison> {
    let mut live_by_key: HashMap<ObjectKey, (Value, KindInfo)> = HashMap::new();
    for (obj, info) in live {
        if let Ok(key) = ObjectKey::of(&obj) {
            live_by_key.insert(key, (obj, info));
        }
    }
    let mut states: BTreeMap<ObjectKey, ResourceState> = BTreeMap::new();
    let mut to_dry_run = Vec::new();
    // The fields owned by `managedFieldsManagers`, per object (read from the API server: the watch
    // cache keeps only Capstan's own managedFields entry).
    let mut managed: HashMap<ObjectKey, Vec<serde_json::Map<String, Value>>> = HashMap::new();
    for d in desired {
        let key = ObjectKey::of(&d.object)?;
        let hook_spec = annotations::hook(&d.object).map_err(|source| CompareError::Annotation {
            key: key.clone(),
            source,
        })?;
        if hook_spec == HookSpec::Skip {
            // Still in Git: its live object is neither compared nor extraneous (never pruned).
            live_by_key.remove(&key);
            continue;
        }
        let wave = annotations::sync_wave(&d.object).map_err(|source| CompareError::Annotation {
            key: key.clone(),
            source,
        })?;
        let hook = matches!(hook_spec, HookSpec::Phases(_));
        let api_version = d
            .object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let live = live_by_key.remove(&key).map(|(v, _)| v);
        let names = managers_for(ignore, &key);
        if !names.is_empty() && live.is_some() {
            let full = read_full(client, &d.info, &key).await?;
            let sets = full.map(|obj| managers::owned_by(&obj, &names)).unwrap_or_default();
            if !sets.is_empty() {
                managed.insert(key.clone(), sets);
            }
        }
        // Those fields are left to their managers: a sync does not apply them either, so self-heal
        // (or a sync for another change) never takes them back (see `managers`).
        let desired_object = match managed.get(&key) {
            Some(sets) => managers::strip(&d.object, sets),
            None => d.object,
        };
        let owned_by_other = live.as_ref().and_then(owner).filter(|o| *o != tracking.id());
        let mut state = ResourceState {
            key: key.clone(),
            api_version,
            info: d.info,
            desired: Some(desired_object),
            live,
            predicted: None,
            sync: SyncCode::OutOfSync,
            requires_pruning: false,
            hook,
            wave,
            owned_by_other,
            error: None,
        };
        if !hook
            && state.owned_by_other.is_none()
            && let (Some(desired), Some(live)) = (&state.desired, &state.live)
        {
            let rules = rules_for(ignore, &key);
            let sets = managed.get(&key).map(Vec::as_slice).unwrap_or_default();
            let (desired, live) = (without(desired, &rules), managers::strip(&without(live, &rules), sets));
            // A field Git no longer sets is still live, and the next apply removes it when Capstan
            // owns it: the dry run shows whether it does (co-owned fields stay).
            if is_subset(&desired, &live) && !owned_field_removed(&desired, &live) {
                state.sync = SyncCode::Synced;
            } else {
                to_dry_run.push(key.clone());
            }
        }
        states.insert(key, state);
    }

    // Live objects this Application tracks that Git no longer has.
    for (key, (obj, info)) in live_by_key {
        // Hooks are created by syncs and cleaned up by their delete policy, never pruned.
        if !tracking.owns(&obj) || !matches!(annotations::hook(&obj), Ok(HookSpec::None)) {
            continue;
        }
        let ignore_extraneous = annotations::has_compare_option(&obj, "IgnoreExtraneous");
        let wave = annotations::sync_wave(&obj).unwrap_or(0);
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
        states.insert(
            key.clone(),
            ResourceState {
                key,
                api_version,
                info,
                desired: None,
                live: Some(obj),
                predicted: None,
                sync: if ignore_extraneous {
                    SyncCode::Synced
                } else {
                    SyncCode::OutOfSync
                },
                requires_pruning: true,
                hook: false,
                wave,
                owned_by_other: None,
                error: None,
            },
        );
    }

    let results: Vec<(ObjectKey, Result<Value>)> = stream::iter(to_dry_run.into_iter().filter_map(|k| {
        let s = states.get(&k)?;
        Some((k, s.info.clone(), s.desired.clone()?))
    }))
    .map(|(key, info, desired)| async move {
        let predicted = dry_run_apply(client, &info, &key, &desired).await;
        (key, predicted)
    })
    .buffer_unordered(16)
    .collect()
    .await;
    for (key, predicted) in results {
        let Some(state) = states.get_mut(&key) else { continue };
        let predicted = match predicted {
            Ok(p) => p,
            // The API server refuses the object: OutOfSync, and the sync will say why.
            Err(CompareError::DryRun { source, .. }) => {
                state.sync = SyncCode::OutOfSync;
                state.error = Some(describe_kube_error(&source));
                continue;
            }
            Err(CompareError::Read { source, .. }) => {
                state.sync = SyncCode::OutOfSync;
                state.error = Some(source.to_string());
                continue;
            }
            Err(other) => return Err(other),
        };
        let rules = rules_for(ignore, &key);
        let sets = managed.get(&key).map(Vec::as_slice).unwrap_or_default();
        let same = match &state.live {
            Some(live) => {
                comparable(&managers::strip(&without(&predicted, &rules), sets))
                    == comparable(&managers::strip(&without(live, &rules), sets))
            }
            None => false,
        };
        state.sync = if same { SyncCode::Synced } else { SyncCode::OutOfSync };
        state.predicted = Some(predicted);
    }
    Ok(Comparison {
        resources: states.into_values().collect(),
    })
}

async fn dry_run_apply(client: &kube::Client, info: &KindInfo, key: &ObjectKey, desired: &Value) -> Result<Value> {
    let api: Api<DynamicObject> = if info.namespaced {
        Api::namespaced_with(client.clone(), &key.namespace, &info.resource)
    } else {
        Api::all_with(client.clone(), &info.resource)
    };
    let pp = strict(PatchParams::apply(FIELD_MANAGER).force().dry_run());
    let obj = api
        .patch(&key.name, &pp, &Patch::Apply(desired))
        .await
        .map_err(|source| CompareError::DryRun {
            key: key.clone(),
            source,
        })?;
    serde_json::to_value(obj).map_err(|source| CompareError::Read {
        key: key.clone(),
        source,
    })
}

/// `pp` with strict field validation, as `kubectl apply` (and so Argo CD) asks by default: a field
/// the kind's schema does not know (a typo, a field of another version, an Argo CD field Capstan's
/// Application does not have) is refused naming it, instead of being dropped silently. The dry run
/// of a comparison asks it, so the refusal comes before any sync, and every apply asks it too.
pub fn strict(mut pp: PatchParams) -> PatchParams {
    pp.field_validation = Some(kube::api::ValidationDirective::Strict);
    pp
}

/// Whether every field set in `desired` has the same value in `live` (lists element-wise).
pub fn is_subset(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d
            .iter()
            .all(|(k, dv)| k == "status" || dv.is_null() || l.get(k).is_some_and(|lv| is_subset(dv, lv))),
        (Value::Array(d), Value::Array(l)) => d.len() == l.len() && d.iter().zip(l).all(|(a, b)| is_subset(a, b)),
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    }
}

/// An object without the fields the server owns, for exact comparison and display.
pub fn comparable(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Some(map) = obj.as_object_mut() {
        map.remove("status");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in [
                "managedFields",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "uid",
                "selfLink",
            ] {
                meta.remove(field);
            }
            if let Some(ann) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                ann.remove("kubectl.kubernetes.io/last-applied-configuration");
                ann.remove("deployment.kubernetes.io/revision");
                if ann.is_empty() {
                    meta.remove("annotations");
                }
            }
        }
    }
    obj
}

/// The `ignoreDifferences` rules that apply to `key`.
fn matching<'a, 'k>(
    ignore: &'a [ResourceIgnoreDifferences],
    key: &'k ObjectKey,
) -> impl Iterator<Item = &'a ResourceIgnoreDifferences> + use<'a, 'k> {
    ignore.iter().filter(move |r| {
        r.group == key.group
            && r.kind == key.kind
            && (r.name.is_empty() || r.name == key.name)
            && (r.namespace.is_empty() || r.namespace == key.namespace)
    })
}

fn rules_for<'a>(ignore: &'a [ResourceIgnoreDifferences], key: &ObjectKey) -> Vec<&'a str> {
    matching(ignore, key)
        .flat_map(|r| r.json_pointers.iter().map(String::as_str))
        .collect()
}

/// The `managedFieldsManagers` of the rules that match `key`.
fn managers_for<'a>(ignore: &'a [ResourceIgnoreDifferences], key: &ObjectKey) -> Vec<&'a str> {
    matching(ignore, key)
        .flat_map(|r| r.managed_fields_managers.iter().map(String::as_str))
        .collect()
}

/// The live object as the API server has it, every managedFields entry included (`None`: gone).
async fn read_full(client: &kube::Client, info: &KindInfo, key: &ObjectKey) -> Result<Option<Value>> {
    let api: Api<DynamicObject> = if info.namespaced {
        Api::namespaced_with(client.clone(), &key.namespace, &info.resource)
    } else {
        Api::all_with(client.clone(), &info.resource)
    };
    let obj = api.get_opt(&key.name).await.map_err(|source| CompareError::ReadLive {
        key: key.clone(),
        source,
    })?;
    obj.map(serde_json::to_value)
        .transpose()
        .map_err(|source| CompareError::Read {
            key: key.clone(),
            source,
        })
}

/// `obj` with the fields at `pointers` (RFC 6901) removed.
pub fn without(obj: &Value, pointers: &[&str]) -> Value {
    let mut obj = obj.clone();
    for pointer in pointers {
        let Some((parent, last)) = pointer.rsplit_once('/') else {
            continue;
        };
        let last = last.replace("~1", "/").replace("~0", "~");
        match obj.pointer_mut(parent) {
            Some(Value::Object(map)) => {
                map.remove(&last);
            }
            Some(Value::Array(items)) => {
                if let Ok(i) = last.parse::<usize>()
                    && i < items.len()
                {
                    items.remove(i);
                }
            }
            _ => {}
        }
    }
    obj
}

/// A unified diff (live → desired) of one object, as YAML, for people.
pub fn render_diff(state: &ResourceState) -> String {
    let to_yaml = |v: Option<&Value>| {
        v.map(|v| serde_saphyr::to_string(&comparable(v)).unwrap_or_default())
            .unwrap_or_default()
    };
    let live = to_yaml(state.live.as_ref());
    let desired = match (&state.predicted, &state.desired) {
        (Some(p), _) => to_yaml(Some(p)),
        (None, Some(d)) if state.live.is_none() => to_yaml(Some(d)),
        (None, Some(_)) => live.clone(),
        (None, None) => String::new(),
    };
    similar::TextDiff::from_lines(&live, &desired)
        .unified_diff()
        .context_radius(3)
        .header(&format!("live {}", state.key), &format!("desired {}", state.key))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_ignores_server_added_fields_but_not_changed_ones() {
        let desired =
            json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "a", "image": "x:1"}]}}}});
        let live = json!({"spec": {"replicas": 2, "revisionHistoryLimit": 10, "template": {"spec": {
            "containers": [{"name": "a", "image": "x:1", "imagePullPolicy": "IfNotPresent"}], "dnsPolicy": "ClusterFirst"}}}});
        assert!(is_subset(&desired, &live));
        let changed = json!({"spec": {"replicas": 3}});
        assert!(!is_subset(&changed, &live));
        assert!(
            is_subset(&json!({"a": 1}), &json!({"a": 1.0})),
            "numbers compare by value"
        );
        assert!(!is_subset(&json!({"a": [1, 2]}), &json!({"a": [1]})));
    }

    #[test]
    fn json_pointers_remove_fields_and_list_items() {
        let obj = json!({"spec": {"replicas": 3, "list": [1, 2, 3], "a/b": 1}});
        assert_eq!(
            without(&obj, &["/spec/replicas"]),
            json!({"spec": {"list": [1, 2, 3], "a/b": 1}})
        );
        assert_eq!(
            without(&obj, &["/spec/list/1", "/spec/a~1b"]),
            json!({"spec": {"replicas": 3, "list": [1, 3]}})
        );
        assert_eq!(without(&obj, &["/nope/x"]), obj);
    }

    #[test]
    fn comparable_strips_server_owned_metadata() {
        let live = json!({"metadata": {"name": "a", "uid": "u", "resourceVersion": "1", "managedFields": [],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}}, "status": {"x": 1}});
        assert_eq!(comparable(&live), json!({"metadata": {"name": "a"}}));
    }
}
