//! Kubernetes objects as CEL values.
//!
//! Written here rather than with `cel::to_value` because that serialiser reads every JSON integer
//! as an unsigned one, and Kubernetes' CEL reads them as `int` (`object.spec.replicas >= 2` must
//! compare an `int` with an `int`). Map keys stay strings, as in the object.

use std::collections::HashMap;
use std::sync::Arc;

use cel::Value;
use cel::objects::{Key, Map};
use serde_json::Value as Json;

/// `json` as a CEL value: integers that fit are `int`, larger ones `uint`, other numbers `double`.
pub fn from_json(json: &Json) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::String(Arc::new(s.clone())),
        Json::Array(items) => Value::List(Arc::new(items.iter().map(from_json).collect())),
        Json::Object(fields) => {
            let map: HashMap<Key, Value> = fields
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), from_json(v)))
                .collect();
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// An optional object (`oldObject` of a create, `object` of a delete) as CEL's `null` when absent.
pub fn from_optional(json: Option<&Json>) -> Value {
    json.map_or(Value::Null, from_json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_ints_and_keys_stay_strings() {
        let v = from_json(&serde_json::json!({"replicas": 3, "big": u64::MAX, "ratio": 0.5, "tags": ["a"]}));
        let Value::Map(map) = v else { panic!("a map") };
        assert_eq!(
            map.map.get(&Key::String(Arc::new("replicas".into()))),
            Some(&Value::Int(3))
        );
        assert_eq!(
            map.map.get(&Key::String(Arc::new("big".into()))),
            Some(&Value::UInt(u64::MAX))
        );
        assert_eq!(
            map.map.get(&Key::String(Arc::new("ratio".into()))),
            Some(&Value::Float(0.5))
        );
    }
}
