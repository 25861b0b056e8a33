//! The AppProject a pipeline belongs to, and what it lets a promotion do: read and write only the
//! repository its `sourceRepos` permit, write only a file and branch one of its `sourceRepoPaths`
//! entries permit, and promote only between Applications of that project. Checked before anything
//! is read from Git.

use capstan_api::project::{AppProjectSpec, DEFAULT_PROJECT};
use capstan_api::{AppProject, Application, PromotionPipelineSpec};
use kube::Api;

use crate::PromoteError;

/// A pipeline's project: its name and rules.
pub(crate) struct PipelineProject {
    pipeline: String,
    name: String,
    rules: AppProjectSpec,
}

impl PipelineProject {
    /// The project of pipeline `pipeline` (`spec.project`), read from `namespace`. A pipeline
    /// without one counts as `default` and is refused unless that is the implicit project allowing
    /// everything (no AppProject named default, `deny_implicit_default` off).
    pub(crate) async fn of(
        client: &kube::Client,
        namespace: &str,
        pipeline: &str,
        spec: &PromotionPipelineSpec,
        deny_implicit_default: bool,
    ) -> Result<PipelineProject, PromoteError> {
        let named = spec.project.trim();
        let lookup = if named.is_empty() { DEFAULT_PROJECT } else { named };
        let api: Api<AppProject> = Api::namespaced(client.clone(), namespace);
        let found = api
            .get_opt(lookup)
            .await
            .map_err(PromoteError::kube(format!("reading AppProject {lookup}")))?;
        let refused = |message: String| PromoteError::ProjectRefused {
            pipeline: pipeline.to_string(),
            message,
        };
        let (name, rules) = capstan_project::resolve(lookup, found.map(|p| p.spec), deny_implicit_default)
            .map_err(|e| refused(format!("spec.project: {e} in namespace {namespace:?}")))?;
        if named.is_empty() && !capstan_project::is_implicit_default(&name, &rules) {
            return Err(refused(
                "spec.project is required: the `default` project is not the implicit one that allows everything \
                 (an AppProject named default exists, or the operator denies the implicit one), so every \
                 PromotionPipeline must name the AppProject it belongs to"
                    .into(),
            ));
        }
        Ok(PipelineProject {
            pipeline: pipeline.to_string(),
            name,
            rules,
        })
    }

    /// May a promotion of this pipeline commit to `path` on `branch` of `repo_url`?
    pub(crate) fn check_write(&self, repo_url: &str, path: &str, branch: &str) -> Result<(), PromoteError> {
        let target = capstan_project::WriteTarget { repo_url, path, branch };
        capstan_project::check_write(&self.name, &self.rules, &target).map_err(|source| PromoteError::Project {
            pipeline: self.pipeline.clone(),
            source,
        })
    }

    /// Does `app` (an environment's Application) belong to the pipeline's project? The implicit
    /// `default` project, which permits everything, may promote between Applications of any project.
    pub(crate) fn check_application(&self, app: &Application) -> Result<(), PromoteError> {
        if capstan_project::is_implicit_default(&self.name, &self.rules) {
            return Ok(());
        }
        let project = app.spec.project.trim();
        let project = if project.is_empty() { DEFAULT_PROJECT } else { project };
        if project == self.name {
            return Ok(());
        }
        Err(PromoteError::ProjectRefused {
            pipeline: self.pipeline.clone(),
            message: format!(
                "Application {} belongs to project {project:?}, but the pipeline belongs to project {:?}: a \
                 pipeline promotes only between Applications of its own project",
                app.metadata.name.as_deref().unwrap_or_default(),
                self.name
            ),
        })
    }
}
