//! The Application a set wants: its template's result with the owner reference, the set's label and
//! (under `RollingSync`) no automated sync, and whether a stored Application differs from it in what
//! the set manages.

use std::collections::BTreeMap;

use capstan_api::{Application, ApplicationSet};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::*;

/// What the controller applies for one generated Application.
pub(super) struct Desired {
    pub(super) body: Value,
    pub(super) spec: Value,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) annotations: BTreeMap<String, String>,
    pub(super) finalizers: Vec<String>,
    pub(super) owner_uid: String,
}

impl Desired {
    pub(super) fn new(app: &Application, set: &ApplicationSet, rolling: bool) -> Desired {
        let mut spec = app.spec.clone();
        if rolling && let Some(policy) = spec.sync_policy.as_mut() {
            // The rollout drives syncs.
            policy.automated = None;
        }
        let spec = serde_json::to_value(&spec).unwrap_or(Value::Null);
        let mut labels = app.metadata.labels.clone().unwrap_or_default();
        labels.insert(APPLICATIONSET_LABEL.into(), label_value(&set.name_any()));
        let mut annotations = app.metadata.annotations.clone().unwrap_or_default();
        // A template cannot request operations or forge the controller's records.
        annotations.retain(|k, _| !capstan_api::labels::APPLICATION_CONTROL_ANNOTATIONS.contains(&k.as_str()));
        let finalizers = app.metadata.finalizers.clone().unwrap_or_default();
        let owner_uid = set.uid().unwrap_or_default();
        let mut metadata = json!({
            "name": app.name_any(),
            "namespace": set.namespace(),
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": format!("{}/{}", capstan_api::GROUP, capstan_api::VERSION),
                "kind": "ApplicationSet",
                "name": set.name_any(),
                "uid": owner_uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        });
        if !annotations.is_empty() {
            metadata["annotations"] = json!(annotations);
        }
        if !finalizers.is_empty() {
            metadata["finalizers"] = json!(finalizers);
        }
        let body = json!({
            "apiVersion": format!("{}/{}", capstan_api::GROUP, capstan_api::VERSION),
            "kind": "Application",
            "metadata": metadata,
            "spec": spec,
        });
        Desired {
            body,
            spec,
            labels,
            annotations,
            finalizers,
            owner_uid,
        }
    }

    /// Whether applying would change `live`: its spec differs, a label, annotation or finalizer of the
    /// template is missing, or one the controller applied before is no longer in the template.
    pub(super) fn differs(&self, live: &Application) -> bool {
        if serde_json::to_value(&live.spec).unwrap_or(Value::Null) != self.spec {
            return true;
        }
        let live_labels = live.labels();
        if self.labels.iter().any(|(k, v)| live_labels.get(k) != Some(v)) {
            return true;
        }
        let live_annotations = live.annotations();
        if self.annotations.iter().any(|(k, v)| live_annotations.get(k) != Some(v)) {
            return true;
        }
        if self.finalizers.iter().any(|f| !live.finalizers().contains(f)) {
            return true;
        }
        if !live
            .owner_references()
            .iter()
            .any(|o| o.uid == self.owner_uid && o.controller == Some(true))
        {
            return true;
        }
        let stale = |section: &str, want: &dyn Fn(&str) -> bool| managed_keys(live, section).iter().any(|k| !want(k));
        stale("f:labels", &|k| self.labels.contains_key(k))
            || stale("f:annotations", &|k| self.annotations.contains_key(k))
            || stale("f:finalizers", &|k| self.finalizers.iter().any(|f| f == k))
    }
}

/// Keys of `metadata.<section>` that the controller's field manager owns on `app` (per managedFields).
pub(super) fn managed_keys(app: &Application, section: &str) -> Vec<String> {
    let Some(entries) = &app.metadata.managed_fields else {
        return Vec::new();
    };
    entries
        .iter()
        // The `Update` entry of a create not yet adopted (see `adopt_fields`) counts too.
        .filter(|e| {
            e.manager.as_deref() == Some(FIELD_MANAGER)
                && (e.operation.as_deref() == Some("Apply")
                    || (e.operation.as_deref() == Some("Update") && e.subresource.is_none()))
        })
        .filter_map(|e| e.fields_v1.as_ref())
        .filter_map(|f| {
            f.0.get("f:metadata")
                .and_then(|m| m.get(section))
                .and_then(Value::as_object)
        })
        .flat_map(|m| m.keys().cloned().collect::<Vec<_>>())
        .filter_map(|k| {
            if let Some(key) = k.strip_prefix("f:") {
                Some(key.to_string())
            } else {
                k.strip_prefix("v:")
                    .and_then(|v| serde_json::from_str::<String>(v).ok())
            }
        })
        .collect()
}

/// A label value naming the set (label values are limited to 63 characters).
pub(super) fn label_value(name: &str) -> String {
    let mut v: String = name.chars().take(63).collect();
    while v.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        v.pop();
    }
    v
}

pub(super) fn is_owned(app: &Application, uid: &str) -> bool {
    !uid.is_empty() && app.owner_references().iter().any(|o| o.uid == uid)
}

#[cfg(test)]
mod tests {

    use capstan_api::labels::RESOURCES_FINALIZER;

    use serde_json::json;

    use super::*;

    use crate::controller::tests::{BASE, generated, set};

    #[test]
    fn desired_application_is_owned_labelled_and_loses_automated_under_rolling_sync() {
        let s = set(BASE);
        let app = generated(&s);
        let d = Desired::new(&app, &s, false);
        assert_eq!(d.body.pointer("/metadata/ownerReferences/0/uid"), Some(&json!("1234")));
        assert_eq!(
            d.body.pointer("/metadata/ownerReferences/0/controller"),
            Some(&json!(true))
        );
        assert_eq!(
            d.body.pointer("/metadata/labels/capstan.dev~1applicationset"),
            Some(&json!("web"))
        );
        assert_eq!(
            d.body.pointer("/metadata/finalizers/0"),
            Some(&json!(RESOURCES_FINALIZER))
        );
        assert!(d.body.pointer("/spec/syncPolicy/automated").is_some());
        assert!(d.body.pointer("/status").is_none());
        let rolling = Desired::new(&app, &s, true);
        assert!(rolling.body.pointer("/spec/syncPolicy/automated").is_none());
    }

    #[test]
    fn a_template_cannot_request_operations_or_forge_records() {
        let s = set(BASE);
        let mut app = generated(&s);
        let annotations = app.metadata.annotations.get_or_insert_default();
        for key in capstan_api::labels::APPLICATION_CONTROL_ANNOTATIONS {
            annotations.insert(key.into(), r#"{"sync":{"syncOptions":["Force=true"]}}"#.into());
        }
        annotations.insert("team.example.com/owner".into(), "web".into());
        let d = Desired::new(&app, &s, false);
        let kept = d.body.pointer("/metadata/annotations").cloned().unwrap_or_default();
        assert_eq!(kept, json!({"team.example.com/owner": "web"}), "{kept}");
    }

    #[test]
    fn differs_ignores_what_others_own_and_sees_template_changes() {
        let s = set(BASE);
        let app = generated(&s);
        let d = Desired::new(&app, &s, false);
        let mut live: Application = serde_json::from_value(d.body.clone()).expect("live");
        assert!(!d.differs(&live));
        // Others' annotations, finalizers and status do not count.
        live.metadata
            .annotations
            .get_or_insert_default()
            .insert(OPERATION_ANNOTATION.into(), "{}".into());
        live.metadata
            .finalizers
            .get_or_insert_default()
            .push("example.com/other".into());
        live.status = Some(Default::default());
        assert!(!d.differs(&live));
        // A template change does.
        let mut changed = live.clone();
        changed.spec.source.path = "elsewhere".into();
        assert!(d.differs(&changed));
        // So does a label the controller applied before and the template no longer has.
        let mut stale = live.clone();
        stale
            .metadata
            .labels
            .get_or_insert_default()
            .insert("old".into(), "1".into());
        assert!(!d.differs(&stale), "not ours: kept");
        stale.metadata.managed_fields = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
                manager: Some(FIELD_MANAGER.into()),
                operation: Some("Apply".into()),
                fields_v1: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(json!({
                    "f:metadata": {"f:labels": {"f:old": {}, "f:team": {}}, "f:finalizers": {"v:\"capstan.dev/resources-finalizer\"": {}}}
                }))),
                ..Default::default()
            },
        ]);
        assert!(d.differs(&stale), "ours and no longer in the template: removed");
    }

    #[test]
    fn label_values_fit_the_limit() {
        assert_eq!(label_value("web"), "web");
        let long = format!("{}-x", "a".repeat(62));
        assert_eq!(label_value(&long).len(), 62);
    }
}
