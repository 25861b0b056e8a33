//! Turning YAML and JSON text (manifest files, tool output) into Kubernetes objects: multi-document
//! parsing with line numbers, skipping empty and `null` documents, checking that every document is a
//! mapping with `apiVersion` and `kind`, and flattening `List` kinds into their items.

use serde_json::Value;
use serde_saphyr::{Budget, Options, Spanned};

use crate::RenderError;

/// Parser options: Kubernetes-style YAML 1.1 octals, one-line errors, and a budget large enough for
/// big CRDs and whole charts (a kube-prometheus-stack render is ~10^5 nodes) while refusing alias
/// bombs and absurd nesting: at most 5 million nodes and 128 levels (the API server's own
/// limit for JSON is 10,000 levels, but no Kubernetes object comes close to 128).
fn options() -> Options {
    let mut budget = Budget::default();
    budget.max_documents = 100_000;
    budget.max_nodes = 5_000_000;
    budget.max_events = 20_000_000;
    budget.max_depth = 128;
    let mut options = Options::default();
    options.budget = Some(budget);
    options.legacy_octal_numbers = true;
    options.with_snippet = false;
    options
}

/// Why one YAML value (values, a chart or lock file) cannot be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ValueError {
    /// Not YAML: the parser's message with line and column.
    #[error(transparent)]
    Syntax(#[from] serde_saphyr::Error),
    /// More than one document.
    #[error("expected one YAML document, found {0}")]
    SeveralDocuments(usize),
    /// Two keys that differ only in case, where the reader ignores case.
    #[error("the key {0:?} is given more than once (keys differing only in case)")]
    AmbiguousKey(String),
}

/// Parse one YAML value (e.g. Helm values); the error is the parser's message with line and column.
pub(crate) fn parse_yaml_value(text: &str) -> Result<Value, ValueError> {
    let docs: Vec<Value> = serde_saphyr::from_str_multiple_with_options(text, options())?;
    match docs.len() {
        0 => Ok(Value::Null),
        1 => Ok(docs.into_iter().next().unwrap_or(Value::Null)),
        n => Err(ValueError::SeveralDocuments(n)),
    }
}

/// Parse a repository file's manifests as the directory renderer does: a multi-document YAML stream,
/// or, when `json` is set, one JSON object or `List`. `origin` names the file in errors. (Public for
/// the fuzz targets in `fuzz/`.)
pub fn parse(text: &str, origin: &str, json: bool) -> Result<Vec<Value>, RenderError> {
    if json {
        parse_json(text, origin)
    } else {
        parse_yaml_stream(text, origin)
    }
}

/// Parse a multi-document YAML stream into its documents, as they are (empty ones are `null`).
pub(crate) fn parse_yaml_stream_raw(text: &str) -> Result<Vec<Value>, serde_saphyr::Error> {
    serde_saphyr::from_str_multiple_with_options(text, options())
}

/// Parse a multi-document YAML stream into objects. `origin` names the file or tool output in errors;
/// for tool output the `# Source:` comment Helm writes before each document is named too.
pub(crate) fn parse_yaml_stream(text: &str, origin: &str) -> Result<Vec<Value>, RenderError> {
    let docs: Vec<Spanned<Value>> =
        serde_saphyr::from_str_multiple_with_options(text, options()).map_err(|e| RenderError::InvalidYaml {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
    let mut objects = Vec::new();
    for (index, doc) in docs.into_iter().enumerate() {
        if doc.value.is_null() {
            continue;
        }
        let line = doc.referenced.line();
        let mut place = format!("{origin} (document {}, line {line}", index + 1);
        if let Some(source) = source_comment_before(text, line) {
            place.push_str(&format!(", from {source}"));
        }
        place.push(')');
        collect_objects(doc.value, &place, &mut objects)?;
    }
    Ok(objects)
}

/// Parse a JSON file holding one object or a `List`.
pub(crate) fn parse_json(text: &str, origin: &str) -> Result<Vec<Value>, RenderError> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let value: Value = serde_json::from_str(text).map_err(|e| RenderError::InvalidJson {
        origin: origin.to_string(),
        message: e.to_string(),
    })?;
    let mut objects = Vec::new();
    collect_objects(value, origin, &mut objects)?;
    Ok(objects)
}

/// Check that `value` is a Kubernetes object and push it, or its items if it is a list kind.
pub(crate) fn collect_objects(value: Value, place: &str, out: &mut Vec<Value>) -> Result<(), RenderError> {
    let invalid = |message: String| RenderError::InvalidManifest {
        origin: place.to_string(),
        message,
    };
    let Value::Object(map) = value else {
        return Err(invalid(format!(
            "document is {}, not a Kubernetes object (a mapping with apiVersion and kind)",
            describe(&value)
        )));
    };
    for field in ["apiVersion", "kind"] {
        match map.get(field) {
            Some(Value::String(s)) if !s.trim().is_empty() => {}
            Some(other) => return Err(invalid(format!("object has an invalid {field}: {other}"))),
            None => return Err(invalid(format!("object has no {field}"))),
        }
    }
    let is_list = map
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && map.get("items").is_some_and(Value::is_array);
    if !is_list {
        out.push(Value::Object(map));
        return Ok(());
    }
    let mut map = map;
    if let Some(Value::Array(items)) = map.remove("items") {
        for (i, item) in items.into_iter().enumerate() {
            if item.is_null() {
                continue;
            }
            collect_objects(item, &format!("{place}, item {}", i + 1), out)?;
        }
    }
    Ok(())
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

/// The template named by the last `# Source: <file>` comment at or before `line` (1-based), within
/// the same document.
fn source_comment_before(text: &str, line: u64) -> Option<String> {
    let upto = usize::try_from(line).ok()?;
    for l in text.lines().take(upto).collect::<Vec<_>>().into_iter().rev() {
        if let Some(source) = l.strip_prefix("# Source: ") {
            return Some(source.trim().to_string());
        }
        if l.trim_end() == "---" {
            break;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn skips_empty_and_null_documents_and_flattens_lists() {
        let text = "---\n---\nnull\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b}\n---\n# just a comment\n";
        let objs = parse_yaml_stream(text, "f.yaml").unwrap();
        let names: Vec<_> = objs.iter().map(|o| o["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn names_file_document_and_line() {
        let text = "apiVersion: v1\nkind: ConfigMap\n---\n\nmetadata:\n  name: x\n";
        let err = parse_yaml_stream(text, "apps/a.yaml").unwrap_err().to_string();
        assert!(err.contains("apps/a.yaml (document 2, line 5)"), "{err}");
        assert!(err.contains("no apiVersion"), "{err}");
        let err = parse_yaml_stream("- a\n- b\n", "x.yaml").unwrap_err().to_string();
        assert!(err.contains("a sequence"), "{err}");
        let err = parse_yaml_stream("a: [1,\nb: 2\n", "x.yaml").unwrap_err().to_string();
        assert!(
            err.starts_with("x.yaml: invalid YAML:") && err.contains("line"),
            "{err}"
        );
    }

    #[test]
    fn names_helm_source_comment() {
        let text = "---\n# Source: chart/templates/a.yaml\napiVersion: v1\nkind: A\n---\n# Source: chart/templates/b.yaml\nkind: B\n";
        let err = parse_yaml_stream(text, "helm").unwrap_err().to_string();
        assert!(err.contains("from chart/templates/b.yaml"), "{err}");
    }

    #[test]
    fn json_object_or_list() {
        let objs = parse_json(
            r#"{"apiVersion":"v1","kind":"ConfigMapList","items":[{"apiVersion":"v1","kind":"ConfigMap"}]}"#,
            "a.json",
        )
        .unwrap();
        assert_eq!(objs, vec![json!({"apiVersion":"v1","kind":"ConfigMap"})]);
        let err = parse_json("{\"a\": }", "a.json").unwrap_err().to_string();
        assert!(err.contains("a.json: invalid JSON") && err.contains("line 1"), "{err}");
    }

    #[test]
    fn values_parse() {
        assert_eq!(parse_yaml_value("a: 1\n").unwrap(), json!({"a": 1}));
        assert_eq!(parse_yaml_value("").unwrap(), Value::Null);
        assert!(parse_yaml_value("a: [").is_err());
    }
}
