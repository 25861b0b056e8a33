//! Planning the ApplicationSets whose git generators read a repository: generated again with that
//! repository read at the planned revision (every other input as the controller reads it), and the
//! names compared with the Applications the set owns now.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;

use capstan_api::{Application, ApplicationSet, RepoUrl};
use capstan_appset::controller::inputs;
use capstan_appset::{GitSource, Inputs};
use capstan_source::RepoCache;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::PlanRequest;
use crate::model::SetPlan;

/// Where a set's inputs come from.
pub struct Sources<'a> {
    /// Capstan's cluster.
    pub client: &'a kube::Client,
    /// Capstan's namespace (repository credentials, cluster Secrets).
    pub namespace: &'a str,
    /// The Git cache.
    pub repos: &'a RepoCache,
    /// The cache's root (a local repository inside it is refused).
    pub cache_root: &'a Path,
    /// The cluster Secrets of the namespace.
    pub cluster_secrets: &'a [std::sync::Arc<Secret>],
}

/// Whether `source` is of the planned repository (at its base revision, when given).
fn planned(source: &GitSource, request: &PlanRequest) -> bool {
    let Ok(repo) = RepoUrl::parse(&request.repo) else {
        return false;
    };
    RepoUrl::parse(&source.repo_url).is_ok_and(|u| u.same_repository(&repo))
        && request.base.as_ref().is_none_or(|b| *b == source.revision)
}

/// Plan every set of `sets` that reads the repository, sorted by name; `apps` are the
/// Applications of the namespace.
pub async fn plan_all(
    sources: &Sources<'_>,
    sets: &[ApplicationSet],
    apps: &[Application],
    request: &PlanRequest,
) -> Vec<SetPlan> {
    let mut plans = Vec::new();
    for set in sets {
        let Ok(git) = capstan_appset::git_sources(&set.spec) else {
            continue;
        };
        if !git.iter().any(|s| planned(s, request)) {
            continue;
        }
        let mut plan = SetPlan {
            name: set.name_any(),
            ..Default::default()
        };
        match generate(sources, set, request).await {
            Ok(generated) => {
                let uid = set.uid().unwrap_or_default();
                let owned: BTreeSet<String> = apps
                    .iter()
                    .filter(|a| a.owner_references().iter().any(|o| o.uid == uid))
                    .map(|a| a.name_any())
                    .collect();
                let generated: BTreeSet<String> = generated.iter().map(|a| a.name_any()).collect();
                plan.created = generated.difference(&owned).cloned().collect();
                let deletes = set
                    .spec
                    .sync_policy
                    .as_ref()
                    .and_then(|p| p.applications_sync)
                    .is_none_or(|p| p.allows_delete());
                if deletes {
                    plan.removed = owned.difference(&generated).cloned().collect();
                    plan.deletion_budget = capstan_appset::budget::over_budget(set, plan.removed.len(), owned.len());
                }
            }
            Err(e) => plan.error = Some(capstan_redact::scrub(&e)),
        }
        plans.push(plan);
    }
    plans.sort_by(|a, b| a.name.cmp(&b.name));
    plans
}

/// The Applications `set` would generate with the planned repository at the planned revision.
async fn generate(
    sources: &Sources<'_>,
    set: &ApplicationSet,
    request: &PlanRequest,
) -> Result<Vec<Application>, String> {
    let clusters = inputs::clusters(sources.cluster_secrets).map_err(|e| e.to_string())?;
    let mut inputs = Inputs {
        clusters,
        ..Default::default()
    };
    let mut leases = Vec::new();
    let mut fetch = async |source: &GitSource, inputs: &mut Inputs| -> Result<(), String> {
        let read = if planned(source, request) {
            GitSource {
                repo_url: source.repo_url.clone(),
                revision: request.revision.clone(),
            }
        } else {
            source.clone()
        };
        let tree = inputs::checkout(
            sources.client,
            sources.namespace,
            sources.repos,
            sources.cache_root,
            &read,
            true,
        )
        .await
        .map_err(|e| e.to_string())?;
        inputs.checkouts.insert(source.clone(), tree.to_path_buf());
        leases.push(tree);
        Ok(())
    };
    for source in capstan_appset::git_sources(&set.spec).map_err(|e| e.to_string())? {
        if !inputs.checkouts.contains_key(&source) {
            fetch(&source, &mut inputs).await?;
        }
    }
    // Sources known only during generation (a matrix child's parameters in a repoURL or revision).
    let mut tried = HashSet::new();
    loop {
        match capstan_appset::generate(set, &inputs) {
            Ok(generated) => return Ok(generated),
            Err(err) => match err.missing_git_source() {
                Some(source) if tried.insert(source.clone()) => {
                    let source = source.clone();
                    fetch(&source, &mut inputs).await?;
                }
                _ => return Err(err.to_string()),
            },
        }
    }
}
