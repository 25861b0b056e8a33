//! Parameter sets: flat string maps, and the helpers generators use to build them (flattening JSON,
//! path parameters, name normalisation).

use std::collections::BTreeMap;

use serde_json::Value;

/// One parameter set: flat keys (`metadata.labels.env`, `path[0]`) to string values.
pub type Params = BTreeMap<String, String>;

/// Flatten `value` into `out` with dotted keys under `prefix`: objects give `a.b`, arrays `a.0`,
/// strings are kept, other scalars stringified (`true`, `3`, `1.5`), `null` becomes the empty string.
/// Empty objects and arrays give no key.
pub fn flatten_into(prefix: &str, value: &Value, out: &mut Params) {
    let join = |key: &str| {
        if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}.{key}")
        }
    };
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                flatten_into(&join(k), v, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten_into(&join(&i.to_string()), v, out);
            }
        }
        Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        Value::Null => {
            out.insert(prefix.to_string(), String::new());
        }
        Value::Bool(b) => {
            out.insert(prefix.to_string(), b.to_string());
        }
        Value::Number(n) => {
            out.insert(prefix.to_string(), n.to_string());
        }
    }
}

/// Flatten a JSON object into a new parameter set.
pub fn flatten(value: &Value) -> Params {
    let mut out = Params::new();
    flatten_into("", value, &mut out);
    out
}

/// Argo CD's `SanitizeName`: lowercase, every character other than `a-z 0-9 - .` replaced by `-`,
/// at most 253 characters, leading and trailing `-`/`.` removed.
pub fn normalize_name(name: &str) -> String {
    let mapped: String = name
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(253)
        .collect();
    mapped.trim_matches(|c| c == '-' || c == '.').to_string()
}

/// The last segment of a `/`-separated path (`.` for the repository root).
pub fn basename(path: &str) -> &str {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some((_, last)) => last,
        None if trimmed.is_empty() => ".",
        None => trimmed,
    }
}

/// The directory of a `/`-separated file path (`.` for a file at the root).
pub fn dirname(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some((dir, _)) if !dir.is_empty() => dir,
        _ => ".",
    }
}

/// The name of parameter `key` under an optional prefix (`PREFIX.key`).
pub fn prefixed(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// The parameters describing directory `dir` (relative, `/`-separated): `path`, `path.basename`,
/// `path.basenameNormalized` and `path[N]` per segment, under `prefix`.
pub fn insert_path_params(prefix: &str, dir: &str, out: &mut Params) {
    let path = prefixed(prefix, "path");
    let base = basename(dir);
    out.insert(format!("{path}.basename"), base.to_string());
    out.insert(format!("{path}.basenameNormalized"), normalize_name(base));
    for (i, segment) in dir.split('/').enumerate() {
        if !segment.is_empty() {
            out.insert(format!("{path}[{i}]"), segment.to_string());
        }
    }
    out.insert(path, dir.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flattening_uses_dots_for_objects_and_indexes_for_arrays() {
        let p = flatten(&json!({
            "cluster": "a",
            "replicas": 3,
            "enabled": true,
            "ratio": 1.5,
            "none": null,
            "image": {"repo": "nginx", "tags": ["1.0", "2.0"]},
            "empty": {}
        }));
        assert_eq!(p["cluster"], "a");
        assert_eq!(p["replicas"], "3");
        assert_eq!(p["enabled"], "true");
        assert_eq!(p["ratio"], "1.5");
        assert_eq!(p["none"], "");
        assert_eq!(p["image.repo"], "nginx");
        assert_eq!(p["image.tags.0"], "1.0");
        assert_eq!(p["image.tags.1"], "2.0");
        assert!(!p.contains_key("empty"));
        assert!(!p.contains_key("image"));
    }

    #[test]
    fn names_are_normalized_like_argo() {
        assert_eq!(normalize_name("Prod_Cluster 1"), "prod-cluster-1");
        assert_eq!(normalize_name("-a.b-"), "a.b");
        assert_eq!(normalize_name("in-cluster"), "in-cluster");
        assert_eq!(normalize_name(&"x".repeat(300)).len(), 253);
    }

    #[test]
    fn path_params_have_basename_and_segments() {
        let mut p = Params::new();
        insert_path_params("", "services/web_App", &mut p);
        assert_eq!(p["path"], "services/web_App");
        assert_eq!(p["path.basename"], "web_App");
        assert_eq!(p["path.basenameNormalized"], "web-app");
        assert_eq!(p["path[0]"], "services");
        assert_eq!(p["path[1]"], "web_App");
        let mut q = Params::new();
        insert_path_params("svc", "apps/x", &mut q);
        assert_eq!(q["svc.path"], "apps/x");
        assert_eq!(q["svc.path[1]"], "x");
        assert!(!q.contains_key("path"));
    }

    #[test]
    fn dirname_and_basename_of_root_files() {
        assert_eq!(dirname("config.yaml"), ".");
        assert_eq!(dirname("a/b/c.yaml"), "a/b");
        assert_eq!(basename("."), ".");
        assert_eq!(basename("a/b"), "b");
    }
}
