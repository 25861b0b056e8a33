//! An Application's sources, resolved and fetched: each Git source to a commit and a checkout, each
//! chart source (`chart` with a Helm repository or an OCI registry) to a version and its extracted
//! chart. Every source's `repoURL` must be permitted by the project, and no local repository may
//! point into Capstan's own cache.

use std::ops::Deref;
use std::path::Path;

use capstan_api::Application;
use capstan_api::application::ApplicationSource;
use capstan_cluster::repository;
use capstan_source::{ChartDir, ChartRequest, Checkout, Credentials};

use super::revision::{self, Resolved, SourceRevision};
use super::{Pipeline, points_into};
use crate::error::PipelineError;
use crate::projects::Project;

/// The files of one source: a Git checkout, or an extracted chart (`Chart.yaml` at its root).
pub(super) enum Tree {
    /// A commit of a Git repository.
    Git(Checkout),
    /// A chart from a Helm repository or an OCI registry.
    Chart(ChartDir),
}

impl Deref for Tree {
    type Target = Path;
    fn deref(&self) -> &Path {
        match self {
            Tree::Git(checkout) => checkout,
            Tree::Chart(chart) => chart,
        }
    }
}

impl Pipeline {
    /// Resolve every source of `app` (of `project`) at `revision` (default: each source's targetRevision). For a
    /// multi-source Application `revision` is one revision per source joined with `,`, as
    /// [`Resolved::id`] writes it.
    pub async fn resolve(
        &self,
        app: &Application,
        project: &Project,
        revision: Option<&str>,
        force: bool,
    ) -> Result<Resolved, PipelineError> {
        let sources = app.spec.sources();
        check_supported(app)?;
        check_refs(app)?;
        let requested = match revision {
            Some(r) if app.spec.is_multi_source() => {
                let each = revision::split(r);
                if each.len() != sources.len() {
                    return Err(PipelineError::RevisionCount {
                        revision: r.to_string(),
                        given: each.len(),
                        sources: sources.len(),
                    });
                }
                each.into_iter().map(Some).collect()
            }
            Some(r) => vec![Some(r)],
            None => vec![None; sources.len()],
        };
        let (project, rules) = (&project.name, &project.spec);
        let mut resolved = Vec::with_capacity(sources.len());
        for (i, (source, revision)) in sources.iter().zip(requested).enumerate() {
            let field = source_field(app, i);
            let url = source.repo_url.as_str();
            if url.trim().is_empty() {
                return Err(PipelineError::EmptyRepoUrl { field });
            }
            if points_into(url, &self.cache_dir) {
                return Err(PipelineError::RepoInCache { url: url.to_string() });
            }
            capstan_project::check_source(project, rules, url)?;
            let revision = revision.unwrap_or(&source.target_revision);
            let found = if source.is_chart() {
                self.resolve_chart(source, revision, force, field).await?
            } else {
                let creds = self.credentials(url).await;
                SourceRevision::Git(self.repos.resolve(url, revision, &creds, force).await?)
            };
            resolved.push(found);
        }
        Ok(Resolved {
            sources: resolved,
            multi: app.spec.is_multi_source(),
        })
    }

    /// The version of `source.chart` that `revision` names, from its repository's index (or the
    /// registry's tags), shared by every Application of the repository for the refs TTL.
    async fn resolve_chart(
        &self,
        source: &ApplicationSource,
        revision: &str,
        force: bool,
        field: String,
    ) -> Result<SourceRevision, PipelineError> {
        let (creds, plain_http) = self.chart_credentials(&source.repo_url).await;
        let request = ChartRequest {
            repo_url: source.repo_url.clone(),
            chart: source.chart.trim().to_string(),
            target_revision: revision.trim().to_string(),
            plain_http,
        };
        self.charts
            .resolve(&request, &creds, force)
            .await
            .map(SourceRevision::Chart)
            .map_err(|e| PipelineError::Chart {
                field,
                source: Box::new(e),
            })
    }

    /// The Git repositories of `app` its pollers may list: those its project permits (see
    /// [`super::polled`]).
    pub fn polled_urls(&self, app: &Application, project: &Project) -> Vec<String> {
        super::polled::permitted_git_urls(app, &project.name, &project.spec, &self.cache_dir)
    }

    async fn credentials(&self, url: &str) -> Credentials {
        repository::for_repo(&self.client, &self.namespace, url)
            .await
            .unwrap_or_default()
    }

    /// A chart repository's credentials, and whether its registry is spoken to over plain HTTP
    /// (`insecureOCIForceHttp: "true"` in its repository Secret, as in Argo CD).
    async fn chart_credentials(&self, url: &str) -> (Credentials, bool) {
        match repository::lookup(&self.client, &self.namespace, url).await {
            Some(found) => (found.credentials, found.oci_force_http),
            None => (Credentials::default(), false),
        }
    }

    /// The repository dependencies `declared` by source `i`'s Helm chart (and not vendored), each
    /// resolved and fetched through the chart cache — from repositories registered with a repository
    /// Secret and permitted by the project only — with what identifies its content.
    pub(super) async fn dependencies(
        &self,
        app: &Application,
        project: &Project,
        i: usize,
        declared: Vec<capstan_render::RemoteDependency>,
    ) -> Result<Vec<(capstan_render::RemoteDependency, ChartDir, String)>, PipelineError> {
        if declared.is_empty() {
            return Ok(Vec::new());
        }
        let (project, rules) = (&project.name, &project.spec);
        let mut fetched = Vec::with_capacity(declared.len());
        for dependency in declared {
            let field = format!("{} dependency {:?}", source_field(app, i), dependency.name);
            let Some(registered) = repository::lookup(&self.client, &self.namespace, &dependency.repository).await
            else {
                return Err(PipelineError::UnregisteredDependency {
                    field,
                    repository: dependency.repository,
                });
            };
            capstan_project::check_source(project, rules, &dependency.repository)?;
            let request = ChartRequest {
                repo_url: dependency.repository.clone(),
                chart: dependency.name.clone(),
                target_revision: dependency.version.clone(),
                plain_http: registered.oci_force_http,
            };
            let chart_error = |e| PipelineError::Chart {
                field: field.clone(),
                source: Box::new(e),
            };
            let resolved = self
                .charts
                .resolve(&request, &registered.credentials, false)
                .await
                .map_err(chart_error)?;
            let dir = self
                .charts
                .fetch(&resolved, &registered.credentials)
                .await
                .map_err(chart_error)?;
            let identity = SourceRevision::Chart(resolved).cache_key();
            fetched.push((dependency, dir, identity));
        }
        Ok(fetched)
    }

    /// The age identities `spec.decryption` names, if any: the project must list the Secret in its
    /// `decryptionSecrets`, and it must be a decryption Secret of Capstan's namespace.
    pub(super) async fn decryption(
        &self,
        app: &Application,
        project: &str,
        rules: &capstan_api::project::AppProjectSpec,
    ) -> Result<Option<capstan_render::Decryption>, PipelineError> {
        let Some(decryption) = &app.spec.decryption else {
            return Ok(None);
        };
        let name = &decryption.secret_ref.name;
        capstan_project::check_decryption_secret(project, rules, name)?;
        let identities = capstan_cluster::decryption::identities(&self.client, &self.namespace, name)
            .await
            .map_err(PipelineError::Decryption)?;
        // Public keys only: a new key set renders again, the same one hits the render cache.
        let mut recipients = identities.recipients();
        recipients.sort();
        let id = format!("sops:{}", recipients.join(","));
        Ok(Some(capstan_render::Decryption {
            identities: std::sync::Arc::new(identities),
            id,
        }))
    }

    /// The files of every source at its resolved revision, in order.
    pub(super) async fn trees(
        &self,
        app: &Application,
        sources: &[ApplicationSource],
        resolved: &Resolved,
    ) -> Result<Vec<Tree>, PipelineError> {
        let mut trees = Vec::with_capacity(sources.len());
        for (i, (source, revision)) in sources.iter().zip(&resolved.sources).enumerate() {
            let tree = match revision {
                SourceRevision::Git(git) => Tree::Git(self.repos.checkout(&source.repo_url, &git.sha).await?),
                SourceRevision::Chart(chart) => {
                    let (creds, _) = self.chart_credentials(&source.repo_url).await;
                    let dir = self
                        .charts
                        .fetch(chart, &creds)
                        .await
                        .map_err(|e| PipelineError::Chart {
                            field: source_field(app, i),
                            source: Box::new(e),
                        })?;
                    Tree::Chart(dir)
                }
            };
            trees.push(tree);
        }
        Ok(trees)
    }
}

/// Most sources one Application may have: each is a checkout or a chart fetched on every pass.
pub(crate) const MAX_SOURCES: usize = 20;

/// Refuse the fields the schema accepts (for Argo CD compatibility) but Capstan does not support, so
/// that such an Application carries a condition naming the field instead of being half-honoured.
fn check_supported(app: &Application) -> Result<(), PipelineError> {
    for (i, source) in app.spec.sources().iter().enumerate() {
        if source.plugin.is_some() {
            return Err(PipelineError::Unsupported {
                field: format!("{}.plugin", source_field(app, i)),
                why: "config management plugins are not run; render with Helm, Kustomize, Jsonnet or plain manifests",
            });
        }
    }
    let options = app.spec.sync_policy.iter().flat_map(|p| p.sync_options.iter());
    for (i, entry) in options.enumerate() {
        for word in entry.split(',') {
            if let Some(why) = capstan_sync::unsupported_app_option(word) {
                return Err(PipelineError::UnsupportedOption {
                    field: format!("spec.syncPolicy.syncOptions[{i}]"),
                    option: word.trim().to_string(),
                    why,
                });
            }
        }
    }
    if let Some(policy) = &app.spec.sync_policy
        && !policy.sync_timeout.trim().is_empty()
        && crate::automated::parse_duration(&policy.sync_timeout).is_none()
    {
        return Err(PipelineError::BadDuration {
            field: "spec.syncPolicy.syncTimeout",
            value: policy.sync_timeout.clone(),
        });
    }
    if let Some(auto) = app.spec.sync_policy.as_ref().and_then(|p| p.auto_revert.as_ref()) {
        match crate::automated::parse_duration(&auto.degraded_for) {
            None => {
                return Err(PipelineError::BadDuration {
                    field: "spec.syncPolicy.autoRevert.degradedFor",
                    value: auto.degraded_for.clone(),
                });
            }
            Some(d) if d.is_zero() => {
                return Err(PipelineError::ZeroDuration {
                    field: "spec.syncPolicy.autoRevert.degradedFor",
                    value: auto.degraded_for.clone(),
                });
            }
            Some(_) => {}
        }
    }
    for (i, rule) in app.spec.ignore_differences.iter().enumerate() {
        if !rule.jq_path_expressions.is_empty() {
            return Err(PipelineError::Unsupported {
                field: format!("spec.ignoreDifferences[{i}].jqPathExpressions"),
                why: "name the fields with jsonPointers instead",
            });
        }
    }
    Ok(())
}

/// Refuse more than [`MAX_SOURCES`] sources, sources of which none is rendered (every deployed object
/// would be pruned), a `ref` that is not a plain name, and two sources with the same `ref` (which one
/// a `$NAME/…` value file reads would be a guess).
fn check_refs(app: &Application) -> Result<(), PipelineError> {
    let sources = app.spec.sources();
    if sources.len() > MAX_SOURCES {
        return Err(PipelineError::TooManySources {
            count: sources.len(),
            max: MAX_SOURCES,
        });
    }
    for (i, source) in sources.iter().enumerate() {
        let name = &source.ref_name;
        let plain = name.len() <= 63 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !plain {
            return Err(PipelineError::BadRef {
                field: source_field(app, i),
                name: name.chars().take(80).collect(),
            });
        }
    }
    if !sources.iter().any(ApplicationSource::is_rendered) {
        let field = if app.spec.is_multi_source() {
            "spec.sources"
        } else {
            "spec.source"
        };
        return Err(PipelineError::NothingRendered { field: field.into() });
    }
    for (j, source) in sources.iter().enumerate() {
        let name = &source.ref_name;
        if let Some(i) = (!name.is_empty())
            .then(|| sources[..j].iter().position(|s| s.ref_name == *name))
            .flatten()
        {
            return Err(PipelineError::DuplicateRef {
                name: name.clone(),
                first: source_field(app, i),
                second: source_field(app, j),
            });
        }
    }
    Ok(())
}

/// `spec.source`, or `spec.sources[i]` for a multi-source Application: the field errors name.
pub(super) fn source_field(app: &Application, i: usize) -> String {
    if app.spec.is_multi_source() {
        format!("spec.sources[{i}]")
    } else {
        "spec.source".to_string()
    }
}
