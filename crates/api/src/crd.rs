//! CustomResourceDefinitions generated from the Rust types, and their YAML form under `deploy/crds/`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{AppProject, Application, ApplicationSet, ImageUpdater, NotificationChannel, Policy, PromotionPipeline};

/// Every CRD Capstan installs, paired with the file name it has under `deploy/crds/`.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("applications.capstan.dev.yaml", without_defaults(Application::crd())),
        (
            "applicationsets.capstan.dev.yaml",
            without_defaults(ApplicationSet::crd()),
        ),
        ("appprojects.capstan.dev.yaml", without_defaults(AppProject::crd())),
        ("policies.capstan.dev.yaml", without_defaults(Policy::crd())),
        (
            "notificationchannels.capstan.dev.yaml",
            without_defaults(NotificationChannel::crd()),
        ),
        (
            "imageupdaters.capstan.dev.yaml",
            requiring_project(without_defaults(ImageUpdater::crd())),
        ),
        (
            "promotionpipelines.capstan.dev.yaml",
            requiring_project(without_defaults(PromotionPipeline::crd())),
        ),
    ]
}

/// Remove the `default` keywords schemars derives from `#[serde(default)]`.
///
/// Defaults are applied when Capstan deserialises an object, so the API server need not store them,
/// and Kubernetes 1.20 rejects an empty-string default (it reads it back as `null`).
fn without_defaults(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn strip(value: &mut serde_json::Value, in_properties_map: bool) {
        match value {
            serde_json::Value::Object(map) => {
                if !in_properties_map {
                    map.remove("default");
                }
                for (key, child) in map.iter_mut() {
                    strip(child, !in_properties_map && key == "properties");
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| strip(v, false)),
            _ => {}
        }
    }
    let Ok(mut value) = serde_json::to_value(&crd) else {
        return crd;
    };
    strip(&mut value["spec"]["versions"], false);
    serde_json::from_value(value).unwrap_or(crd)
}

/// Make `spec.project` required by the API server. The Rust types read a missing project as empty
/// (`#[serde(default)]`), so that an object stored before the field was required is still read —
/// and refused with a message naming the field — rather than breaking the list it is in.
fn requiring_project(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let Ok(mut value) = serde_json::to_value(&crd) else {
        return crd;
    };
    if let Some(versions) = value["spec"]["versions"].as_array_mut() {
        for version in versions {
            let spec = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"];
            match spec.get_mut("required").and_then(serde_json::Value::as_array_mut) {
                Some(required) if required.iter().any(|r| r == "project") => {}
                Some(required) => required.push("project".into()),
                None => spec["required"] = serde_json::json!(["project"]),
            }
        }
    }
    serde_json::from_value(value).unwrap_or(crd)
}

/// A CRD as the YAML document written to `deploy/crds/`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::SerializeError> {
    let body = serde_saphyr::to_string(crd)?;
    Ok(format!(
        "# Generated from the Rust types by `capstan crds --out deploy/crds`; do not edit.\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `deploy/crds/` must match the types; regenerate with `make crds` after changing them.
    #[test]
    fn deploy_crds_are_up_to_date() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
        for (file, crd) in all() {
            let want = to_yaml(&crd).expect("serialise CRD");
            let have = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
            assert!(
                want == have,
                "deploy/crds/{file} is stale: run `make crds` and commit the result"
            );
        }
    }

    /// Remove from `new` every `enum` list that `old` does not have at the same place, and report
    /// where (as JSON pointers). Everything else is left for the caller to compare.
    fn drop_added_enums(new: &mut serde_json::Value, old: &serde_json::Value, at: &str, added: &mut Vec<String>) {
        match (new, old) {
            (serde_json::Value::Object(n), serde_json::Value::Object(o)) => {
                if n.contains_key("enum") && !o.contains_key("enum") {
                    assert_eq!(
                        n.get("type"),
                        Some(&serde_json::json!("string")),
                        "{at}: an enum on a non-string"
                    );
                    n.remove("enum");
                    added.push(at.to_string());
                }
                for (key, child) in n.iter_mut() {
                    if let Some(o_child) = o.get(key) {
                        drop_added_enums(child, o_child, &format!("{at}/{key}"), added);
                    }
                }
            }
            (serde_json::Value::Array(n), serde_json::Value::Array(o)) => {
                for (i, (child, o_child)) in n.iter_mut().zip(o).enumerate() {
                    drop_added_enums(child, o_child, &format!("{at}/{i}"), added);
                }
            }
            _ => {}
        }
    }

    /// Where (JSON pointers) `a` and `b` differ.
    fn differences(a: &serde_json::Value, b: &serde_json::Value, at: &str, out: &mut Vec<String>) {
        match (a, b) {
            (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
                for key in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                    match (x.get(key), y.get(key)) {
                        (Some(u), Some(v)) => differences(u, v, &format!("{at}/{key}"), out),
                        _ => out.push(format!("{at}/{key}")),
                    }
                }
            }
            (serde_json::Value::Array(x), serde_json::Value::Array(y)) if x.len() == y.len() => {
                for (i, (u, v)) in x.iter().zip(y).enumerate() {
                    differences(u, v, &format!("{at}/{i}"), out);
                }
            }
            _ if a != b => out.push(at.to_string()),
            _ => {}
        }
    }

    /// The status words became enums (`crate::status`): the CRDs may differ from those generated
    /// before that change (kept under `tests/fixtures/crds-before-status-enums/`, taken from
    /// `deploy/crds/` as it was) only by the added `enum` lists of string fields, so every object
    /// stored before still validates, and nothing else in the schema moved. Only closed words get one.
    /// Fields added since are added to the fixture too, as they are (AppProject's
    /// `destinationServiceAccounts`, the deletion budgets, `allowDeletions`; the Policy and
    /// NotificationChannel CRDs as they were introduced, the `PromotionMade` trigger).
    #[test]
    fn crds_differ_from_those_before_the_status_enums_only_by_added_enums() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/crds-before-status-enums");
        let mut added = Vec::new();
        for (file, crd) in all() {
            let text = std::fs::read_to_string(dir.join(file)).expect("the CRD as it was");
            let old: serde_json::Value = serde_saphyr::from_str(&text).expect("old CRD");
            let mut new = serde_json::to_value(&crd).expect("new CRD");
            let mut here = Vec::new();
            drop_added_enums(&mut new, &old, "", &mut here);
            let mut changed = Vec::new();
            differences(&new, &old, "", &mut changed);
            assert!(changed.is_empty(), "{file} changed beyond added enums at {changed:#?}");
            added.extend(here.into_iter().map(|at| format!("{file}{at}")));
        }
        for field in [
            "status/properties/sync/properties/status",
            "status/properties/health/properties/status",
            "status/properties/resources/items/properties/status",
        ] {
            assert!(
                added
                    .iter()
                    .any(|a| a.starts_with("applications.") && a.ends_with(field)),
                "no enum added at {field}: {added:#?}"
            );
        }
        // Open words (`Other` kept as written) are never enumerated: an older CRD must accept them.
        for field in [
            "status/properties/operationState/properties/resources/items/properties/status",
            "status/properties/conditions/items/properties/type",
        ] {
            assert!(
                !added.iter().any(|a| a.ends_with(field)),
                "an enum at the open-word field {field}"
            );
        }
    }

    #[test]
    fn writers_require_a_project() {
        for (file, crd) in all() {
            let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema");
            let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
            let required = spec["required"].as_array().cloned().unwrap_or_default();
            let writer = file.starts_with("imageupdaters") || file.starts_with("promotionpipelines");
            assert_eq!(
                required.iter().any(|r| r == "project"),
                writer,
                "{file}: spec.project required: {required:?}"
            );
            if writer {
                assert_eq!(spec["properties"]["project"]["minLength"], 1, "{file}");
            }
        }
    }

    #[test]
    fn schema_has_no_defaults_but_keeps_fields_named_like_keywords() {
        let mut crd = Application::crd();
        let yaml = serde_json::to_string(&crd).expect("json");
        assert!(yaml.contains("\"default\""), "precondition: schemars emits defaults");
        crd = without_defaults(crd);
        let json = serde_json::to_string(&crd).expect("json");
        assert!(!json.contains("\"default\""), "defaults must be stripped");
        assert!(json.contains("revisionHistoryLimit"));
    }

    #[test]
    fn application_crd_has_argo_fields_and_status_subresource() {
        let crd = all().remove(0).1;
        assert_eq!(crd.spec.group, "capstan.dev");
        let version = &crd.spec.versions[0];
        assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
        let schema = serde_json::to_value(&version.schema).expect("schema");
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
        for field in [
            "source",
            "destination",
            "project",
            "syncPolicy",
            "ignoreDifferences",
            "revisionHistoryLimit",
        ] {
            assert!(spec.get(field).is_some(), "spec.{field} missing from CRD schema");
        }
        assert!(spec["source"]["properties"].get("repoURL").is_some());
    }
}
