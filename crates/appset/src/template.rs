//! `{{param}}` substitution (Argo CD's fasttemplate mode), deep merging of partial templates, and
//! rendering one parameter set into an Application.

use capstan_api::Application;
use capstan_api::application::ApplicationSpec;
use capstan_api::applicationset::ApplicationSetTemplateMeta;
use capstan_api::names::is_dns1123_subdomain;
use serde_json::Value;

use crate::error::GenerateError;
use crate::params::Params;

/// Why a string could not be substituted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubstituteError {
    /// `{{NAME}}` names a parameter the set does not have.
    Missing(String),
    /// A `{{` has no matching `}}`.
    Unclosed,
    /// `{{}}` (or only spaces between the braces).
    Empty,
}

/// Replace every `{{name}}` / `{{ name }}` in `text` by the parameter's value. Replacements are not
/// scanned again. With `strict`, a placeholder naming no parameter (or an unclosed or empty one) is an
/// error; without, it is left as written (used to pass a matrix's first child's parameters into the
/// second child before that child adds its own).
pub fn substitute(text: &str, params: &Params, strict: bool) -> Result<String, SubstituteError> {
    if !text.contains("{{") {
        return Ok(text.to_string());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            if strict {
                return Err(SubstituteError::Unclosed);
            }
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let tag = &after[..end];
        let name = tag.trim();
        match params.get(name) {
            Some(value) if !name.is_empty() => out.push_str(value),
            _ if strict && name.is_empty() => return Err(SubstituteError::Empty),
            _ if strict => return Err(SubstituteError::Missing(name.to_string())),
            _ => {
                out.push_str("{{");
                out.push_str(tag);
                out.push_str("}}");
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Whether any string in `value` contains `{{`.
pub fn has_placeholders(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains("{{"),
        Value::Array(items) => items.iter().any(has_placeholders),
        Value::Object(map) => map.values().any(has_placeholders),
        _ => false,
    }
}

/// Substitute in every string of `value` (never in keys), leaving unknown placeholders as written.
pub fn substitute_lenient(value: &mut Value, params: &Params) {
    match value {
        Value::String(s) => {
            if let Ok(new) = substitute(s, params, false) {
                *s = new;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| substitute_lenient(v, params)),
        Value::Object(map) => map.values_mut().for_each(|v| substitute_lenient(v, params)),
        _ => {}
    }
}

/// Substitute one string strictly; errors are placed at `place` and name the set by `origin`.
pub(crate) fn substitute_strict(
    text: &str,
    params: &Params,
    place: &str,
    origin: &str,
) -> Result<String, GenerateError> {
    substitute(text, params, true).map_err(|err| substitute_error(err, params, place, origin))
}

fn substitute_error(err: SubstituteError, params: &Params, place: &str, origin: &str) -> GenerateError {
    match err {
        SubstituteError::Missing(name) => GenerateError::MissingParameter {
            place: place.to_string(),
            name,
            origin: origin.to_string(),
            known: params.keys().cloned().collect(),
        },
        SubstituteError::Unclosed => GenerateError::InvalidTemplate {
            place: place.to_string(),
            message: "\"{{\" without a closing \"}}\"".into(),
        },
        SubstituteError::Empty => GenerateError::InvalidTemplate {
            place: place.to_string(),
            message: "empty placeholder \"{{}}\"".into(),
        },
    }
}

/// Substitute strictly in every string of `value`; `path` is the JSON path of `value` in the template.
fn substitute_tree(value: &mut Value, params: &Params, path: &str, origin: &str) -> Result<(), GenerateError> {
    match value {
        Value::String(s) if s.contains("{{") => {
            *s = substitute(s, params, true)
                .map_err(|err| substitute_error(err, params, &format!("template: {path}"), origin))?;
        }
        Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                substitute_tree(v, params, &format!("{path}[{i}]"), origin)?;
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                substitute_tree(v, params, &child, origin)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Merge `patch` over `base`: objects are merged key by key, recursively; a `null` in the patch
/// removes the key; any other value replaces what was there (arrays included).
pub fn deep_merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (k, v) in patch {
                if v.is_null() {
                    base.remove(&k);
                } else if let Some(existing) = base.get_mut(&k) {
                    deep_merge(existing, v);
                } else {
                    base.insert(k, v);
                }
            }
        }
        (_, Value::Null) => {}
        (base, patch) => *base = patch,
    }
}

/// Why a text is not one YAML or JSON document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum YamlError {
    /// The parser's message, on one line.
    #[error("{0}")]
    Syntax(String),
    /// More than one document.
    #[error("expected one YAML document, found {0}")]
    SeveralDocuments(usize),
}

/// Parse a YAML or JSON document (one document; an empty text is `null`).
pub(crate) fn parse_yaml(text: &str) -> Result<Value, YamlError> {
    let mut options = serde_saphyr::Options::default();
    options.legacy_octal_numbers = true;
    options.with_snippet = false;
    let docs: Vec<Value> = serde_saphyr::from_str_multiple_with_options(text, options)
        .map_err(|e| YamlError::Syntax(one_line(&e.to_string())))?;
    let mut docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    match docs.len() {
        0 => Ok(Value::Null),
        1 => Ok(docs.remove(0)),
        n => Err(YamlError::SeveralDocuments(n)),
    }
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Render one parameter set: substitute it into `template` (the ApplicationSet's template with the
/// generator's override already merged, as JSON), apply `template_patch`, and build the Application.
/// `origin` names the set in errors (`generators[0].git, file services/a/prod.yaml`).
pub(crate) fn render(
    template: &Value,
    template_patch: Option<&str>,
    params: &Params,
    default_namespace: Option<&str>,
    origin: &str,
) -> Result<Application, GenerateError> {
    let mut doc = template.clone();
    substitute_tree(&mut doc, params, "", origin)?;
    if let Some(patch) = template_patch.filter(|p| !p.trim().is_empty()) {
        let text = substitute_strict(patch, params, "templatePatch", origin)?;
        let value = parse_yaml(&text).map_err(|message| GenerateError::InvalidTemplate {
            place: "templatePatch".into(),
            message: format!("not valid YAML or JSON after substitution for {origin}: {message}"),
        })?;
        match value {
            Value::Null => {}
            Value::Object(_) => deep_merge(&mut doc, value),
            _ => {
                return Err(GenerateError::InvalidTemplate {
                    place: "templatePatch".into(),
                    message: "must be a mapping (metadata and/or spec)".into(),
                });
            }
        }
    }
    let metadata = doc.get("metadata").cloned().unwrap_or(Value::Null);
    let metadata: ApplicationSetTemplateMeta = if metadata.is_null() {
        ApplicationSetTemplateMeta::default()
    } else {
        serde_json::from_value(metadata).map_err(|e| GenerateError::InvalidTemplate {
            place: "template: metadata".into(),
            message: format!("not valid for {origin}: {e}"),
        })?
    };
    let spec: ApplicationSpec =
        serde_json::from_value(doc.get("spec").cloned().unwrap_or(Value::Null)).map_err(|e| {
            GenerateError::InvalidTemplate {
                place: "template: spec".into(),
                message: format!("not a valid Application spec for {origin}: {e}"),
            }
        })?;
    if !is_dns1123_subdomain(&metadata.name) {
        return Err(GenerateError::InvalidApplicationName {
            name: metadata.name,
            origin: origin.to_string(),
        });
    }
    let mut app = Application::new(&metadata.name, spec);
    let namespace = Some(metadata.namespace.as_str())
        .filter(|n| !n.is_empty())
        .or(default_namespace.filter(|n| !n.is_empty()));
    app.metadata.namespace = namespace.map(str::to_string);
    if !metadata.labels.is_empty() {
        app.metadata.labels = Some(metadata.labels);
    }
    if !metadata.annotations.is_empty() {
        app.metadata.annotations = Some(metadata.annotations);
    }
    if !metadata.finalizers.is_empty() {
        app.metadata.finalizers = Some(metadata.finalizers);
    }
    Ok(app)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(pairs: &[(&str, &str)]) -> Params {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn substitutes_with_and_without_spaces_and_does_not_rescan() {
        let p = params(&[("name", "a"), ("x", "{{name}}"), ("metadata.labels.env", "prod")]);
        assert_eq!(
            substitute("{{name}}-{{ metadata.labels.env }}", &p, true).unwrap(),
            "a-prod"
        );
        assert_eq!(substitute("{{x}}", &p, true).unwrap(), "{{name}}");
        assert_eq!(substitute("no braces", &p, true).unwrap(), "no braces");
    }

    #[test]
    fn strict_substitution_reports_missing_unclosed_and_empty() {
        let p = params(&[("name", "a")]);
        assert_eq!(
            substitute("{{name}}-{{ imageTag }}", &p, true),
            Err(SubstituteError::Missing("imageTag".into()))
        );
        assert_eq!(substitute("{{name", &p, true), Err(SubstituteError::Unclosed));
        assert_eq!(substitute("{{ }}", &p, true), Err(SubstituteError::Empty));
    }

    #[test]
    fn lenient_substitution_keeps_unknown_placeholders() {
        let p = params(&[("branch", "main")]);
        let mut v = json!({"git": {"revision": "{{branch}}", "files": [{"path": "{{ cluster }}/x.yaml"}]},
                           "{{branch}}": "key"});
        substitute_lenient(&mut v, &p);
        assert_eq!(v["git"]["revision"], "main");
        assert_eq!(v["git"]["files"][0]["path"], "{{ cluster }}/x.yaml");
        assert!(v.get("{{branch}}").is_some(), "keys are never substituted");
        assert_eq!(substitute("{{a", &p, false).unwrap(), "{{a");
    }

    #[test]
    fn deep_merge_merges_objects_and_replaces_the_rest() {
        let mut base = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"list": [1, 2], "k": "v"}});
        deep_merge(
            &mut base,
            json!({"metadata": {"labels": {"y": "2"}}, "spec": {"list": [3], "k": null, "n": 1}}),
        );
        assert_eq!(
            base,
            json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}, "spec": {"list": [3], "n": 1}})
        );
    }

    fn template() -> Value {
        json!({
            "metadata": {"name": "{{name}}-web", "labels": {"env": "{{env}}"},
                         "annotations": {"note": "for {{ name }}"}, "finalizers": ["capstan.dev/resources-finalizer"]},
            "spec": {"project": "default",
                     "source": {"repoURL": "https://git.example/x.git", "path": "apps/{{name}}"},
                     "destination": {"server": "{{server}}", "namespace": "web"}}
        })
    }

    #[test]
    fn render_substitutes_metadata_and_spec() {
        let p = params(&[("name", "staging"), ("env", "stage"), ("server", "https://s")]);
        let app = render(&template(), None, &p, Some("capstan"), "element 0").unwrap();
        assert_eq!(app.metadata.name.as_deref(), Some("staging-web"));
        assert_eq!(app.metadata.namespace.as_deref(), Some("capstan"));
        assert_eq!(app.metadata.labels.as_ref().unwrap()["env"], "stage");
        assert_eq!(app.metadata.annotations.as_ref().unwrap()["note"], "for staging");
        assert_eq!(
            app.metadata.finalizers.as_deref(),
            Some(&["capstan.dev/resources-finalizer".to_string()][..])
        );
        assert_eq!(app.spec.source.path, "apps/staging");
        assert_eq!(app.spec.destination.server, "https://s");
        assert!(app.metadata.owner_references.is_none());
    }

    #[test]
    fn render_passes_depends_on_through_with_substitution() {
        let mut t = template();
        t["spec"]["dependsOn"] = json!([{"name": "{{name}}-db"}]);
        let p = params(&[("name", "staging"), ("env", "stage"), ("server", "https://s")]);
        let app = render(&t, None, &p, Some("capstan"), "element 0").unwrap();
        let names: Vec<&str> = app.spec.depends_on.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["staging-db"]);
    }

    #[test]
    fn render_reports_the_missing_parameter_and_where() {
        let p = params(&[("name", "staging"), ("env", "stage")]);
        let err = render(&template(), None, &p, None, "generators[0].list, element 0").unwrap_err();
        assert_eq!(err.reason(), "MissingParameter");
        let msg = err.to_string();
        assert!(msg.contains("template: spec.destination.server"), "{msg}");
        assert!(msg.contains("parameter \"server\" is not defined"), "{msg}");
        assert!(msg.contains("generators[0].list, element 0"), "{msg}");
        assert!(msg.contains("known: env, name"), "{msg}");
    }

    #[test]
    fn template_patch_is_substituted_and_merged() {
        let p = params(&[("name", "a"), ("env", "prod"), ("server", "https://s")]);
        let patch =
            "metadata:\n  labels: {tier: \"{{env}}-tier\"}\nspec:\n  syncPolicy:\n    automated: {prune: true}\n";
        let app = render(&template(), Some(patch), &p, None, "x").unwrap();
        let labels = app.metadata.labels.unwrap();
        assert_eq!(labels["tier"], "prod-tier");
        assert_eq!(labels["env"], "prod");
        assert!(app.spec.sync_policy.unwrap().automated.unwrap().prune);
        assert!(app.metadata.namespace.is_none());

        let err = render(&template(), Some("spec: [unclosed"), &p, None, "x").unwrap_err();
        assert_eq!(err.reason(), "InvalidTemplate");
        assert!(
            err.to_string().starts_with("templatePatch: not valid YAML or JSON"),
            "{err}"
        );
    }

    #[test]
    fn render_rejects_names_that_are_not_dns_subdomains() {
        let p = params(&[("name", "Bad_Name"), ("env", "e"), ("server", "s")]);
        let err = render(&template(), None, &p, None, "generators[0].list, element 3").unwrap_err();
        assert_eq!(err.reason(), "InvalidApplicationName");
        assert!(err.to_string().contains("\"Bad_Name-web\""), "{err}");
        assert!(err.to_string().contains("element 3"), "{err}");
    }
}
