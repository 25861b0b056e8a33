//! The RFC 7386 merge patch between two versions of an object's part (a status), so a writer sends
//! only what changed.

use serde_json::Value;

/// The RFC 7386 merge patch that turns `old` into `new`: changed keys, `null` for removed keys,
/// arrays and scalars replaced whole.
///
/// Hand-written because the maintained JSON patch crates create RFC 6902 patches (index-based array
/// operations that break when the stored object moved on), not merge patches.
pub fn merge_patch(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = serde_json::Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) if ov == nv => {}
                    Some(ov) if ov.is_object() && nv.is_object() => {
                        patch.insert(k.clone(), merge_patch(ov, nv));
                    }
                    _ => {
                        patch.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                patch.insert(k.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        (_, n) => n.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patches_carry_only_changes_and_null_removed_keys() {
        let old = json!({"a": 1, "b": {"c": 1, "d": 2}, "e": [1, 2], "gone": true});
        let new = json!({"a": 1, "b": {"c": 1, "d": 3}, "e": [1], "f": "x"});
        assert_eq!(
            merge_patch(&old, &new),
            json!({"b": {"d": 3}, "e": [1], "f": "x", "gone": null})
        );
        assert_eq!(merge_patch(&json!(null), &json!({"a": 1})), json!({"a": 1}));
        assert_eq!(merge_patch(&old, &old), json!({}));
    }
}
