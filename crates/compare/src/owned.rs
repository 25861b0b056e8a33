//! Fields Capstan owns through server-side apply that Git no longer sets.
//!
//! A field Git stops setting is not visible by comparing what Git sets with what runs: every field
//! Git still sets has its value live. Server-side apply removes such a field at the next apply
//! when the field manager `capstan` owns it from its last apply, so it is drift. The API server
//! records what each manager owns in `metadata.managedFields` (`fieldsV1`, a tree of
//! structured-merge-diff path elements):
//!
//! - `f:<name>`: a field of a map (`f:data`, `f:spec`);
//! - `k:<json object>`: an item of a list matched by its key fields (`k:{"name":"app"}` for a
//!   container, `k:{"containerPort":80,"protocol":"TCP"}` for a port);
//! - `v:<json value>`: an item of a set (`v:"example.com/finalizer"`);
//! - `i:<index>`: an item of a list by position;
//! - `.`: the element itself (its parent's path element already says it exists).
//!
//! [`removed_owned_fields`] walks the set owned by Capstan's `Apply` entry alongside the desired and
//! the live object: a path that exists live but no longer in the desired object is a field the next
//! apply removes. Fields filled in by the API server (defaults) belong to no applier, so they never
//! count; neither do fields another manager owns alone, nor `status` (never applied). An object
//! Capstan never server-side applied (created by someone else, or written with `Replace=true`,
//! which is a PUT) has no such entry: nothing counts.
//!
//! A path the live object does not have (after `ignoreDifferences` removed it, say) is not counted
//! either, so the caller passes both objects with the same ignore rules applied.

use kube::core::ObjectMeta;
use serde_json::{Map, Value};

use crate::FIELD_MANAGER;

/// The `operation` of a server-side apply's managedFields entry.
const APPLY: &str = "Apply";

/// Keep only the managedFields entry of Capstan's own server-side applies in `meta` (none when it
/// has no such entry): all the comparison needs of field ownership, a few hundred bytes instead of
/// every manager's.
///
/// Its `fieldsV1` is kept as its JSON text (read back by [`removed_owned_fields`]): as a tree of
/// `serde_json` maps it takes about ten times the memory, a few kilobytes per object, and the
/// controller's watch cache holds one for every object Capstan manages.
pub fn keep_own_apply_entry(meta: &mut ObjectMeta) {
    if let Some(entries) = meta.managed_fields.as_mut() {
        entries.retain(|e| {
            e.manager.as_deref() == Some(FIELD_MANAGER)
                && e.operation.as_deref() == Some(APPLY)
                && e.subresource.as_deref().unwrap_or("").is_empty()
        });
        for entry in entries.iter_mut() {
            if let Some(fields) = entry.fields_v1.as_mut()
                && !fields.0.is_string()
            {
                fields.0 = Value::String(fields.0.to_string());
            }
        }
        if entries.is_empty() {
            meta.managed_fields = None;
        }
    }
}

/// Whether Capstan's last server-side apply of `live` set a field that `desired` no longer sets
/// (and `live` still has): the next apply would remove it.
pub fn owned_field_removed(desired: &Value, live: &Value) -> bool {
    !removed_owned_fields(desired, live, 1).is_empty()
}

/// The paths (at most `limit`) that Capstan's last server-side apply of `live` set, `live` still
/// has, and `desired` no longer sets, e.g. `.data.b` or
/// `.spec.template.spec.containers[{"name":"app"}].env[{"name":"DEBUG"}]`. Empty when `live` has no
/// managedFields entry of Capstan's server-side applies.
pub fn removed_owned_fields(desired: &Value, live: &Value, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    if limit == 0 {
        return out;
    }
    let Some(owned) = own_apply_fields(live) else {
        return out;
    };
    let mut walk = Walk {
        out: &mut out,
        limit,
        path: String::new(),
    };
    walk.fields(&owned, desired, live, true);
    out
}

/// The `fieldsV1` of `live`'s managedFields entry for Capstan's server-side applies, as the API
/// server sends it or as its JSON text (see [`keep_own_apply_entry`]).
fn own_apply_fields(live: &Value) -> Option<std::borrow::Cow<'_, Map<String, Value>>> {
    use std::borrow::Cow;
    let fields = live
        .pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str);
            s("manager") == Some(FIELD_MANAGER)
                && s("operation") == Some(APPLY)
                && s("subresource").unwrap_or("").is_empty()
                && s("fieldsType").is_none_or(|t| t == "FieldsV1")
        })?
        .get("fieldsV1")?;
    match fields {
        Value::Object(map) => Some(Cow::Borrowed(map)),
        Value::String(text) => match serde_json::from_str(text) {
            Ok(Value::Object(map)) => Some(Cow::Owned(map)),
            _ => None,
        },
        _ => None,
    }
}

struct Walk<'a> {
    out: &'a mut Vec<String>,
    limit: usize,
    /// Where the walk is, for the paths it reports.
    path: String,
}

impl Walk<'_> {
    fn full(&self) -> bool {
        self.out.len() >= self.limit
    }

    /// Walk the owned set `owned` of the element that is `desired` in the desired object (`Null`
    /// when it is not there) and `live` in the live object.
    fn fields(&mut self, owned: &Map<String, Value>, desired: &Value, live: &Value, root: bool) {
        for (element, children) in owned {
            if self.full() {
                return;
            }
            let Some((d, l, segment)) = locate(element, desired, live, root) else {
                continue;
            };
            let len = self.path.len();
            self.path.push_str(&segment);
            if d.is_null() {
                self.out.push(self.path.clone());
            } else if let Some(children) = children.as_object()
                && !children.is_empty()
            {
                self.fields(children, d, l, false);
            }
            self.path.truncate(len);
        }
    }
}

/// The desired (`Null` when absent) and live values at path element `element` under `desired` and
/// `live`, and how it reads in a path; None when the walk has nothing to check there: the element is
/// `.`, unknown or malformed, `status`, or absent live.
fn locate<'v>(
    element: &str,
    desired: &'v Value,
    live: &'v Value,
    root: bool,
) -> Option<(&'v Value, &'v Value, String)> {
    const NULL: &Value = &Value::Null;
    let (kind, rest) = (element.get(..2)?, element.get(2..)?);
    match kind {
        "f:" => {
            if root && rest == "status" {
                return None;
            }
            let l = live.get(rest).filter(|v| !v.is_null())?;
            let d = desired.as_object().and_then(|m| m.get(rest)).unwrap_or(NULL);
            Some((d, l, format!(".{rest}")))
        }
        "k:" => {
            let Ok(Value::Object(key)) = serde_json::from_str::<Value>(rest) else {
                return None;
            };
            let l = live.as_array()?.iter().find(|item| has_key(item, &key, false))?;
            let items = desired.as_array().map(Vec::as_slice).unwrap_or_default();
            // A key field the desired item leaves out may have been filled in by the API server
            // (a port's `protocol: TCP`) before the apply was recorded: such an item still matches.
            let d = items
                .iter()
                .find(|item| has_key(item, &key, false))
                .or_else(|| items.iter().find(|item| has_key(item, &key, true)))
                .unwrap_or(NULL);
            Some((d, l, format!("[{rest}]")))
        }
        "v:" => {
            let value: Value = serde_json::from_str(rest).ok()?;
            let l = live.as_array()?.iter().find(|item| same(item, &value))?;
            let d = desired
                .as_array()
                .and_then(|items| items.iter().find(|item| same(item, &value)))
                .unwrap_or(NULL);
            Some((d, l, format!("[{rest}]")))
        }
        "i:" => {
            let index: usize = rest.parse().ok()?;
            let l = live.as_array()?.get(index).filter(|v| !v.is_null())?;
            let d = desired.as_array().and_then(|items| items.get(index)).unwrap_or(NULL);
            Some((d, l, format!("[{index}]")))
        }
        _ => None,
    }
}

/// Whether list item `item` has the key fields `key`. `lenient`: a key field the item does not set
/// matches too (at least one must be set and match).
pub(crate) fn has_key(item: &Value, key: &Map<String, Value>, lenient: bool) -> bool {
    let Some(fields) = item.as_object() else {
        return false;
    };
    let mut matched = false;
    for (name, value) in key {
        match fields.get(name).filter(|v| !v.is_null()) {
            Some(v) if same(v, value) => matched = true,
            None if lenient => {}
            _ => return false,
        }
    }
    matched || key.is_empty()
}

/// JSON equality, numbers by value (`80` and `80.0` are the same port).
pub(crate) fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `obj` with a managedFields entry per (manager, operation, fieldsV1).
    fn with_fields(mut obj: Value, entries: &[(&str, &str, Value)]) -> Value {
        obj["metadata"]["managedFields"] = entries
            .iter()
            .map(|(manager, operation, fields)| {
                json!({"manager": manager, "operation": operation, "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": fields})
            })
            .collect();
        obj
    }

    fn configmap(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n", "labels": {"capstan.dev/instance": "app"}},
            "data": data})
    }

    fn configmap_fields() -> Value {
        json!({"f:data": {".": {}, "f:a": {}, "f:b": {}},
            "f:metadata": {"f:labels": {".": {}, "f:capstan.dev/instance": {}}}})
    }

    #[test]
    fn a_map_field_removed_from_git_counts() {
        let live = with_fields(
            configmap(json!({"a": "1", "b": "2"})),
            &[("capstan", "Apply", configmap_fields())],
        );
        let desired = configmap(json!({"a": "1"}));
        assert_eq!(removed_owned_fields(&desired, &live, 10), [".data.b"]);
        assert!(owned_field_removed(&desired, &live));
        // Still set (with any value: a changed value is for the other checks): nothing removed.
        assert!(!owned_field_removed(&configmap(json!({"a": "1", "b": "3"})), &live));
        // Set to null is not set.
        assert!(owned_field_removed(&configmap(json!({"a": "1", "b": null})), &live));
        // The whole map gone: the map is what is removed.
        let mut bare = configmap(json!({}));
        bare.as_object_mut().unwrap().remove("data");
        assert_eq!(removed_owned_fields(&bare, &live, 10), [".data"]);
    }

    #[test]
    fn fields_of_other_managers_defaults_and_status_do_not_count() {
        let mut live = with_fields(
            configmap(json!({"a": "1", "b": "2", "extra": "x"})),
            &[
                (
                    "capstan",
                    "Apply",
                    json!({"f:data": {"f:a": {}}, "f:status": {"f:phase": {}}}),
                ),
                ("kubectl-edit", "Update", json!({"f:data": {"f:extra": {}, "f:b": {}}})),
                ("someone", "Apply", json!({"f:data": {"f:b": {}}})),
            ],
        );
        live["status"] = json!({"phase": "Done"});
        let desired = configmap(json!({"a": "1"}));
        assert!(!owned_field_removed(&desired, &live));
    }

    #[test]
    fn no_capstan_apply_entry_means_nothing_removed() {
        let live = configmap(json!({"a": "1", "b": "2"}));
        let desired = configmap(json!({"a": "1"}));
        assert!(!owned_field_removed(&desired, &live), "no managedFields at all");
        // Written with PUT/POST (Replace=true): an Update entry, not an Apply one.
        let replaced = with_fields(live.clone(), &[("capstan", "Update", configmap_fields())]);
        assert!(!owned_field_removed(&desired, &replaced));
        // Applied by another manager.
        let other = with_fields(live.clone(), &[("kubectl", "Apply", configmap_fields())]);
        assert!(!owned_field_removed(&desired, &other));
        // Capstan's apply of the status subresource is not an apply of the object.
        let mut status = with_fields(live, &[("capstan", "Apply", configmap_fields())]);
        status["metadata"]["managedFields"][0]["subresource"] = json!("status");
        assert!(!owned_field_removed(&desired, &status));
    }

    #[test]
    fn a_field_the_live_object_lacks_does_not_count() {
        // Ignored by an ignoreDifferences rule on both sides, or recorded but gone: the next apply
        // removes nothing.
        let live = with_fields(
            configmap(json!({"a": "1"})),
            &[("capstan", "Apply", configmap_fields())],
        );
        assert!(!owned_field_removed(&configmap(json!({"a": "1"})), &live));
    }

    fn deployment(containers: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 2, "template": {"spec": {"containers": containers}}}})
    }

    fn deployment_fields() -> Value {
        json!({"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"app\"}": {
                ".": {}, "f:name": {}, "f:image": {},
                "f:env": {"k:{\"name\":\"DEBUG\"}": {".": {}, "f:name": {}, "f:value": {}},
                          "k:{\"name\":\"MODE\"}": {".": {}, "f:name": {}, "f:value": {}}},
                "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}},
                            "k:{\"containerPort\":9090,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:name": {}}}
            },
            "k:{\"name\":\"sidecar\"}": {".": {}, "f:name": {}, "f:image": {}}
        }}}}})
    }

    /// The live Deployment: what was applied plus the API server's defaults.
    fn live_deployment() -> Value {
        with_fields(
            deployment(json!([
                {"name": "app", "image": "x:1", "imagePullPolicy": "IfNotPresent",
                 "env": [{"name": "DEBUG", "value": "1"}, {"name": "MODE", "value": "fast"}],
                 "ports": [{"containerPort": 80, "protocol": "TCP"},
                           {"containerPort": 9090, "name": "metrics", "protocol": "TCP"}]},
                {"name": "sidecar", "image": "y:1", "terminationMessagePath": "/dev/termination-log"}
            ])),
            &[("capstan", "Apply", deployment_fields())],
        )
    }

    #[test]
    fn keyed_list_items_match_by_their_keys_in_any_order() {
        let live = live_deployment();
        // Everything still set, in another order, protocol left to its default: nothing removed.
        let same = deployment(json!([
            {"name": "sidecar", "image": "y:1"},
            {"name": "app", "image": "x:2",
             "env": [{"name": "MODE", "value": "fast"}, {"name": "DEBUG", "value": "1"}],
             "ports": [{"containerPort": 9090, "name": "metrics"}, {"containerPort": 80}]}
        ]));
        assert_eq!(removed_owned_fields(&same, &live, 10), Vec::<String>::new());

        // An env var removed from a container.
        let no_debug = deployment(json!([
            {"name": "app", "image": "x:1", "env": [{"name": "MODE", "value": "fast"}],
             "ports": [{"containerPort": 80}, {"containerPort": 9090, "name": "metrics"}]},
            {"name": "sidecar", "image": "y:1"}
        ]));
        assert_eq!(
            removed_owned_fields(&no_debug, &live, 10),
            [r#".spec.template.spec.containers[{"name":"app"}].env[{"name":"DEBUG"}]"#]
        );

        // A port removed (keyed by containerPort and protocol), and a field of the other port.
        let one_port = deployment(json!([
            {"name": "app", "image": "x:1",
             "env": [{"name": "DEBUG", "value": "1"}, {"name": "MODE", "value": "fast"}],
             "ports": [{"containerPort": 9090, "protocol": "TCP"}]},
            {"name": "sidecar", "image": "y:1"}
        ]));
        assert_eq!(
            removed_owned_fields(&one_port, &live, 10),
            [
                r#".spec.template.spec.containers[{"name":"app"}].ports[{"containerPort":80,"protocol":"TCP"}]"#,
                r#".spec.template.spec.containers[{"name":"app"}].ports[{"containerPort":9090,"protocol":"TCP"}].name"#,
            ]
        );

        // A port with another protocol is another item.
        let udp = deployment(json!([
            {"name": "app", "image": "x:1",
             "env": [{"name": "DEBUG", "value": "1"}, {"name": "MODE", "value": "fast"}],
             "ports": [{"containerPort": 80, "protocol": "UDP"}, {"containerPort": 9090, "name": "metrics"}]},
            {"name": "sidecar", "image": "y:1"}
        ]));
        assert_eq!(removed_owned_fields(&udp, &live, 10).len(), 1);

        // A whole container removed; a missing nested field (the replicas) too.
        let mut alone = deployment(json!([{"name": "app", "image": "x:1",
            "env": [{"name": "DEBUG", "value": "1"}, {"name": "MODE", "value": "fast"}],
            "ports": [{"containerPort": 80}, {"containerPort": 9090, "name": "metrics"}]}]));
        alone["spec"].as_object_mut().unwrap().remove("replicas");
        assert_eq!(
            removed_owned_fields(&alone, &live, 10),
            [
                ".spec.replicas",
                r#".spec.template.spec.containers[{"name":"sidecar"}]"#
            ]
        );
        assert_eq!(
            removed_owned_fields(&alone, &live, 1),
            [".spec.replicas"],
            "at most `limit`"
        );
        assert!(owned_field_removed(&alone, &live));
    }

    #[test]
    fn set_items_and_list_indexes() {
        let fields = json!({"f:metadata": {"f:finalizers": {".": {}, "v:\"a.io/x\"": {}, "v:\"a.io/y\"": {}}},
            "f:spec": {"f:pairs": {"i:0": {"f:v": {}}, "i:1": {".": {}}}}});
        let obj = |finalizers: Value, pairs: Value| json!({"metadata": {"name": "o", "finalizers": finalizers}, "spec": {"pairs": pairs}});
        let live = with_fields(
            obj(json!(["a.io/x", "a.io/y", "other.io/z"]), json!([{"v": 1}, {"v": 2}])),
            &[("capstan", "Apply", fields)],
        );
        assert!(!owned_field_removed(
            &obj(json!(["a.io/y", "a.io/x"]), json!([{"v": 1}, {"v": 3}])),
            &live
        ));
        assert_eq!(
            removed_owned_fields(&obj(json!(["a.io/x"]), json!([{"v": 1}])), &live, 10),
            [".metadata.finalizers[\"a.io/y\"]", ".spec.pairs[1]"]
        );
        assert_eq!(
            removed_owned_fields(&obj(json!(["a.io/x", "a.io/y"]), json!([{}, {"v": 2}])), &live, 10),
            [".spec.pairs[0].v"]
        );
    }

    #[test]
    fn odd_input_never_panics_and_counts_nothing_it_cannot_read() {
        let desired = configmap(json!({"a": "1"}));
        let odd_fields = [
            json!({"f:data": "not a map", "k:": {}, "k:{oops": {}, "v:[": {}, "i:x": {}, "i:-1": {}, "x": {},
                "": {}, "é": {}, "f:": {}, "k:[1]": {}, "k:{}": {}, "i:99": {}, "v:1": {}}),
            json!(null),
            json!([1, 2]),
            json!("f:data"),
        ];
        for fields in odd_fields {
            let live = with_fields(configmap(json!({"a": "1", "b": "2"})), &[("capstan", "Apply", fields)]);
            assert!(!owned_field_removed(&desired, &live), "{live}");
        }
        for live in [
            json!(null),
            json!({"metadata": {"managedFields": "x"}}),
            json!({"metadata": {"managedFields": [1, null, {"manager": 3}]}}),
            json!({"metadata": {"managedFields": [{"manager": "capstan", "operation": "Apply"}]}}),
            json!({"metadata": {"managedFields": [{"manager": "capstan", "operation": "Apply",
                "fieldsType": "FieldsV2", "fieldsV1": {"f:data": {}}}]}, "data": {}}),
        ] {
            assert!(!owned_field_removed(&desired, &live), "{live}");
        }
        // Owned paths through values of another type than the live object's.
        let live = with_fields(
            json!({"data": "text", "list": {"k": 1}, "set": 5}),
            &[(
                "capstan",
                "Apply",
                json!({"f:data": {"f:a": {}}, "f:list": {"k:{\"name\":\"a\"}": {}, "i:0": {}}, "f:set": {"v:5": {}}}),
            )],
        );
        assert!(!owned_field_removed(
            &json!({"data": "text", "list": {}, "set": 5}),
            &live
        ));
        assert!(
            owned_field_removed(&json!({"list": {}, "set": 5}), &live),
            ".data removed"
        );
        assert!(removed_owned_fields(&desired, &live, 0).is_empty());
        assert!(!owned_field_removed(&json!("desired is no object"), &json!([])));
    }

    #[test]
    fn the_kept_entry_as_text_still_says_what_was_removed() {
        let live = with_fields(
            configmap(json!({"a": "1", "b": "2"})),
            &[("capstan", "Apply", configmap_fields())],
        );
        let mut obj: kube::api::DynamicObject = serde_json::from_value(live).unwrap();
        keep_own_apply_entry(&mut obj.metadata);
        let compact = serde_json::to_value(&obj).unwrap();
        assert!(
            compact
                .pointer("/metadata/managedFields/0/fieldsV1")
                .unwrap()
                .is_string()
        );
        let desired = configmap(json!({"a": "1"}));
        assert_eq!(
            removed_owned_fields(&desired, &compact, 10),
            vec![".data.b".to_string()]
        );
        assert!(!owned_field_removed(&configmap(json!({"a": "1", "b": "2"})), &compact));
    }

    #[test]
    fn only_capstans_apply_entry_is_kept() {
        let entry = |manager: &str, operation: &str, subresource: Option<&str>| {
            let mut e = json!({"manager": manager, "operation": operation, "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {}}});
            if let Some(s) = subresource {
                e["subresource"] = json!(s);
            }
            e
        };
        let kept = |entries: Vec<Value>| {
            let mut meta: ObjectMeta = serde_json::from_value(json!({"name": "o", "managedFields": entries})).unwrap();
            keep_own_apply_entry(&mut meta);
            serde_json::to_value(&meta).unwrap().get("managedFields").cloned()
        };
        assert_eq!(
            kept(vec![
                entry("kube-controller-manager", "Update", None),
                entry("capstan", "Update", None),
                entry("capstan", "Apply", Some("status")),
                entry("capstan", "Apply", None),
                entry("kubectl", "Apply", None),
            ]),
            Some(
                json!([{"manager": "capstan", "operation": "Apply", "fieldsType": "FieldsV1",
                "fieldsV1": "{\"f:data\":{}}"}])
            ),
            "kept, with its fields as JSON text"
        );
        assert_eq!(kept(vec![entry("kubectl", "Apply", None)]), None);
        assert_eq!(kept(vec![]), None);
        let mut meta = ObjectMeta::default();
        keep_own_apply_entry(&mut meta);
        assert_eq!(meta.managed_fields, None);
    }
}
