//! CustomResourceDefinitions generated from the Rust types, and their YAML form under `deploy/crds/`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{AppProject, Application, ApplicationSet, ImageUpdater, PromotionPipeline};

/// Every CRD Capstan installs, paired with the file name it has under `deploy/crds/`.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("applications.capstan.dev.yaml", without_defaults(Application::crd())),
        (
            "applicationsets.capstan.dev.yaml",
            without_defaults(ApplicationSet::crd()),
        ),
        ("appprojects.capstan.dev.yaml", without_defaults(AppProject::crd())),
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
