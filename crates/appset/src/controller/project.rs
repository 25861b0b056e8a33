//! The project an ApplicationSet belongs to, and the two rules it keeps its generators and
//! Applications to:
//!
//! - **The set's project** is the one its template names literally (`spec.template.spec.project`;
//!   empty: `default`) — the field the app-of-apps rule of the Application controller checks when an
//!   Application renders the set. A template whose project is a `{{placeholder}}` names no project
//!   and belongs to `default`.
//! - **Every generated Application is checked after generation** — after templating, the
//!   `templatePatch`, and every generator's own `template` — never the template fields: an
//!   Application whose final `spec.project` is not the set's is refused, whatever produced it. Only
//!   the implicit `default` project (no AppProject named `default`, and the operator did not turn it
//!   off), which permits everything anyway, may generate Applications of other projects (the usual
//!   bootstrap), as an Application of it may render them.
//! - **Git generators read only repositories the project's `sourceRepos` permit**, checked before
//!   the repository is fetched (sources a matrix names during generation included).
//!
//! A refusal stops the whole generation: nothing is created, changed or deleted, and the
//! `ErrorOccurred` condition names the Application or repository and the project.

use capstan_api::project::{AppProjectSpec, DEFAULT_PROJECT};
use capstan_api::{AppProject, Application, ApplicationSet};
use capstan_kube::describe_kube_error;
use kube::ResourceExt;
use kube::api::Api;

use super::problem::Problem;
use crate::GitSource;

/// The condition reason of an Application generated outside the set's project.
pub(super) const PROJECT_NOT_PERMITTED: &str = "ApplicationProjectNotPermitted";
/// The condition reason of a git generator repository the project does not permit.
pub(super) const REPOSITORY_NOT_PERMITTED: &str = "RepositoryNotPermitted";

/// The project of one set and its rules.
pub(super) struct SetProject {
    name: String,
    spec: AppProjectSpec,
    /// The implicit `default` project: it permits Applications of every project.
    implicit_default: bool,
}

/// The project `set` belongs to, by name (see the module documentation).
pub(super) fn project_name(set: &ApplicationSet) -> &str {
    let named = set.spec.template.spec.project.trim();
    if named.is_empty() || named.contains("{{") {
        DEFAULT_PROJECT
    } else {
        named
    }
}

impl SetProject {
    /// Look up the set's project in `namespace` (Capstan's).
    pub(super) async fn of(
        client: &kube::Client,
        namespace: &str,
        set: &ApplicationSet,
        deny_implicit_default: bool,
    ) -> Result<SetProject, Problem> {
        let name = project_name(set);
        let api: Api<AppProject> = Api::namespaced(client.clone(), namespace);
        let found = api.get_opt(name).await.map_err(|e| Problem {
            reason: "ProjectUnavailable",
            message: format!("reading AppProject {name:?}: {}", describe_kube_error(&e)),
        })?;
        let (name, spec) =
            capstan_project::resolve(name, found.map(|p| p.spec), deny_implicit_default).map_err(|e| Problem {
                reason: "UnknownProject",
                message: format!(
                    "the ApplicationSet belongs to project {:?} (spec.template.spec.project), but {e} in \
                     namespace {namespace:?}; nothing was generated and no Application was changed",
                    e.name
                ),
            })?;
        Ok(SetProject::new(name, spec))
    }

    pub(super) fn new(name: String, spec: AppProjectSpec) -> SetProject {
        let implicit_default = capstan_project::is_implicit_default(&name, &spec);
        SetProject {
            name,
            spec,
            implicit_default,
        }
    }

    /// Whether a git generator may read `source`'s repository.
    pub(super) fn check_repository(&self, source: &GitSource) -> Result<(), Problem> {
        capstan_project::check_source(&self.name, &self.spec, &source.repo_url).map_err(|violation| Problem {
            reason: REPOSITORY_NOT_PERMITTED,
            message: format!(
                "git generator repository {:?}: {violation}; the repository was not read, nothing was generated \
                 and no Application was changed",
                source.repo_url
            ),
        })
    }

    /// Whether every generated Application belongs to the set's project.
    pub(super) fn check_generated(&self, apps: &[Application]) -> Result<(), Problem> {
        if self.implicit_default {
            return Ok(());
        }
        let refused: Vec<String> = apps
            .iter()
            .filter_map(|app| {
                let project = app.spec.project.as_str();
                let project = if project.is_empty() { DEFAULT_PROJECT } else { project };
                (project != self.name).then(|| format!("Application {} names project {project:?}", app.name_any()))
            })
            .collect();
        let Some(first) = refused.first() else {
            return Ok(());
        };
        let more = match refused.len() {
            1 => String::new(),
            n => format!(" (and {} more: {})", n - 1, refused[1..].join(", ")),
        };
        Err(Problem {
            reason: PROJECT_NOT_PERMITTED,
            message: format!(
                "{first}{more}, but the ApplicationSet belongs to project {:?} (spec.template.spec.project) and may \
                 only generate Applications of that project, whatever the template, templatePatch or a generator's \
                 template say; nothing was created or changed and no Application was deleted",
                self.name
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use capstan_api::project::ProjectDestination;

    use super::*;

    fn team_a() -> AppProjectSpec {
        AppProjectSpec {
            source_repos: vec!["http://127.0.0.1:*/team-a/*".into()],
            destinations: vec![ProjectDestination {
                server: "*".into(),
                name: String::new(),
                namespace: "team-a".into(),
            }],
            ..Default::default()
        }
    }

    fn app(name: &str, project: &str) -> Application {
        let mut app = Application::new(name, Default::default());
        app.spec.project = project.into();
        app
    }

    #[test]
    fn the_set_belongs_to_the_project_its_template_names_literally() {
        let mut set = ApplicationSet::new("s", Default::default());
        assert_eq!(project_name(&set), "default");
        set.spec.template.spec.project = "team-a".into();
        assert_eq!(project_name(&set), "team-a");
        set.spec.template.spec.project = "{{team}}".into();
        assert_eq!(project_name(&set), "default", "a placeholder names no project");
    }

    #[test]
    fn generated_applications_of_another_project_are_refused_by_name() {
        let p = SetProject::new("team-a".into(), team_a());
        assert!(p.check_generated(&[app("a", "team-a"), app("b", "team-a")]).is_ok());
        let err = p
            .check_generated(&[app("a", "team-a"), app("escape", "default"), app("empty", "")])
            .unwrap_err();
        assert_eq!(err.reason, PROJECT_NOT_PERMITTED);
        assert!(
            err.message.contains("Application escape names project \"default\"")
                && err.message.contains("Application empty names project \"default\"")
                && err.message.contains("belongs to project \"team-a\""),
            "{}",
            err.message
        );
    }

    #[test]
    fn only_the_implicit_default_project_generates_other_projects() {
        let implicit = SetProject::new("default".into(), capstan_project::allow_all());
        assert!(implicit.check_generated(&[app("a", "team-a")]).is_ok());
        // Denied (--deny-implicit-default-project) or an explicit AppProject named default: no.
        let denied = SetProject::new("default".into(), AppProjectSpec::default());
        assert!(denied.check_generated(&[app("a", "team-a")]).is_err());
    }

    #[test]
    fn git_generator_repositories_follow_source_repos() {
        let p = SetProject::new("team-a".into(), team_a());
        assert!(
            p.check_repository(&GitSource::new("http://127.0.0.1:9418/team-a/apps", "HEAD"))
                .is_ok()
        );
        let err = p
            .check_repository(&GitSource::new("http://127.0.0.1:9418/team-b/apps", "HEAD"))
            .unwrap_err();
        assert_eq!(err.reason, REPOSITORY_NOT_PERMITTED);
        assert!(
            err.message.contains("team-b/apps") && err.message.contains("sourceRepos"),
            "{}",
            err.message
        );
    }
}
