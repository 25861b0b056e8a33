//! `capstan plan` and `POST /api/plan`: what a revision of a repository would change, before
//! anything is applied — for every Application that follows the repository, the objects created,
//! changed and pruned (diffs against the live cluster, Secrets redacted), the policies' verdicts
//! and the deletion budget's; for every ApplicationSet that reads it, the Applications created and
//! removed. Nothing is written anywhere. An offline mode judges a directory of manifests by
//! policies alone, without a cluster.
//!
//! Modules, in dependency order:
//! - [`report`]: a plan as text and as Markdown.
//! - [`applications`]: planning the Applications (the controller's pipeline, read-only).
//! - [`sets`]: planning the ApplicationSets (generation at the planned revision).
//! - [`offline`]: the policies alone, on manifests.
//! - [`model`]: the plan as it is answered.

pub mod applications;
pub mod model;
pub mod offline;
pub mod report;
pub mod sets;

use capstan_api::{Application, ApplicationSet};
use capstan_controller::Pipeline;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

pub use model::Plan;

/// What to plan.
#[derive(Debug, Clone, Default)]
pub struct PlanRequest {
    /// The repository's URL.
    pub repo: String,
    /// The branch, tag or commit to plan.
    pub revision: String,
    /// Only what follows this revision of the repository (the pull request's target branch).
    pub base: Option<String>,
}

/// Why a plan could not be made at all (one Application's failure is in its plan instead).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The revision does not resolve.
    #[error("repository {repo}: revision {revision:?} cannot be resolved: {message}")]
    Revision {
        /// The repository.
        repo: String,
        /// The revision.
        revision: String,
        /// Why.
        message: String,
    },
    /// Capstan's objects could not be listed.
    #[error("listing {what}: {}", capstan_kube_error(.source))]
    List {
        /// What was listed.
        what: &'static str,
        /// The API server's error.
        #[source]
        source: kube::Error,
    },
    /// A manifest or policy file could not be read.
    #[error("{0}")]
    Manifests(String),
}

fn capstan_kube_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// Plan `request` with `pipeline` (Capstan's namespace, clusters, projects and policies).
pub async fn plan(pipeline: &Pipeline, request: &PlanRequest) -> Result<Plan, PlanError> {
    let client = &pipeline.client;
    let namespace = &pipeline.namespace;
    let creds = capstan_cluster::repository::for_repo(client, namespace, &request.repo)
        .await
        .unwrap_or_else(capstan_source::Credentials::none);
    pipeline
        .repos
        .resolve(&request.repo, &request.revision, &creds, true)
        .await
        .map_err(|e| PlanError::Revision {
            repo: request.repo.clone(),
            revision: request.revision.clone(),
            message: capstan_redact::scrub(&e.to_string()),
        })?;
    let list = |what| move |source| PlanError::List { what, source };
    let apps: Vec<Application> = Api::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(list("Applications"))?
        .items;
    let sets: Vec<ApplicationSet> = Api::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(list("ApplicationSets"))?
        .items;
    let selector = format!(
        "{}={}",
        capstan_api::labels::SECRET_TYPE_LABEL,
        capstan_api::cluster::CLUSTER_SECRET_TYPE
    );
    let secrets: Vec<std::sync::Arc<Secret>> = Api::<Secret>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(list("cluster Secrets"))?
        .items
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
    let sources = sets::Sources {
        client,
        namespace,
        repos: &pipeline.repos,
        cache_root: &pipeline.cache_dir,
        cluster_secrets: &secrets,
    };
    let application_sets = sets::plan_all(&sources, &sets, &apps, request).await;
    let applications = applications::plan_all(pipeline, apps, request).await;
    Ok(Plan {
        repo: request.repo.clone(),
        revision: request.revision.clone(),
        base: request.base.clone(),
        applications,
        application_sets,
    })
}
