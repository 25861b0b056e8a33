//! Redaction by value. Checking every place a secret could leak (a tool's error quoting a decrypted
//! value file, a webhook answer, a log line) has the same weakness as checking every tool argument:
//! the place nobody listed. So every secret value this process learns — each value SOPS decrypts,
//! each value read from a secret store — is [`register`]ed here, and whatever leaves the process
//! (status, events, API answers, logs) goes through [`scrub`] or [`scrub_json`], which replace any
//! registered value, and its standard and URL-safe base64, with `***`.
//!
//! Secret *objects* are redacted by shape as well ([`objects`]): every value of a Secret's `data`
//! and `stringData`, in answers and on both sides of a diff.
//!
//! Values shorter than [`MIN_LEN`] are not registered: scrubbing `true` or `80` from every message
//! would garble them, and such values are not secrets. At most [`MAX_VALUES`] values are kept (the
//! oldest go first).

pub mod objects;

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock, RwLock};

use aho_corasick::AhoCorasick;
use base64::Engine;

/// Shortest value that is registered.
pub const MIN_LEN: usize = 6;
/// Most values kept.
pub const MAX_VALUES: usize = 20_000;
/// What replaces a secret.
pub const MASK: &str = "***";

#[derive(Default)]
struct Registry {
    values: VecDeque<String>,
    matcher: Option<Arc<AhoCorasick>>,
}

fn registry() -> &'static RwLock<Registry> {
    static REGISTRY: OnceLock<RwLock<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// Remember `value` (and its base64 forms) as secret: from now on it is scrubbed.
pub fn register(value: &str) {
    let value = value.trim();
    if value.len() < MIN_LEN {
        return;
    }
    let forms = [
        value.to_string(),
        base64::engine::general_purpose::STANDARD.encode(value),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value),
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(value),
    ];
    let mut registry = registry().write().unwrap_or_else(|e| e.into_inner());
    if registry.values.iter().any(|v| v == value) {
        return;
    }
    for form in forms {
        if !registry.values.contains(&form) {
            registry.values.push_back(form);
        }
    }
    while registry.values.len() > MAX_VALUES {
        registry.values.pop_front();
    }
    // Longest first, so a value that contains another is replaced whole.
    let mut patterns: Vec<&String> = registry.values.iter().collect();
    patterns.sort_by_key(|p| std::cmp::Reverse(p.len()));
    registry.matcher = AhoCorasick::builder()
        .match_kind(aho_corasick::MatchKind::LeftmostLongest)
        .build(patterns)
        .ok()
        .map(Arc::new);
}

fn matcher() -> Option<Arc<AhoCorasick>> {
    registry().read().unwrap_or_else(|e| e.into_inner()).matcher.clone()
}

/// `text` with every registered value replaced by [`MASK`].
pub fn scrub(text: &str) -> String {
    match matcher() {
        Some(m) if m.is_match(text) => m.replace_all(text, &vec![MASK; m.patterns_len()]),
        _ => text.to_string(),
    }
}

/// Whether `text` holds a registered value.
pub fn holds_secret(text: &str) -> bool {
    matcher().is_some_and(|m| m.is_match(text))
}

/// Scrub every string (and object key) of `value` in place; whether anything was replaced.
pub fn scrub_json(value: &mut serde_json::Value) -> bool {
    let Some(m) = matcher() else { return false };
    scrub_value(&m, value)
}

/// `value` with every registered value scrubbed from its serialised form (a status, an answer),
/// or `value` itself when it holds none (or does not round-trip).
pub fn scrub_serde<T: serde::Serialize + serde::de::DeserializeOwned>(value: T) -> T {
    let Ok(mut json) = serde_json::to_value(&value) else {
        return value;
    };
    if !scrub_json(&mut json) {
        return value;
    }
    serde_json::from_value(json).unwrap_or(value)
}

fn scrub_value(m: &AhoCorasick, value: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    let mask = || vec![MASK; m.patterns_len()];
    match value {
        Value::String(s) if m.is_match(s.as_str()) => {
            *s = m.replace_all(s, &mask());
            true
        }
        Value::Array(items) => items.iter_mut().fold(false, |changed, v| scrub_value(m, v) | changed),
        Value::Object(map) => {
            if map.keys().any(|k| m.is_match(k.as_str())) {
                for (k, mut v) in std::mem::take(map) {
                    scrub_value(m, &mut v);
                    map.insert(m.replace_all(&k, &mask()), v);
                }
                true
            } else {
                map.values_mut().fold(false, |changed, v| scrub_value(m, v) | changed)
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_values_and_their_base64_are_scrubbed() {
        register("s3cr3t-value-A1");
        let b64 = base64::engine::general_purpose::STANDARD.encode("s3cr3t-value-A1");
        assert_eq!(
            scrub(&format!("helm: line 3: s3cr3t-value-A1 is not a map; data: {b64}")),
            "helm: line 3: *** is not a map; data: ***"
        );
        let mut json = serde_json::json!({"message": "x s3cr3t-value-A1 y", "list": [b64], "s3cr3t-value-A1": 1});
        scrub_json(&mut json);
        assert_eq!(
            json,
            serde_json::json!({"message": "x *** y", "list": ["***"], "***": 1})
        );
        // Short values are not secrets worth garbling messages for.
        register("true");
        assert_eq!(scrub("true"), "true");
    }
}
