//! `ignoreDifferences[].managedFieldsManagers`: the fields that the named field managers own in the
//! live object's `metadata.managedFields` are ignored, on both sides, as Argo CD does (gitops-engine's
//! diff normalizer removes the managers' field set from the live and the desired object). The
//! typical use: an HPA (`kube-controller-manager`) owning a Deployment's `spec.replicas`, which
//! self-heal must then not fight. The desired object is applied without those fields too, so a sync
//! (self-heal's, or one for another change) leaves them to their manager: with server-side apply,
//! Capstan then simply does not own them.
//!
//! The owned set is a `fieldsV1` tree (see [`crate::owned`] for its path elements). [`strip`] walks it
//! against one object and removes what it owns: a leaf (`{}`), or an element the manager owns itself
//! (`.`), is removed whole; list items are found by their key (`k:`), value (`v:`) or index (`i:`)
//! in that very object, so the same set applies to the live, desired and predicted objects.

use serde_json::{Map, Value};

use crate::owned::{has_key, same};

/// The `fieldsV1` sets (as maps) of every `managedFields` entry of `live` whose manager is one of
/// `managers`.
pub fn owned_by(live: &Value, managers: &[&str]) -> Vec<Map<String, Value>> {
    let Some(entries) = live.pointer("/metadata/managedFields").and_then(Value::as_array) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|e| {
            e.get("manager")
                .and_then(Value::as_str)
                .is_some_and(|m| managers.contains(&m))
                && e.get("fieldsType")
                    .and_then(Value::as_str)
                    .is_none_or(|t| t == "FieldsV1")
        })
        .filter_map(|e| match e.get("fieldsV1")? {
            Value::Object(map) => Some(map.clone()),
            Value::String(text) => match serde_json::from_str(text) {
                Ok(Value::Object(map)) => Some(map),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// `obj` without the fields of `sets` (never its `metadata.managedFields` bookkeeping, which the
/// comparison ignores anyway).
pub fn strip(obj: &Value, sets: &[Map<String, Value>]) -> Value {
    let mut obj = obj.clone();
    for set in sets {
        strip_in(&mut obj, set);
    }
    obj
}

/// Whether an owned-set node says its element is owned whole: a leaf, or one with `.`.
fn whole(node: &Value) -> bool {
    match node {
        Value::Object(children) => children.is_empty() || children.contains_key("."),
        _ => true,
    }
}

fn strip_in(obj: &mut Value, set: &Map<String, Value>) {
    for (element, node) in set {
        let (Some(kind), Some(rest)) = (element.get(..2), element.get(2..)) else {
            continue;
        };
        match (kind, &mut *obj) {
            ("f:", Value::Object(map)) => {
                if whole(node) {
                    map.remove(rest);
                } else if let (Some(child), Value::Object(children)) = (map.get_mut(rest), node) {
                    strip_in(child, children);
                }
            }
            ("k:" | "v:" | "i:", Value::Array(items)) => {
                let index = match kind {
                    "k:" => match serde_json::from_str::<Value>(rest) {
                        Ok(Value::Object(key)) => items.iter().position(|item| has_key(item, &key, false)),
                        _ => None,
                    },
                    "v:" => serde_json::from_str::<Value>(rest)
                        .ok()
                        .and_then(|value| items.iter().position(|item| same(item, &value))),
                    _ => rest.parse::<usize>().ok().filter(|i| *i < items.len()),
                };
                let Some(index) = index else { continue };
                if whole(node) {
                    items.remove(index);
                } else if let Value::Object(children) = node {
                    strip_in(&mut items[index], children);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn live() -> Value {
        json!({"metadata": {"name": "web", "managedFields": [
            {"manager": "capstan", "operation": "Apply", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "injector", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": "{\"f:spec\":{\"f:template\":{\"f:spec\":{\"f:containers\":{\"k:{\\\"name\\\":\\\"proxy\\\"}\":{\".\":{},\"f:name\":{}},\"k:{\\\"name\\\":\\\"app\\\"}\":{\"f:env\":{}}}}}}}"}
        ]},
        "spec": {"replicas": 5, "template": {"spec": {"containers": [
            {"name": "app", "image": "a", "env": [{"name": "X", "value": "1"}]},
            {"name": "proxy", "image": "p"}]}}}})
    }

    #[test]
    fn a_managers_fields_are_removed_and_no_others() {
        let live = live();
        let hpa = owned_by(&live, &["kube-controller-manager"]);
        assert_eq!(hpa.len(), 1);
        let stripped = strip(&live, &hpa);
        assert_eq!(stripped.pointer("/spec/replicas"), None);
        assert!(stripped.pointer("/spec/template").is_some());
        let desired = json!({"spec": {"replicas": 2, "selector": {}}});
        assert_eq!(strip(&desired, &hpa), json!({"spec": {"selector": {}}}));
    }

    #[test]
    fn list_items_are_found_by_key_in_each_object() {
        let live = live();
        let injector = owned_by(&live, &["injector"]);
        let stripped = strip(&live, &injector);
        let containers = stripped.pointer("/spec/template/spec/containers").cloned();
        assert_eq!(containers, Some(json!([{"name": "app", "image": "a"}])));
        // The desired object lists the containers in another order, without the proxy.
        let desired = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "a"}]}}}});
        assert_eq!(strip(&desired, &injector), desired);
        assert!(owned_by(&live, &["nobody"]).is_empty());
        assert!(owned_by(&json!({"metadata": {"managedFields": "x"}}), &["injector"]).is_empty());
    }
}
