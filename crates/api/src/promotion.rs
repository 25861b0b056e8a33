//! The `PromotionPipeline` resource: the environments a service moves through (in order), where
//! each service's per-environment file is in a Git repository, which fields a promotion copies, and
//! the history of the promotions made.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The fields a promotion copies when `spec.fields` is empty.
pub const DEFAULT_FIELDS: [&str; 2] = ["imageTag", "targetRevision"];
/// The most entries `status.history` keeps (newest first).
pub const HISTORY_LIMIT: usize = 50;

/// A promotion pipeline: one YAML file per service per environment in `repoURL`, promoted from an
/// environment to a later one by copying `fields` in one commit.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "PromotionPipeline",
    plural = "promotionpipelines",
    status = "PromotionPipelineStatus",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct PromotionPipelineSpec {
    /// The AppProject the pipeline belongs to (required by the CRD): its `sourceRepos` must permit
    /// `repoURL`, one of its `sourceRepoPaths` entries each file a promotion writes and the branch,
    /// and the environments' Applications must belong to it. A pipeline stored without one (before
    /// the field was required) counts as `default`, and is refused unless `default` is the implicit
    /// project that allows everything.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1))]
    pub project: String,
    /// The repository holding the per-environment files.
    #[serde(rename = "repoURL")]
    pub repo_url: String,
    /// The branch promotions commit to (`main` when empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub branch: String,
    /// Path of one service's file in one environment, with the placeholders `{service}` and `{env}`
    /// (e.g. `services-root/services/{service}/{env}.yaml`).
    pub path: String,
    /// Name of the Application deploying one file, with the same placeholders (`{service}-{env}`
    /// when empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub application: String,
    /// Keys copied from the source environment's file to the target's (`a.b` for nested keys).
    /// Empty: `imageTag` and `targetRevision`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// The environments, in promotion order.
    pub environments: Vec<Environment>,
}

/// One environment of a pipeline.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Environment {
    /// Its name, the `{env}` of the path (`[a-z0-9-]`).
    pub name: String,
    /// How it is updated: `auto` (follows the image updater) or `manual` (promoted on purpose).
    #[serde(default)]
    pub promotion: PromotionMode,
}

/// How an environment is updated.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PromotionMode {
    /// Follows the image updater.
    Auto,
    /// Changed by promotions only.
    #[default]
    Manual,
}

/// What promotions were made.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromotionPipelineStatus {
    /// The promotions made, newest first, at most [`HISTORY_LIMIT`].
    #[serde(default)]
    pub history: Vec<PromotionRecord>,
}

/// One promotion made.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromotionRecord {
    /// The service promoted.
    pub service: String,
    /// The source environment.
    pub from: String,
    /// The target environment.
    pub to: String,
    /// The fields changed in the target's file.
    #[serde(default)]
    pub changes: Vec<FieldChange>,
    /// The commit made.
    pub commit: String,
    /// The source Application's synced revision the values were read at.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source_revision: String,
    /// Who promoted.
    pub user: String,
    /// When (RFC 3339).
    pub time: String,
    /// Whether a failing check was overridden.
    #[serde(default)]
    pub forced: bool,
    /// Why it was forced.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// One field a promotion changed.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldChange {
    /// The key.
    pub field: String,
    /// The target's value before.
    pub old: String,
    /// The value promoted.
    pub new: String,
}

impl PromotionPipelineSpec {
    /// The fields promoted (the defaults when none are given).
    pub fn fields(&self) -> Vec<String> {
        if self.fields.is_empty() {
            DEFAULT_FIELDS.iter().map(|f| f.to_string()).collect()
        } else {
            self.fields.clone()
        }
    }

    /// The branch (`main` when empty).
    pub fn branch(&self) -> &str {
        if self.branch.is_empty() { "main" } else { &self.branch }
    }

    /// Position of environment `name` in the pipeline.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.environments.iter().position(|e| e.name == name)
    }

    /// The file of `service` in `env`.
    pub fn file(&self, service: &str, env: &str) -> String {
        fill(&self.path, service, env)
    }

    /// The Application deploying `service` in `env`.
    pub fn application(&self, service: &str, env: &str) -> String {
        let template = if self.application.is_empty() {
            "{service}-{env}"
        } else {
            &self.application
        };
        fill(template, service, env)
    }
}

fn fill(template: &str, service: &str, env: &str) -> String {
    template.replace("{service}", service).replace("{env}", env)
}
