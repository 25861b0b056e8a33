//! Tolerant accessors over an object's JSON: every reader returns `None` (or a neutral default) for
//! absent fields and fields of the wrong type, so the health checks never panic on odd input.

use serde_json::{Map, Value};

use crate::Health;

/// The value at `path` (a sequence of object keys), if every step exists.
pub(crate) fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, key| v.get(key))
}

/// The string at `path`, if present and a string.
pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    get(v, path).and_then(Value::as_str)
}

/// The integer at `path`, if present and a number. Fractions are truncated and out-of-range values
/// saturate, so arithmetic on the result only needs to guard against overflow.
pub(crate) fn int_at(v: &Value, path: &[&str]) -> Option<i64> {
    let n = get(v, path)?.as_number()?;
    n.as_i64()
        .or_else(|| n.as_u64().map(|_| i64::MAX))
        .or_else(|| n.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
}

/// Whether the value at `path` is the boolean `true`.
pub(crate) fn is_true(v: &Value, path: &[&str]) -> bool {
    get(v, path).and_then(Value::as_bool).unwrap_or(false)
}

/// The array at `path`, or an empty slice if absent or not an array.
pub(crate) fn array_at<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    get(v, path).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// `metadata.name`, or the empty string.
pub(crate) fn name(obj: &Value) -> &str {
    str_at(obj, &["metadata", "name"]).unwrap_or("")
}

/// Whether `metadata.generation` is ahead of `status.observedGeneration` (both default to 0), i.e. the
/// controller has not yet seen the latest spec.
pub(crate) fn generation_lags(obj: &Value) -> bool {
    let generation = int_at(obj, &["metadata", "generation"]).unwrap_or(0);
    let observed = int_at(obj, &["status", "observedGeneration"]).unwrap_or(0);
    generation > observed
}

/// One entry of `status.conditions`, with absent strings read as empty.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Condition<'a> {
    pub(crate) type_: &'a str,
    pub(crate) status: &'a str,
    pub(crate) reason: &'a str,
    pub(crate) message: &'a str,
    pub(crate) last_transition_time: &'a str,
    /// Cluster API's `severity` (Error, Warning, Info) of a False condition.
    pub(crate) severity: &'a str,
    pub(crate) observed_generation: Option<i64>,
}

impl<'a> Condition<'a> {
    pub(crate) fn from_value(v: &'a Value) -> Option<Self> {
        let field = |key: &str| str_at(v, &[key]).unwrap_or("");
        Some(Condition {
            type_: str_at(v, &["type"])?,
            status: field("status"),
            reason: field("reason"),
            message: field("message"),
            last_transition_time: field("lastTransitionTime"),
            severity: field("severity"),
            observed_generation: int_at(v, &["observedGeneration"]),
        })
    }

    pub(crate) fn is_true(&self) -> bool {
        self.status == "True"
    }

    pub(crate) fn is_false(&self) -> bool {
        self.status == "False"
    }

    /// A condition whose status is `Unknown` (Kubernetes' third condition status).
    pub(crate) fn is_unknown(&self) -> bool {
        self.status == "Unknown" // vocabulary: Kubernetes condition status
    }

    /// The message, or `fallback` when it is empty.
    pub(crate) fn message_or(&self, fallback: &str) -> String {
        if self.message.is_empty() {
            fallback.to_owned()
        } else {
            self.message.to_owned()
        }
    }

    /// The message, else the reason, else `fallback`.
    pub(crate) fn describe(&self, fallback: impl FnOnce() -> String) -> String {
        if !self.message.is_empty() {
            self.message.to_owned()
        } else if !self.reason.is_empty() {
            self.reason.to_owned()
        } else {
            fallback()
        }
    }
}

/// The first condition of the given type in `status.conditions`.
pub(crate) fn condition<'a>(obj: &'a Value, type_: &str) -> Option<Condition<'a>> {
    conditions(obj).find(|c| c.type_ == type_)
}

/// Every well-formed entry of `status.conditions`.
pub(crate) fn conditions(obj: &Value) -> impl Iterator<Item = Condition<'_>> {
    array_at(obj, &["status", "conditions"])
        .iter()
        .filter_map(Condition::from_value)
}

/// A field that is present but of the wrong type (a `status` that is a string, `conditions` that are
/// not a list): the object says nothing usable there, so the rule reading it answers Unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) &'static str);

impl From<Malformed> for Health {
    fn from(m: Malformed) -> Health {
        Health::unknown(format!("{} has an unexpected type", m.0))
    }
}

/// The verdict of a rule that reads fields which may be malformed.
pub(crate) type Verdict = Result<Health, Malformed>;

/// `status` as an object: `None` when absent or `null`, [`Malformed`] when of another type.
pub(crate) fn status_object(obj: &Value) -> Result<Option<&Map<String, Value>>, Malformed> {
    match obj.get("status") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(status)) => Ok(Some(status)),
        Some(_) => Err(Malformed("status")),
    }
}

/// The well-formed entries of `status.conditions`, in order: `None` when there is no status or no
/// conditions, [`Malformed`] when `status` is not an object or `conditions` not a list. Entries that
/// are not objects or have no string `type` are skipped.
pub(crate) fn status_conditions(obj: &Value) -> Result<Option<Vec<Condition<'_>>>, Malformed> {
    let Some(status) = status_object(obj)? else {
        return Ok(None);
    };
    conditions_in(status.get("conditions"), "status.conditions")
}

/// The well-formed conditions of a list found anywhere (a Gateway listener's, a route parent's):
/// `None` when absent or `null`, [`Malformed`] (naming `what`) when not a list.
pub(crate) fn conditions_in<'a>(
    list: Option<&'a Value>,
    what: &'static str,
) -> Result<Option<Vec<Condition<'a>>>, Malformed> {
    match list {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items.iter().filter_map(Condition::from_value).collect())),
        Some(_) => Err(Malformed(what)),
    }
}

/// The first condition of type `type_` in `conditions`.
pub(crate) fn find<'c, 'a>(conditions: &'c [Condition<'a>], type_: &str) -> Option<&'c Condition<'a>> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn int_at_tolerates_odd_numbers() {
        let v = json!({"a": 3, "b": -2, "c": 2.9, "d": u64::MAX, "e": "3", "f": null});
        assert_eq!(int_at(&v, &["a"]), Some(3));
        assert_eq!(int_at(&v, &["b"]), Some(-2));
        assert_eq!(int_at(&v, &["c"]), Some(2));
        assert_eq!(int_at(&v, &["d"]), Some(i64::MAX));
        assert_eq!(int_at(&v, &["e"]), None);
        assert_eq!(int_at(&v, &["f"]), None);
        assert_eq!(int_at(&v, &["missing", "deeper"]), None);
    }

    #[test]
    fn generation_lag_defaults_to_zero() {
        assert!(generation_lags(&json!({"metadata": {"generation": 1}})));
        assert!(!generation_lags(
            &json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 2}})
        ));
        assert!(!generation_lags(&json!({})));
    }

    #[test]
    fn conditions_skip_malformed_entries() {
        let obj = json!({"status": {"conditions": [
            "junk",
            {"status": "True"},
            {"type": "Ready", "status": "False", "reason": "Boom"}
        ]}});
        let ready = condition(&obj, "Ready").expect("Ready condition");
        assert!(ready.is_false());
        assert_eq!(ready.describe(|| "fallback".into()), "Boom");
        assert_eq!(conditions(&obj).count(), 1);
        assert!(condition(&json!({"status": {"conditions": {}}}), "Ready").is_none());
    }
}
