//! A plan as it is answered (`POST /api/plan`, `capstan plan -o json`): stable ordering, every
//! Secret value redacted.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a revision of a repository would change.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// The repository planned.
    pub repo: String,
    /// The revision planned (as asked).
    pub revision: String,
    /// Only Applications and ApplicationSets following this revision of the repository (the pull
    /// request's target branch), when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Every Application that follows the repository, by name.
    pub applications: Vec<AppPlan>,
    /// Every ApplicationSet whose git generators read the repository, by name.
    pub application_sets: Vec<SetPlan>,
}

/// How an Application would change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Change {
    /// Its objects would change.
    Changed,
    /// Nothing would change.
    Unchanged,
    /// It could not be rendered or compared.
    Failed,
}

/// The plan of one Application.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppPlan {
    /// Its name.
    pub name: String,
    /// Its project.
    pub project: String,
    /// Its destination cluster's name.
    pub cluster: String,
    /// Its destination namespace.
    pub namespace: String,
    /// How it would change.
    pub change: Change,
    /// The commit the revision resolved to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resolved: String,
    /// Why it could not be planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The objects that would be created, changed or deleted, by key.
    pub objects: Vec<ObjectPlan>,
    /// The policies' verdicts on them.
    pub verdicts: Vec<VerdictPlan>,
    /// Why the deletion budget would stop its sync, if it would.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_budget: Option<String>,
}

impl AppPlan {
    /// Whether a policy denies it.
    pub fn denied(&self) -> bool {
        self.verdicts.iter().any(|v| v.actions.iter().any(|a| a == "Deny"))
    }
}

/// What would happen to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Action {
    /// Created.
    Create,
    /// Changed.
    Update,
    /// Pruned (the Application prunes automatically).
    Delete,
    /// No longer in Git, but the Application does not prune automatically: left until a pruning
    /// sync.
    RequiresPruning,
}

/// One object of an Application's plan.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectPlan {
    /// `GROUP/KIND/NAMESPACE/NAME`.
    pub key: String,
    /// What would happen.
    pub action: Action,
    /// The unified diff, live → the revision (Secret values redacted).
    pub diff: String,
}

/// One policy verdict of a plan.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerdictPlan {
    /// The policy.
    pub policy: String,
    /// The object.
    pub object: String,
    /// Its actions (`Deny`, `Warn`, `Audit`).
    pub actions: Vec<String>,
    /// The message.
    pub message: String,
}

impl From<&capstan_policy::Verdict> for VerdictPlan {
    fn from(v: &capstan_policy::Verdict) -> Self {
        VerdictPlan {
            policy: v.policy.clone(),
            object: v.object.clone(),
            actions: v.actions.iter().map(|a| a.as_str().to_string()).collect(),
            message: v.message.clone(),
        }
    }
}

/// The plan of one ApplicationSet.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetPlan {
    /// Its name.
    pub name: String,
    /// Applications it would create.
    pub created: Vec<String>,
    /// Applications it would delete.
    pub removed: Vec<String>,
    /// Why its deletion budget would stop the deletions, if it would.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_budget: Option<String>,
    /// Why it could not be generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Plan {
    /// Whether the plan must fail a check: a policy denies, or something could not be planned.
    pub fn failed(&self) -> bool {
        self.applications
            .iter()
            .any(|a| a.denied() || a.change == Change::Failed)
            || self.application_sets.iter().any(|s| s.error.is_some())
    }
}
