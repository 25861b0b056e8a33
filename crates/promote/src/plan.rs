//! What a promotion would do, computed without committing: the checks (a failing overridable check
//! is recorded, not raised, so a preview can show it), the values read (the source's file at the
//! source Application's synced revision, the target's file at the branch head), the fields that
//! differ and the target file's text after the edits. [`crate::Promoter::promote`] commits a plan;
//! [`crate::Promoter::plan`] alone is the dry run.

use capstan_api::promotion::FieldChange;
use capstan_api::{Application, PromotionPipelineSpec};
use capstan_gitwrite::{Change, Edit};
use capstan_source::Credentials;
use kube::Api;

use crate::project::PipelineProject;
use crate::read::Reader;
use crate::{PromoteError, PromoteRequest, Promoter, check, find_pipeline, values};

/// A promotion computed but not made.
#[derive(Debug)]
pub struct Plan {
    /// The pipeline used.
    pub pipeline: String,
    /// Its spec.
    pub spec: PromotionPipelineSpec,
    /// The source environment's Application.
    pub source_app: String,
    /// The target environment's Application.
    pub target_app: String,
    /// The commit the source's values were read at (its synced revision, or the branch head when a
    /// forced promotion's source has none).
    pub source_revision: String,
    /// The source environment's file.
    pub source_path: String,
    /// The target environment's file (the one a promotion changes).
    pub target_path: String,
    /// The branch head the target's file was read at.
    pub target_revision: String,
    /// The target's file at `target_revision`.
    pub target_before: String,
    /// The target's file with the changes applied (equal to `target_before` when nothing changes).
    pub target_after: String,
    /// Each promoted field whose value differs, target's old value → source's value.
    pub changes: Vec<FieldChange>,
    /// The overridable check that fails (the source not Synced and Healthy, a backwards promotion):
    /// a promotion needs `force` and a reason while this is set.
    pub check_failure: Option<PromoteError>,
    pub(crate) edits: Vec<Edit>,
    pub(crate) credentials: Credentials,
}

impl Plan {
    /// The target file before → after as a unified diff (empty when nothing changes).
    pub fn diff(&self) -> String {
        unified(&self.target_path, &self.target_before, &self.target_after)
    }
}

/// `before` → `after` of the file at `path` as a unified diff with 3 lines of context.
pub fn unified(path: &str, before: &str, after: &str) -> String {
    if before == after {
        return String::new();
    }
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

impl Promoter {
    /// Check, read and compute the changes, committing nothing. Errors are the checks that `force`
    /// cannot override (names, unknown environments, a missing Application, file or key); the
    /// overridable ones are in [`Plan::check_failure`].
    pub async fn plan(&self, request: &PromoteRequest) -> Result<Plan, PromoteError> {
        self.plan_checked(request, false).await
    }

    /// [`Promoter::plan`]; with `refuse`, a failing overridable check is returned as the error
    /// before anything is read from Git.
    pub(crate) async fn plan_checked(&self, request: &PromoteRequest, refuse: bool) -> Result<Plan, PromoteError> {
        let pipeline = find_pipeline(&self.client, &self.namespace, request.pipeline.as_deref()).await?;
        let name = pipeline.metadata.name.clone().unwrap_or_default();
        let spec = pipeline.spec;
        let (service, from, to) = (&request.service, &request.from, &request.to);
        check::check_names(&spec, service, from, to)?;
        // The project first: nothing of a repository, file or branch it refuses is read.
        let project =
            PipelineProject::of(&self.client, &self.namespace, &name, &spec, self.deny_implicit_default).await?;
        project.check_write(&spec.repo_url, &spec.file(service, to), spec.branch())?;
        // Unknown environments are refused even with force; going backwards is overridable.
        check::check_order(&spec, from, to, true)?;
        let backwards = check::check_order(&spec, from, to, false).err();
        let apps: Api<Application> = Api::namespaced(self.client.clone(), &self.namespace);
        let source_app = spec.application(service, from);
        let source = apps
            .get_opt(&source_app)
            .await
            .map_err(PromoteError::kube(format!("reading Application {source_app}")))?
            .ok_or_else(|| PromoteError::NotFound(format!("Application {source_app:?}")))?;
        project.check_application(&source)?;
        let target_app = spec.application(service, to);
        if let Some(target) = apps
            .get_opt(&target_app)
            .await
            .map_err(PromoteError::kube(format!("reading Application {target_app}")))?
        {
            project.check_application(&target)?;
        }
        let revision = check::check_source(&source, true)?;
        let check_failure = backwards.or_else(|| check::check_source(&source, false).err());
        if refuse && let Some(failure) = check_failure {
            return Err(failure);
        }

        let credentials = capstan_cluster::repository::for_repo(&self.client, &self.namespace, &spec.repo_url)
            .await
            .unwrap_or_default();
        let reader = Reader {
            url: spec.repo_url.clone(),
            credentials: credentials.clone(),
            timeout: self.timeout,
            allow_local: self.allow_local,
        };
        let (source_path, target_path) = (spec.file(service, from), spec.file(service, to));
        let source_revision = revision.as_deref().unwrap_or(spec.branch());
        let source_file = reader
            .read(&source_path, source_revision, spec.branch())
            .await
            .map_err(|err| match err {
                PromoteError::NotFound(_) => PromoteError::NotFound(format!(
                    "{source_app}'s synced revision {source_revision} in {} (does it deploy from another repository?)",
                    capstan_source::redact(&spec.repo_url, &credentials.secrets())
                )),
                err => err,
            })?;
        let target_file = reader.read(&target_path, spec.branch(), spec.branch()).await?;
        let mut changes = Vec::new();
        let mut edits = Vec::new();
        let mut target_after = target_file.text.clone();
        for field in spec.fields() {
            let new = values::scalar(&source_path, &source_file.text, &field)?;
            let old = values::scalar(&target_path, &target_file.text, &field)?;
            if new == old {
                continue;
            }
            let key = field
                .parse()
                .map_err(|e| PromoteError::BadRequest(format!("field {field:?}: {e}")))?;
            let change = Change::SetKey {
                key,
                value: new.clone(),
            };
            // The edit the commit will make, applied here to show the file after it.
            if let Some(text) = capstan_gitwrite::edit::apply(&target_path, &target_after, &change)? {
                target_after = text;
            }
            edits.push(Edit {
                path: target_path.clone(),
                change,
            });
            changes.push(FieldChange { field, old, new });
        }
        Ok(Plan {
            pipeline: name,
            target_app: spec.application(service, to),
            spec,
            source_app,
            source_revision: source_file.commit,
            source_path,
            target_path,
            target_revision: target_file.commit,
            target_before: target_file.text,
            target_after,
            changes,
            check_failure,
            edits,
            credentials,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_shows_the_changed_line_with_its_context() {
        let before = "# c\nservice: p\nimageTag: \"1.4.2\" # promoted\ntargetRevision: main\n";
        let after = "# c\nservice: p\nimageTag: \"1.5.0\" # promoted\ntargetRevision: main\n";
        let diff = unified("s/p/production.yaml", before, after);
        assert!(
            diff.starts_with("--- a/s/p/production.yaml\n+++ b/s/p/production.yaml\n@@"),
            "{diff}"
        );
        assert!(
            diff.contains("\n-imageTag: \"1.4.2\" # promoted\n+imageTag: \"1.5.0\" # promoted\n"),
            "{diff}"
        );
        assert!(diff.contains("\n # c\n"), "context kept: {diff}");
        assert_eq!(unified("f", before, before), "");
    }
}
