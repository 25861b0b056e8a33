//! The `Policy` resource: rules every object a sync would apply must keep, per environment.
//!
//! The rule language is Kubernetes' ValidatingAdmissionPolicy, unchanged where the concept is the
//! same (`matchConstraints`, `matchConditions`, `variables`, `validations`, `paramKind` and
//! `failurePolicy` are the `admissionregistration.k8s.io/v1` types themselves), so a policy can
//! later move into a cluster. A binding is not needed: `validationActions` and `paramRef` sit on the
//! policy, as in Kyverno's `ValidatingPolicy`, and Capstan adds the scope: `clusterSelector` (labels
//! of the destination cluster) and `projects`.

use k8s_openapi::api::admissionregistration::v1::{MatchCondition, MatchResources, ParamKind, Validation, Variable};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Policy: CEL validations of the objects a sync would apply, in the clusters and projects it
/// selects.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "Policy",
    plural = "policies",
    shortname = "cpol",
    namespaced,
    status = "PolicyStatus",
    printcolumn = r#"{"name":"Actions","type":"string","jsonPath":".spec.validationActions"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PolicySpec {
    /// The kinds, operations, namespaces and labels of the objects it applies to (Kubernetes'
    /// `matchConstraints`; `resourceRules` name resources in the plural, as the API server serves
    /// them). Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_constraints: Option<MatchResources>,
    /// Further conditions an object must meet to be validated (all must be true).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_conditions: Vec<MatchCondition>,
    /// Named expressions the validations read as `variables.NAME`, evaluated in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<Variable>,
    /// The expressions every matching object must make true. Required.
    #[serde(default)]
    pub validations: Vec<Validation>,
    /// The kind of the object its validations read as `params`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param_kind: Option<ParamKind>,
    /// Which object of `paramKind` (in Capstan's namespace) the validations read as `params`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param_ref: Option<PolicyParamRef>,
    /// What an expression that cannot be evaluated (an error, the cost budget, a policy that does
    /// not compile) means: `Fail` (default) counts as a failed validation, `Ignore` as a passed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
    /// What a failed validation does: `Deny` refuses the whole sync, `Warn` records a warning on
    /// the Application, `Audit` records the verdict on the policy's status only. Default `[Deny]`;
    /// `Deny` and `Warn` together are refused (as by Kubernetes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation_actions: Vec<ValidationAction>,
    /// Labels of the destination clusters it applies to (of their cluster Secret; `in-cluster` has
    /// the labels of a cluster Secret with its server, if any). Absent: every cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// The projects whose Applications it applies to. Empty: every project.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projects: Vec<String>,
}

/// `spec.paramRef`: the object read as `params`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyParamRef {
    /// Its name, in Capstan's namespace (or cluster-scoped).
    pub name: String,
    /// What a missing object means: `Deny` (default) fails every matching object, `Allow` skips
    /// the validations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameter_not_found_action: Option<ParameterNotFoundAction>,
}

/// `spec.paramRef.parameterNotFoundAction`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ParameterNotFoundAction {
    /// The validations are skipped.
    Allow,
    /// Every matching object fails.
    Deny,
}

/// `spec.failurePolicy`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum FailurePolicy {
    /// An expression that cannot be evaluated passes.
    Ignore,
    /// An expression that cannot be evaluated fails (fail closed).
    Fail,
}

/// One of `spec.validationActions`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub enum ValidationAction {
    /// Refuse the sync; nothing of it is applied.
    Deny,
    /// Record a warning on the Application; the sync goes on.
    Warn,
    /// Record the verdict on the policy's status; the sync goes on.
    Audit,
}

impl ValidationAction {
    /// The action's name as written in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            ValidationAction::Deny => "Deny",
            ValidationAction::Warn => "Warn",
            ValidationAction::Audit => "Audit",
        }
    }
}

/// `Policy.status`, written by the controller.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: whether every expression compiled (False names each that did not; the policy
    /// then fails what it matches, unless `failurePolicy: Ignore`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The most recent verdicts of failed validations, newest first (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_verdicts: Vec<PolicyVerdict>,
}

/// One failed validation, as recorded on a policy's status.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyVerdict {
    /// When (RFC 3339).
    pub time: String,
    /// The Application whose sync it was (`NAMESPACE/NAME`).
    pub application: String,
    /// The destination cluster's name.
    pub cluster: String,
    /// The object (`GROUP/KIND/NAMESPACE/NAME`).
    pub object: String,
    /// The actions taken (`Deny`, `Warn`, `Audit`).
    pub actions: Vec<ValidationAction>,
    /// The validation's message.
    pub message: String,
}
