//! The `AppProject` resource: which repositories, destinations and kinds of object the
//! Applications of a project may use (Argo CD's `AppProject`, same field names).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sync_window::SyncWindow;

/// The project every Application without `spec.project` belongs to. If no AppProject of this
/// name exists, it allows everything.
pub const DEFAULT_PROJECT: &str = "default";

/// The project an Application's `spec.project` names: [`DEFAULT_PROJECT`] when empty.
pub fn project_name(spec_project: &str) -> &str {
    if spec_project.is_empty() {
        DEFAULT_PROJECT
    } else {
        spec_project
    }
}

/// An AppProject: the rules its Applications' syncs must keep.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "AppProject",
    plural = "appprojects",
    shortname = "appproj",
    shortname = "appprojs",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct AppProjectSpec {
    /// What the project is for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Repository URL globs its Applications may use (`*` for any). Empty: none.
    #[serde(default)]
    pub source_repos: Vec<String>,
    /// Clusters and namespaces its Applications may deploy to. Empty: none.
    #[serde(default)]
    pub destinations: Vec<ProjectDestination>,
    /// Cluster-scoped kinds allowed. Empty: none (as in Argo CD).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_resource_whitelist: Vec<GroupKind>,
    /// Cluster-scoped kinds refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_resource_blacklist: Vec<GroupKind>,
    /// Namespaced kinds allowed. Empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespace_resource_whitelist: Vec<GroupKind>,
    /// Namespaced kinds refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespace_resource_blacklist: Vec<GroupKind>,
    /// Names of the decryption Secrets (age identities, in Capstan's namespace) its Applications may
    /// name in `spec.decryption.secretRef` (`*` for any). Empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decryption_secrets: Vec<String>,
    /// Names of the secret stores (OpenBao/Vault, Secrets in Capstan's namespace labelled
    /// `capstan.dev/secret-type: secret-store`) whose values its Applications' Secrets may reference
    /// (`*` for any). Empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_stores: Vec<String>,
    /// Which secrets of a store (permitted by `secretStores`) its Applications may read: a store
    /// with entries here is limited to their paths; a store without any entry is limited only by
    /// what its token may read. For a store several teams share.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_store_paths: Vec<SecretStorePaths>,
    /// What the project's ImageUpdaters and PromotionPipelines may commit: which files of which
    /// repositories, on which branches. A write needs the repository in `sourceRepos` too. Empty:
    /// no write at all (Applications only read, and `sourceRepos` is all they need).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_repo_paths: Vec<RepoPaths>,
    /// When its Applications may sync (Argo CD's sync windows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sync_windows: Vec<SyncWindow>,
    /// The ServiceAccount each destination's syncs act as (Argo CD's destination service
    /// accounts): the first entry whose globs match the destination names it, and every write of
    /// a sync (applies, prunes, hooks, the namespace it creates) and of the Application's deletion
    /// is made impersonating it, so the destination's API server refuses what that account may
    /// not do. Empty: syncs use Capstan's own account. Non-empty and no entry matches: the sync is
    /// refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destination_service_accounts: Vec<DestinationServiceAccount>,
    /// The most objects one sync of its Applications may prune. Above it the sync stops before
    /// applying or deleting anything and waits for a person to confirm
    /// (`capstan app sync NAME --allow-deletions`). Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_budget: Option<DeletionBudget>,
}

/// `AppProject.spec.deletionBudget`: either limit exceeded stops the sync.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeletionBudget {
    /// The most objects one sync may prune.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_objects: Option<u32>,
    /// The most objects one sync may prune, in percent of the Application's tracked objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub max_percent: Option<u32>,
}

/// One entry of `AppProject.spec.destinationServiceAccounts`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DestinationServiceAccount {
    /// Glob on the destination cluster's server URL (`*` for any).
    pub server: String,
    /// Glob on the Application's destination namespace (`*` for any).
    pub namespace: String,
    /// The ServiceAccount: `NAME` (in the Application's destination namespace) or
    /// `NAMESPACE:NAME`.
    pub default_service_account: String,
}

/// Secrets of one store a project's Applications may read (`AppProject.spec.secretStorePaths[]`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretStorePaths {
    /// The store's name (exact), or `*` for every store.
    pub store: String,
    /// Globs over `mount/path` of the KV secrets (`secret/team-a/**`): `*` stays within one
    /// segment, `**` crosses segments. Empty: no secret of the store.
    #[serde(default)]
    pub paths: Vec<String>,
}

/// Files of repositories a project's ImageUpdaters and PromotionPipelines may commit to
/// (`AppProject.spec.sourceRepoPaths[]`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepoPaths {
    /// Repository URL glob, matched as `sourceRepos` entries are (`*` for any; no `!`).
    pub repo: String,
    /// Globs over paths relative to the repository root (`services/team-a/**`): `*` stays within
    /// one directory, `**` crosses directories. Empty: no file.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Globs over the branches written to (`main`, `image-updates/*`; `*` alone is any branch).
    /// Empty: no branch.
    #[serde(default)]
    pub branches: Vec<String>,
}

/// A permitted destination: globs on the cluster's server URL or name, and on the namespace.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectDestination {
    /// Glob on the cluster's server URL (`*` for any).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server: String,
    /// Glob on the cluster's name (`*` for any).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Glob on the namespace (`*` for any).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// A kind of object: API group (`""` for the core group) and kind, each a glob.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupKind {
    /// API group glob (`""` is the core group, `*` any).
    #[serde(default, deserialize_with = "null_as_empty")]
    #[schemars(schema_with = "nullable_string")]
    pub group: String,
    /// Kind glob (`*` any).
    pub kind: String,
}

/// Kubernetes 1.20's server-side apply stores an empty string as `null`: read it back as `""`.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// A string that may be `null` (see [`null_as_empty`]).
fn nullable_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "nullable": true})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_group_is_the_core_group() {
        let gk: GroupKind = serde_json::from_str(r#"{"group": null, "kind": "Secret"}"#).expect("parse");
        assert_eq!(gk.group, "");
        let gk: GroupKind = serde_json::from_str(r#"{"kind": "Secret"}"#).expect("parse");
        assert_eq!(gk.group, "");
    }
}
