//! Secret objects never leave Capstan whole: every value of a Secret's `data` and `stringData` is replaced
//! before an object is answered, also inside diffs.

use serde_json::Value;

/// What a redacted value becomes.
pub const REDACTED: &str = "<redacted>";
/// What a redacted value that differs from the other side of a diff becomes.
pub const REDACTED_CHANGED: &str = "<redacted, changed>";

fn is_secret(obj: &Value) -> bool {
    obj.get("kind").and_then(Value::as_str) == Some("Secret")
        && obj.get("apiVersion").and_then(Value::as_str).is_none_or(|v| v == "v1")
}

/// Redact `obj` in place if it is a Secret.
pub fn redact(obj: &mut Value) {
    if !is_secret(obj) {
        return;
    }
    for field in ["data", "stringData"] {
        if let Some(Value::Object(map)) = obj.get_mut(field) {
            for v in map.values_mut() {
                *v = Value::String(REDACTED.into());
            }
        }
    }
    // The last-applied annotation and managed fields would repeat the values.
    if let Some(Value::Object(ann)) = obj.pointer_mut("/metadata/annotations") {
        ann.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Redact the two sides of a diff of one object, keeping visible which keys changed.
pub fn redact_pair(live: &mut Option<Value>, desired: &mut Option<Value>) {
    let secret = live.as_ref().is_some_and(is_secret) || desired.as_ref().is_some_and(is_secret);
    if !secret {
        return;
    }
    for field in ["data", "stringData"] {
        let live_map = live.as_ref().and_then(|l| l.get(field)).cloned();
        if let Some(Value::Object(map)) = desired.as_mut().and_then(|d| d.get_mut(field)) {
            for (k, v) in map.iter_mut() {
                let same = live_map.as_ref().and_then(|m| m.get(k)) == Some(v);
                *v = Value::String(if same { REDACTED } else { REDACTED_CHANGED }.into());
            }
        }
    }
    for side in [live, desired] {
        if let Some(obj) = side.as_mut() {
            for field in ["data", "stringData"] {
                if let Some(Value::Object(map)) = obj.get_mut(field) {
                    for v in map.values_mut() {
                        if v.as_str() != Some(REDACTED_CHANGED) {
                            *v = Value::String(REDACTED.into());
                        }
                    }
                }
            }
            if let Some(Value::Object(ann)) = obj.pointer_mut("/metadata/annotations") {
                ann.remove("kubectl.kubernetes.io/last-applied-configuration");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_values_are_replaced_and_other_kinds_untouched() {
        let mut s = json!({"apiVersion": "v1", "kind": "Secret", "data": {"p": "c2VjcmV0"}, "stringData": {"q": "x"},
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{\"p\":\"c2VjcmV0\"}}"}}});
        redact(&mut s);
        let text = s.to_string();
        assert!(!text.contains("c2VjcmV0") && !text.contains("\"x\""), "{text}");
        assert_eq!(s["data"]["p"], REDACTED);
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"p": "plain"}});
        redact(&mut cm);
        assert_eq!(cm["data"]["p"], "plain");
    }

    #[test]
    fn a_redacted_diff_still_shows_which_keys_changed() {
        let mut live = Some(json!({"apiVersion": "v1", "kind": "Secret", "data": {"a": "MQ==", "b": "Mg=="}}));
        let mut desired =
            Some(json!({"apiVersion": "v1", "kind": "Secret", "data": {"a": "MQ==", "b": "Mw==", "c": "NA=="}}));
        redact_pair(&mut live, &mut desired);
        let (l, d) = (live.unwrap(), desired.unwrap());
        assert_eq!(d["data"]["a"], REDACTED);
        assert_eq!(d["data"]["b"], REDACTED_CHANGED);
        assert_eq!(d["data"]["c"], REDACTED_CHANGED);
        assert_eq!(l["data"]["b"], REDACTED);
        assert!(!format!("{l}{d}").contains("=="));
    }
}
