//! Reading a kustomization file completely before Kustomize runs. Kustomize decodes it with Go's
//! `encoding/json` after converting YAML to JSON, which matches keys **in any case**
//! (`Resources:` is `resources`) and reads only the **first** YAML document. Capstan checks every
//! path a kustomization names, so it must read the file exactly as Kustomize will; rather than guess,
//! anything it does not fully understand is refused with the reason and the key's place:
//!
//! - a file that is not valid YAML, not a mapping, or holds more than one document;
//! - a key that is not one of Kustomize's fields spelled exactly (another case, a typo, a field of a
//!   newer Kustomize), at any depth where fields can hold paths or URLs;
//! - a value of the wrong type where Capstan reads paths (a mapping where a list of paths belongs);
//! - `helmChartInflationGenerator` (deprecated; it carries `helmBin` and `extraArgs`).
//!
//! Free-form maps (labels, annotations, inline Helm values, patch bodies) are not checked: nothing in
//! them is a path Kustomize reads.

use serde_json::Value;

use crate::{RenderError, manifests};

/// The shape of a value in a kustomization.
enum Shape {
    /// Anything: nothing in it is a path or URL Kustomize reads.
    Any,
    /// A string.
    Str,
    /// A list of strings.
    Strs,
    /// A mapping with exactly these keys (a subset).
    Object(&'static [(&'static str, Shape)]),
    /// A list of values of one shape.
    List(&'static Shape),
}

use Shape::{Any, List, Object, Str, Strs};

const PATCH: Shape = Object(&[("path", Str), ("patch", Str), ("target", Any), ("options", Any)]);

const GENERATOR: Shape = Object(&[
    ("name", Str),
    ("namespace", Str),
    ("behavior", Str),
    ("literals", Strs),
    ("files", Strs),
    ("envs", Strs),
    ("env", Str),
    ("options", Any),
    ("type", Str),
]);

const HELM_CHART: Shape = Object(&[
    ("name", Str),
    ("version", Str),
    ("repo", Str),
    ("releaseName", Str),
    ("namespace", Str),
    ("additionalValuesFiles", Strs),
    ("valuesFile", Str),
    ("valuesInline", Any),
    ("valuesMerge", Str),
    ("includeCRDs", Any),
    ("skipHooks", Any),
    ("apiVersions", Strs),
    ("kubeVersion", Str),
    ("nameTemplate", Str),
    ("skipTests", Any),
    ("debug", Any),
    ("devel", Any),
]);

/// Kustomize 5's `Kustomization` (and `Component`), field by field.
const KUSTOMIZATION: Shape = Object(&[
    ("apiVersion", Str),
    ("kind", Str),
    ("metadata", Any),
    ("openapi", Object(&[("path", Str), ("version", Str)])),
    ("namePrefix", Str),
    ("nameSuffix", Str),
    ("namespace", Str),
    ("commonLabels", Any),
    ("labels", Any),
    ("commonAnnotations", Any),
    ("patchesStrategicMerge", Strs),
    ("patchesJson6902", List(&PATCH)),
    ("patches", List(&PATCH)),
    ("images", Any),
    (
        "replacements",
        List(&Object(&[("path", Str), ("source", Any), ("targets", Any)])),
    ),
    ("replicas", Any),
    ("vars", Any),
    ("resources", Strs),
    ("components", Strs),
    ("crds", Strs),
    ("bases", Strs),
    ("configMapGenerator", List(&GENERATOR)),
    ("secretGenerator", List(&GENERATOR)),
    ("helmGlobals", Object(&[("chartHome", Str), ("configHome", Str)])),
    ("helmCharts", List(&HELM_CHART)),
    ("generatorOptions", Any),
    ("configurations", Strs),
    ("generators", Strs),
    ("transformers", Strs),
    ("validators", Strs),
    ("inventory", Any),
    ("buildMetadata", Strs),
    ("sortOptions", Any),
]);

/// Read a kustomization file's text as the renderer does before Kustomize runs: it is refused unless
/// Capstan understands all of it (one document, Kustomize's fields spelled exactly). For the fuzzer
/// and tools; `file` names it in the error.
pub fn check_text(text: &str, file: &str) -> Result<(), RenderError> {
    read(text, file).map(|_| ())
}

/// Parse the kustomization `text` (of the file `file`, relative to the repository root) and check
/// that Capstan understands all of it; returns the document.
pub(crate) fn read(text: &str, file: &str) -> Result<Value, RenderError> {
    let refuse = |message: String| RenderError::UnsupportedKustomization {
        file: file.to_string(),
        message,
    };
    let documents = manifests::parse_yaml_stream_raw(text).map_err(|e| refuse(format!("it is not valid YAML: {e}")))?;
    let mut documents = documents.into_iter().filter(|d| !d.is_null());
    let doc = documents.next().unwrap_or(Value::Null);
    if documents.next().is_some() {
        return Err(refuse(
            "it holds more than one YAML document (Kustomize would read only the first)".to_string(),
        ));
    }
    if !doc.is_object() {
        return Err(refuse("it is not a mapping of Kustomize's fields".to_string()));
    }
    if doc.get("helmChartInflationGenerator").is_some() {
        return Err(refuse(
            "helmChartInflationGenerator is not supported (deprecated by Kustomize; use helmCharts)".to_string(),
        ));
    }
    check(&doc, &KUSTOMIZATION, "").map_err(refuse)?;
    Ok(doc)
}

/// Check `value` against `shape`; `at` is its place (`helmCharts[0].releaseName`).
fn check(value: &Value, shape: &Shape, at: &str) -> Result<(), String> {
    let place = |at: &str| {
        if at.is_empty() {
            "the file".to_string()
        } else {
            at.to_string()
        }
    };
    match (shape, value) {
        (Any, _) | (_, Value::Null) => Ok(()),
        (Str, Value::String(_)) => Ok(()),
        (Str, _) => Err(format!("{} must be a string", place(at))),
        (Strs, Value::Array(items)) => match items.iter().position(|i| !i.is_string()) {
            None => Ok(()),
            Some(i) => Err(format!("{}[{i}] must be a string", place(at))),
        },
        (Strs, _) => Err(format!("{} must be a list of strings", place(at))),
        (List(item), Value::Array(items)) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| check(v, item, &format!("{at}[{i}]"))),
        (List(_), _) => Err(format!("{} must be a list", place(at))),
        (Object(fields), Value::Object(map)) => {
            for (key, v) in map {
                let field = |k: &str| {
                    if at.is_empty() {
                        k.to_string()
                    } else {
                        format!("{at}.{k}")
                    }
                };
                match fields.iter().find(|(name, _)| name == key) {
                    Some((_, shape)) => check(v, shape, &field(key))?,
                    None => {
                        let shown: String = key.chars().take(80).collect();
                        return Err(match fields.iter().find(|(name, _)| name.eq_ignore_ascii_case(key)) {
                            Some((name, _)) => format!(
                                "key {:?} must be spelled {:?} (Kustomize reads keys in any case; Capstan checks exact ones)",
                                field(&shown),
                                name
                            ),
                            None => format!("unknown key {:?}: Capstan cannot check what it holds", field(&shown)),
                        });
                    }
                }
            }
            Ok(())
        }
        (Object(_), _) => Err(format!("{} must be a mapping", place(at))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(text: &str) -> String {
        match read(text, "k/kustomization.yaml") {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted: {text}"),
        }
    }

    #[test]
    fn reads_every_field_of_a_real_kustomization() {
        let text = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: web\n\
resources: [../base, cm.yaml]\npatches:\n- path: p.yaml\n  target: {kind: Deployment}\n\
configMapGenerator:\n- name: c\n  files: [a=b.txt]\n  options: {disableNameSuffixHash: true}\n\
helmCharts:\n- name: redis\n  version: 1.0.0\n  releaseName: r\n  valuesInline: {Any: {Case: ok}}\n\
commonLabels: {App: x}\nimages: [{name: a, newTag: b}]\n";
        let doc = read(text, "k").unwrap();
        assert_eq!(doc["namespace"], "web");
    }

    /// Mutations of real kustomizations (bytes changed, keys re-cased, documents added): the reader
    /// never panics, and what it accepts names no key outside Kustomize's exact spelling.
    #[test]
    fn mutated_kustomizations_never_panic_and_accepted_ones_are_exact() {
        let seeds = [
            "resources: [../base, cm.yaml]\npatches:\n- path: p.yaml\nnamespace: web\n",
            "helmCharts:\n- name: redis\n  releaseName: r\n  valuesInline: {a: 1}\nhelmGlobals: {chartHome: charts}\n",
            "configMapGenerator:\n- name: c\n  files: [a=b.txt]\n  envs: [e.env]\nopenapi: {path: s.json}\n",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..6000 {
            let mut text: Vec<u8> = seeds[round % seeds.len()].as_bytes().to_vec();
            for _ in 0..(next() % 4 + 1) {
                let at = (next() as usize) % text.len();
                match next() % 5 {
                    0 => text[at] = text[at].to_ascii_uppercase(),
                    1 => text[at] = b"-:[]{}\n .#&*!|>'\"%@`"[(next() % 20) as usize],
                    2 => text.insert(at, b'\n'),
                    3 => text.extend_from_slice(b"\n---\nresources: [x]\n"),
                    _ => {
                        text.remove(at);
                        if text.is_empty() {
                            text.push(b'a');
                        }
                    }
                }
            }
            let Ok(text) = String::from_utf8(text) else { continue };
            if let Ok(doc) = read(&text, "k") {
                let Object(fields) = KUSTOMIZATION else { unreachable!() };
                for key in doc
                    .as_object()
                    .map(|m| m.keys().collect::<Vec<_>>())
                    .unwrap_or_default()
                {
                    assert!(
                        fields.iter().any(|(name, _)| name == key),
                        "accepted {key:?} in {text:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn refuses_what_it_cannot_read_as_kustomize_does() {
        assert!(refusal("resources: [a]\n---\nresources: [../../other]\n").contains("more than one YAML document"));
        assert!(refusal("Resources: [../../other-team]\n").contains("must be spelled \"resources\""));
        assert!(refusal("patches:\n- Path: ../../x\n").contains("patches[0].Path"));
        assert!(refusal("helmCharts:\n- name: a\n  ReleaseName: x\n").contains("helmCharts[0].ReleaseName"));
        assert!(refusal("helmCharts:\n- name: a\n  helmBin: /bin/sh\n").contains("unknown key"));
        assert!(refusal("helmChartInflationGenerator:\n- chartName: a\n").contains("not supported"));
        assert!(refusal("resourcez: [a]\n").contains("unknown key \"resourcez\""));
        assert!(refusal("resources: {a: b}\n").contains("resources must be a list of strings"));
        assert!(refusal("resources: [[a]]\n").contains("resources[0] must be a string"));
        assert!(refusal("- a\n").contains("not a mapping"));
        assert!(refusal("resources: [a\n").contains("not valid YAML"));
        assert!(refusal("openapi: {Path: /etc/x}\n").contains("openapi.Path"));
    }
}
