//! The `ApplicationSet` resource: generators that produce parameter sets, and a template that turns
//! each set into an Application (Argo CD's `ApplicationSet`, same field names).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::application::{ApplicationSpec, preserve_unknown_object};
use crate::status::{ApplicationSetConditionType, HealthCode, RolloutStatus, SyncCode};

/// An ApplicationSet: one template fanned out over the parameter sets its generators produce.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "ApplicationSet",
    plural = "applicationsets",
    shortname = "appset",
    shortname = "appsets",
    namespaced,
    status = "ApplicationSetStatus",
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"ResourcesUpToDate\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetSpec {
    /// Producers of parameter sets; every set of every generator becomes one Application.
    pub generators: Vec<ApplicationSetGenerator>,
    /// The Application every parameter set is substituted into (`{{param}}` in any string).
    pub template: ApplicationSetTemplate,
    /// A YAML/JSON string, substituted like the template, merged over the rendered template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_patch: Option<String>,
    /// What the controller may do to the Applications it generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_policy: Option<ApplicationSetSyncPolicy>,
    /// How generated Applications are synced (default: each by its own sync policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<ApplicationSetStrategy>,
}

/// The Application template: metadata and spec, with `{{param}}` placeholders in any string.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetTemplate {
    /// Name, labels, annotations and finalizers of the generated Application.
    #[serde(default)]
    pub metadata: ApplicationSetTemplateMeta,
    /// The generated Application's spec.
    pub spec: ApplicationSpec,
}

/// The metadata part of a template.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetTemplateMeta {
    /// Name of the generated Application (must be unique across the set).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace (default: the ApplicationSet's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Labels (RollingSync steps select on these).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Finalizers (e.g. `capstan.dev/resources-finalizer`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
}

/// One generator: exactly one of its fields is set.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetGenerator {
    /// A literal list of parameter sets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<ListGenerator>,
    /// One parameter set per registered cluster matching a label selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<ClusterGenerator>,
    /// Directories or files of a Git repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitGenerator>,
    /// The cartesian product of two child generators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix: Option<MatrixGenerator>,
    /// Child generators' sets merged on `mergeKeys`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<MergeGenerator>,
    /// Keep only the parameter sets matching this selector (on the flattened parameters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// `list`: literal parameter sets.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListGenerator {
    /// Each element is one parameter set (nested objects are flattened to `a.b` keys).
    #[serde(default)]
    #[schemars(schema_with = "preserve_unknown_array")]
    pub elements: Vec<serde_json::Value>,
    /// A partial template merged over the ApplicationSet's for this generator's Applications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub template: Option<serde_json::Value>,
}

/// `clusters`: registered clusters (and `in-cluster`) whose labels match.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterGenerator {
    /// Which clusters (empty: all, including `in-cluster`; non-empty never matches `in-cluster`,
    /// which has no labels, unless it matches with none).
    #[serde(default)]
    pub selector: LabelSelector,
    /// Extra parameters `values.KEY` (themselves substituted with the cluster's parameters).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, String>,
    /// A partial template merged over the ApplicationSet's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub template: Option<serde_json::Value>,
}

/// `git`: directories or files of a repository at a revision.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitGenerator {
    /// Repository URL (same transports and credentials as Applications).
    #[serde(rename = "repoURL")]
    pub repo_url: String,
    /// Branch, tag or commit (default `HEAD`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revision: String,
    /// Directory globs: one parameter set per matching directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub directories: Vec<GitDirectoryItem>,
    /// File globs: one parameter set per matching JSON/YAML file (or per element of a list file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<GitFileItem>,
    /// Extra parameters `values.KEY`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, String>,
    /// Prefix for the `path` parameters (`{{PREFIX.path}}`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path_param_prefix: String,
    /// A partial template merged over the ApplicationSet's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub template: Option<serde_json::Value>,
}

/// A directory glob of a git generator.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitDirectoryItem {
    /// Glob relative to the repository root (`apps/*`).
    pub path: String,
    /// Directories matching this glob are left out.
    #[serde(default)]
    pub exclude: bool,
}

/// A file glob of a git generator.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitFileItem {
    /// Glob relative to the repository root (`services/**/config.yaml`).
    pub path: String,
    /// Files matching this glob are left out.
    #[serde(default)]
    pub exclude: bool,
}

/// `matrix`: every combination of the sets of two child generators.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatrixGenerator {
    /// Exactly two child generators (each shaped like a generator; the second may use the
    /// first's parameters in its strings).
    #[schemars(schema_with = "preserve_unknown_array")]
    pub generators: Vec<serde_json::Value>,
    /// A partial template merged over the ApplicationSet's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub template: Option<serde_json::Value>,
}

/// `merge`: the first child's sets, overridden by other children's sets with equal `mergeKeys`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MergeGenerator {
    /// Child generators (each shaped like a generator).
    #[schemars(schema_with = "preserve_unknown_array")]
    pub generators: Vec<serde_json::Value>,
    /// Parameters whose values must all be equal for two sets to merge.
    pub merge_keys: Vec<String>,
    /// A partial template merged over the ApplicationSet's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub template: Option<serde_json::Value>,
}

/// What the ApplicationSet controller may do to generated Applications.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetSyncPolicy {
    /// When a generated Application is deleted (because its parameter set disappeared or the
    /// ApplicationSet was deleted), leave its objects in the cluster.
    #[serde(default)]
    pub preserve_resources_on_deletion: bool,
    /// `create-only`, `create-update`, `create-delete` or `sync` (default: all three).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applications_sync: Option<ApplicationsSyncPolicy>,
    /// The most Applications one pass may delete. Above it the pass deletes nothing, says why in a
    /// condition and an Event, and waits until a person confirms with the annotation
    /// `capstan.dev/allow-deletions: "true"` (removed once the deletions are made). Absent: no
    /// limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_budget: Option<AppSetDeletionBudget>,
}

/// `ApplicationSet.spec.syncPolicy.deletionBudget`: either limit exceeded stops the deletions.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppSetDeletionBudget {
    /// The most Applications one pass may delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_applications: Option<u32>,
    /// The most Applications one pass may delete, in percent of those the set owns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub max_percent: Option<u32>,
}

/// Which changes the ApplicationSet controller makes to generated Applications.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ApplicationsSyncPolicy {
    /// Create new Applications; never update or delete.
    #[serde(rename = "create-only")]
    CreateOnly,
    /// Create and update; never delete.
    #[serde(rename = "create-update")]
    CreateUpdate,
    /// Create and delete; never update.
    #[serde(rename = "create-delete")]
    CreateDelete,
    /// Create, update and delete.
    #[serde(rename = "sync")]
    Sync,
}

impl ApplicationsSyncPolicy {
    /// Whether existing Applications are updated to the template.
    pub fn allows_update(self) -> bool {
        matches!(self, Self::CreateUpdate | Self::Sync)
    }
    /// Whether Applications no longer generated are deleted.
    pub fn allows_delete(self) -> bool {
        matches!(self, Self::CreateDelete | Self::Sync)
    }
}

/// How generated Applications are synced.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetStrategy {
    /// `AllAtOnce` (default) or `RollingSync`.
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// Steps of a `RollingSync`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_sync: Option<RollingSyncStrategy>,
}

/// A progressive rollout in ordered steps.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingSyncStrategy {
    /// Step N+1 starts only when every Application of step N is Synced and Healthy.
    pub steps: Vec<RollingSyncStep>,
}

/// One step: the generated Applications whose labels match every expression.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingSyncStep {
    /// Label requirements on the generated Applications (`In`, `NotIn`, `Exists`, `DoesNotExist`).
    #[serde(default)]
    pub match_expressions: Vec<LabelSelectorRequirement>,
    /// How many of this step's Applications may sync at once: a number or a percentage
    /// (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_update: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
}

/// What the ApplicationSet controller reports.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetStatus {
    /// `ErrorOccurred`, `ParametersGenerated`, `ResourcesUpToDate`, `RolloutProgressing`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ApplicationSetCondition>,
    /// Per generated Application: its rollout step and state (RollingSync only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub application_status: Vec<ApplicationSetApplicationStatus>,
    /// The generated Applications with their sync and health.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ApplicationSetResource>,
}

/// One condition of an ApplicationSet.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: ApplicationSetConditionType,
    /// `True` or `False`.
    pub status: String,
    /// What happened, and where.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// A one-word reason (`ApplicationSetUpToDate`, `ErrorOccurred`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_transition_time: String,
}

/// Rollout state of one generated Application.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetApplicationStatus {
    /// The Application's name.
    pub application: String,
    /// `Waiting` (out of sync, its step not reached), `Pending` (step reached, waiting for a slot),
    /// `Progressing` (sync requested or running), `Healthy` (Synced and Healthy), `Failed`.
    pub status: RolloutStatus,
    /// Why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The 1-based step it belongs to (as a string, as in Argo CD).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub step: String,
    /// The revision the rollout synced it to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_revision: String,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_transition_time: String,
}

/// A generated Application, as listed in the ApplicationSet's status.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetResource {
    /// Application name.
    pub name: String,
    /// Its sync status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "SyncCode")]
    pub status: Option<SyncCode>,
    /// Its health status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "HealthCode")]
    pub health: Option<HealthCode>,
}

/// Schema for free-form JSON arrays (list elements, child generators).
fn preserve_unknown_array(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argo_applicationset_deserialises() {
        let yaml = r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: guestbook}
spec:
  generators:
  - matrix:
      generators:
      - clusters: {selector: {matchLabels: {env: staging}}}
      - git: {repoURL: "https://git.example/x.git", revision: HEAD, directories: [{path: "apps/*"}]}
  - list: {elements: [{cluster: a, url: "https://a"}]}
  template:
    metadata: {name: "{{name}}-guestbook", labels: {env: "{{metadata.labels.env}}"}}
    spec:
      project: default
      source: {repoURL: "https://git.example/x.git", targetRevision: HEAD, path: "{{path}}"}
      destination: {server: "{{server}}", namespace: guestbook}
  syncPolicy: {preserveResourcesOnDeletion: true, applicationsSync: create-update}
  strategy:
    type: RollingSync
    rollingSync:
      steps:
      - matchExpressions: [{key: env, operator: In, values: [staging]}]
      - matchExpressions: [{key: env, operator: In, values: [production]}]
        maxUpdate: 10%
"#;
        let set: ApplicationSet = serde_saphyr::from_str(yaml).expect("parse");
        assert_eq!(set.spec.generators.len(), 2);
        assert_eq!(
            set.spec.generators[0].matrix.as_ref().map(|m| m.generators.len()),
            Some(2)
        );
        assert_eq!(set.spec.template.metadata.name, "{{name}}-guestbook");
        let policy = set.spec.sync_policy.and_then(|p| p.applications_sync);
        assert_eq!(policy, Some(ApplicationsSyncPolicy::CreateUpdate));
        let steps = set
            .spec
            .strategy
            .and_then(|s| s.rolling_sync)
            .map(|r| r.steps)
            .unwrap_or_default();
        assert_eq!(steps.len(), 2);
        assert!(matches!(
            steps[1].max_update,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(ref s)) if s == "10%"
        ));
    }
}
