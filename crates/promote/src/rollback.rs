//! Rollback by Git revert of one Application, shared by the HTTP API and the CLI: which repository,
//! branch, paths and revision an Application's history entry means ([`revert_target`], refusing
//! Helm chart sources and sources from several repositories), the revert commit through
//! [`GitWriter::revert`] authored by the requesting user with the repository's credentials, then an
//! Event on the Application and a refresh request so the sync follows quickly. The controller's
//! automatic rollback (`spec.syncPolicy.autoRevert`) makes the same revert through
//! [`Promoter::auto_revert`], checked by the pure [`revert_place`], [`check_revert_write`] and
//! [`can_push`], and authored by Capstan's identity.

use capstan_api::Application;
use capstan_api::application::RollbackRefused;
use capstan_api::labels::REFRESH_ANNOTATION;
use capstan_gitwrite::{GitWriter, RevertError, RevertErrorKind, RevertRequest, Reverted, WriterConfig};
use capstan_source::Credentials;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::warn;

use crate::{ErrorKind, Promoter};

pub use capstan_gitwrite::revert::MAX_REASON_CHARS;

/// What an Application's history entry means in Git: the revert to make, without credentials,
/// author or reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevertTarget {
    /// The repository of the Application's (Git) sources.
    pub repo_url: String,
    /// The branch they track (`HEAD`: the default branch).
    pub branch: String,
    /// Their paths (`.`: the whole repository).
    pub paths: Vec<String>,
    /// The revision the history entry deployed.
    pub base: String,
}

/// Why a rollback by revert was not made.
#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    /// The request is unusable (no user).
    #[error("{0}")]
    BadRequest(String),
    /// The Application does not exist.
    #[error("Application {0:?} not found")]
    NotFound(String),
    /// The history entry does not exist.
    #[error("Application {app:?}: {source}")]
    History {
        /// The Application.
        app: String,
        /// Why.
        source: RollbackRefused,
    },
    /// The sources cannot be reverted together (they track different revisions).
    #[error("Application {app:?}: {message}")]
    Unsupported {
        /// The Application.
        app: String,
        /// Why.
        message: String,
    },
    /// The revert was refused or failed.
    #[error("Application {app:?}: {source}")]
    Revert {
        /// The Application.
        app: String,
        /// Why.
        source: RevertError,
    },
    /// The Application's project does not let Capstan write its files.
    #[error("Application {app:?}: {message}")]
    ProjectRefused {
        /// The Application.
        app: String,
        /// Which rule, and why.
        message: String,
    },
    /// The cluster refused or failed.
    #[error("{context}: {source}")]
    Kube {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: kube::Error,
    },
}

impl RollbackError {
    /// The class of this error: `Conflict` for a conflicting revert or every push rejected,
    /// `Unprocessable` for the refusals.
    pub fn kind(&self) -> ErrorKind {
        match self {
            RollbackError::BadRequest(_) => ErrorKind::BadRequest,
            RollbackError::NotFound(_) => ErrorKind::NotFound,
            RollbackError::History { .. } | RollbackError::Unsupported { .. } => ErrorKind::Unprocessable,
            RollbackError::ProjectRefused { .. } => ErrorKind::Forbidden,
            RollbackError::Revert { source, .. } => match source.kind() {
                RevertErrorKind::BadRequest => ErrorKind::BadRequest,
                RevertErrorKind::Conflict => ErrorKind::Conflict,
                RevertErrorKind::Refused => ErrorKind::Unprocessable,
                RevertErrorKind::Failed => ErrorKind::Internal,
            },
            RollbackError::Kube { .. } => ErrorKind::Internal,
        }
    }

    /// Whether Capstan refused (a conflict or a refusal), as opposed to failing.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Conflict | ErrorKind::Unprocessable | ErrorKind::BadRequest | ErrorKind::NotFound
        )
    }
}

/// Where a revert of `app` is made, whatever the revision: its repository, branch and paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevertPlace {
    /// The repository of the Application's (Git) sources.
    pub repo_url: String,
    /// The branch they track (`HEAD`: the default branch).
    pub branch: String,
    /// Their paths (`.`: the whole repository).
    pub paths: Vec<String>,
}

/// The repository, branch and paths a revert of `app` is made in; refused for a Helm chart source
/// and sources in several repositories or on several branches.
pub fn revert_place(app: &Application) -> Result<RevertPlace, RollbackError> {
    let name = app.name_any();
    let refused = |source: RevertError| RollbackError::Revert {
        app: name.clone(),
        source,
    };
    let sources = app.spec.sources();
    if let Some(chart) = sources.iter().find(|s| s.is_chart()) {
        return Err(refused(RevertError::ChartSource {
            chart: chart.chart.clone(),
        }));
    }
    let Some(first) = sources.first() else {
        return Err(RollbackError::Unsupported {
            app: name,
            message: "the Application has no source".into(),
        });
    };
    let same_repo = |a: &str, b: &str| {
        let norm = |u: &str| u.trim_end_matches('/').trim_end_matches(".git").to_string();
        norm(a) == norm(b)
    };
    if sources.iter().any(|s| !same_repo(&s.repo_url, &first.repo_url)) {
        let mut repos: Vec<String> = sources
            .iter()
            .map(|s| capstan_source::redact(&s.repo_url, &[]))
            .collect();
        repos.dedup();
        return Err(refused(RevertError::SeveralRepositories {
            repos: repos.join(", "),
        }));
    }
    if sources
        .iter()
        .any(|s| branch_of(&s.target_revision) != branch_of(&first.target_revision))
    {
        return Err(RollbackError::Unsupported {
            app: name,
            message: "its sources track different target revisions: a revert commit can only be made on one branch"
                .into(),
        });
    }
    // A `ref` source without a path only lends its files to the others: their paths are reverted.
    let mut paths: Vec<String> = sources
        .iter()
        .filter(|s| !s.path.is_empty() || s.ref_name.is_empty())
        .map(|s| if s.path.is_empty() { ".".into() } else { s.path.clone() })
        .collect();
    if paths.is_empty() {
        paths.push(".".into());
    }
    Ok(RevertPlace {
        repo_url: first.repo_url.clone(),
        branch: branch_of(&first.target_revision),
        paths,
    })
}

/// The branch a target revision names (`HEAD` for none).
fn branch_of(rev: &str) -> String {
    if rev.is_empty() {
        "HEAD".to_string()
    } else {
        rev.to_string()
    }
}

/// The revision history entry `entry` of `app` deployed (for a multi-source Application, the
/// first source's that is set).
pub fn entry_revision(app: &Application, entry: &capstan_api::application::RevisionHistory) -> String {
    if app.spec.is_multi_source() {
        entry
            .revisions
            .iter()
            .find(|r| !r.is_empty())
            .cloned()
            .unwrap_or_else(|| entry.revision.clone())
    } else {
        entry.revision.clone()
    }
}

/// The repository, branch, paths and revision a rollback of `app` to history entry `id` reverts
/// to; refused for a missing entry, a Helm chart source and sources in several repositories.
pub fn revert_target(app: &Application, id: i64) -> Result<RevertTarget, RollbackError> {
    let name = app.name_any();
    let history = app.status.as_ref().map(|s| s.history.as_slice()).unwrap_or_default();
    let entry = history
        .iter()
        .find(|h| h.id == id)
        .ok_or_else(|| RollbackError::History {
            app: name.clone(),
            source: RollbackRefused::NoHistoryEntry {
                id,
                known: history.iter().map(|h| h.id).collect(),
            },
        })?;
    let place = revert_place(app)?;
    Ok(RevertTarget {
        repo_url: place.repo_url,
        branch: place.branch,
        paths: place.paths,
        base: entry_revision(app, entry),
    })
}

/// Refuse unless the project `project_name` (with rules `rules`, as resolved) permits writing
/// under each of `place`'s paths on its branch: a `sourceRepoPaths` entry whose paths cover
/// PATH/** (the writer then refuses commits that change anything else).
pub fn check_revert_write(
    app: &str,
    project_name: &str,
    rules: &capstan_api::project::AppProjectSpec,
    place: &RevertPlace,
) -> Result<(), RollbackError> {
    let branch = if place.branch.is_empty() {
        "HEAD"
    } else {
        place.branch.as_str()
    };
    for path in &place.paths {
        // Any file under the path stands for all of them: a glob that covers PATH/** covers it.
        let file = if path == "." {
            "capstan-revert".to_string()
        } else {
            format!("{}/capstan-revert", path.trim_end_matches('/'))
        };
        let write = capstan_project::WriteTarget {
            repo_url: &place.repo_url,
            path: &file,
            branch,
        };
        capstan_project::check_write(project_name, rules, &write).map_err(|v| RollbackError::ProjectRefused {
            app: app.to_string(),
            message: format!("a revert writes under {path:?}, which the project does not permit: {v}"),
        })?;
    }
    Ok(())
}

/// Whether `credentials` can authenticate a push (a password or token, or an SSH key); a local
/// `file://` repository needs none.
pub fn can_push(credentials: &Credentials, repo_url: &str) -> bool {
    repo_url.starts_with("file://")
        || repo_url.starts_with('/')
        || credentials.password.as_deref().is_some_and(|p| !p.is_empty())
        || credentials.ssh_private_key.as_deref().is_some_and(|k| !k.is_empty())
}

/// An automatic revert (`spec.syncPolicy.autoRevert`), as the controller asks for it.
#[derive(Debug, Clone)]
pub struct AutoRevertRequest {
    /// The history entry to return to.
    pub id: i64,
    /// The commit's author (Capstan's identity).
    pub author_name: String,
    /// The commit author's e-mail.
    pub author_email: String,
    /// Why (the commit message's body and the Event).
    pub reason: String,
    /// Who publishes the Event.
    pub reporter: String,
    /// The revision judged Degraded: the branch must still point at it (what was pushed after
    /// it, a fix perhaps, is not reverted with it).
    pub revision: String,
}

impl Promoter {
    /// Refuse unless `app`'s project permits writing under each of `target`'s paths on its branch.
    async fn check_project_write(&self, app: &Application, target: &RevertTarget) -> Result<(), RollbackError> {
        let name = app.name_any();
        let lookup = if app.spec.project.is_empty() {
            capstan_api::project::DEFAULT_PROJECT
        } else {
            app.spec.project.as_str()
        };
        let projects: Api<capstan_api::AppProject> = Api::namespaced(self.client.clone(), &self.namespace);
        let found = projects.get_opt(lookup).await.map_err(|source| RollbackError::Kube {
            context: format!("reading AppProject {lookup}"),
            source,
        })?;
        let (project, rules) = capstan_project::resolve(lookup, found.map(|p| p.spec), self.deny_implicit_default)
            .map_err(|e| RollbackError::ProjectRefused {
                app: name.clone(),
                message: e.to_string(),
            })?;
        let place = RevertPlace {
            repo_url: target.repo_url.clone(),
            branch: target.branch.clone(),
            paths: target.paths.clone(),
        };
        check_revert_write(&name, &project, &rules, &place)
    }

    /// Roll `app` back to history entry `id` by one revert commit authored by `user` (see
    /// [`GitWriter::revert`]), then record an Event on the Application (reported as `reporter`)
    /// and ask the controller to refresh it. Allowed while automated sync is on: the sync follows
    /// the branch, which now holds the old content.
    pub async fn revert_rollback(
        &self,
        app: &str,
        id: i64,
        user: &str,
        reason: &str,
        reporter: &str,
    ) -> Result<Reverted, RollbackError> {
        if user.trim().is_empty() {
            return Err(RollbackError::BadRequest("the requesting user is unknown".into()));
        }
        let apps: Api<Application> = Api::namespaced(self.client.clone(), &self.namespace);
        let application = apps
            .get_opt(app)
            .await
            .map_err(|source| RollbackError::Kube {
                context: format!("reading Application {app}"),
                source,
            })?
            .ok_or_else(|| RollbackError::NotFound(app.to_string()))?;
        let target = revert_target(&application, id)?;
        // The project first, as for every other commit Capstan makes: it must let Capstan write
        // every file under the Application's paths on its branch (a `sourceRepoPaths` entry whose
        // paths cover PATH/**); the writer then refuses commits that change anything else.
        self.check_project_write(&application, &target).await?;
        let author = (user.trim().to_string(), crate::promote::email(user, &self.email_domain));
        let reverted = self
            .push_revert(&application, &target, id, author, reason, None)
            .await?;
        let short = |s: &str| s.get(..12).unwrap_or(s).to_string();
        let reverted_list: Vec<String> = reverted.reverted.iter().map(|s| short(s)).collect();
        let mut note = format!(
            "{user} rolled back to history {id} ({}) by reverting {} in commit {} on {}",
            short(&target.base),
            reverted_list.join(", "),
            short(&reverted.sha),
            reverted.branch
        );
        if !reason.trim().is_empty() {
            note.push_str(&format!(": {}", reason.trim()));
        }
        self.announce(&application, EventType::Normal, "RollbackReverted", note, reporter)
            .await;
        Ok(reverted)
    }

    /// Roll `app` back automatically (`spec.syncPolicy.autoRevert`) to history entry
    /// `request.id`: the same checks as [`Promoter::revert_rollback`] but judged by the project
    /// the caller read (`project`, `rules`), the same one revert commit, authored by Capstan's
    /// identity, then a Warning Event `AutoReverted` and a refresh. The caller makes sure it is
    /// made at most once per revision.
    pub async fn auto_revert(
        &self,
        app: &Application,
        project: &str,
        rules: &capstan_api::project::AppProjectSpec,
        request: &AutoRevertRequest,
    ) -> Result<Reverted, RollbackError> {
        let target = revert_target(app, request.id)?;
        let place = RevertPlace {
            repo_url: target.repo_url.clone(),
            branch: target.branch.clone(),
            paths: target.paths.clone(),
        };
        check_revert_write(&app.name_any(), project, rules, &place)?;
        let author = (request.author_name.clone(), request.author_email.clone());
        let reverted = self
            .push_revert(
                app,
                &target,
                request.id,
                author,
                &request.reason,
                Some(&request.revision),
            )
            .await?;
        let short = |s: &str| s.get(..12).unwrap_or(s).to_string();
        let reverted_list: Vec<String> = reverted.reverted.iter().map(|s| short(s)).collect();
        let note = format!(
            "rolled back automatically to history {} ({}) by reverting {} in commit {} on {}: {}",
            request.id,
            short(&target.base),
            reverted_list.join(", "),
            short(&reverted.sha),
            reverted.branch,
            request.reason.trim()
        );
        self.announce(app, EventType::Warning, "AutoReverted", note, &request.reporter)
            .await;
        Ok(reverted)
    }

    /// The revert commit of `target` through [`GitWriter::revert`], authored by `author`, with the
    /// repository's credentials.
    async fn push_revert(
        &self,
        app: &Application,
        target: &RevertTarget,
        id: i64,
        author: (String, String),
        reason: &str,
        expected_head: Option<&str>,
    ) -> Result<Reverted, RollbackError> {
        let name = app.name_any();
        let credentials = capstan_cluster::repository::for_repo(&self.client, &self.namespace, &target.repo_url)
            .await
            .unwrap_or_default();
        let mut config = WriterConfig::new(author.0, author.1);
        config.allow_local = self.allow_local;
        config.timeout = self.timeout;
        let request = RevertRequest {
            repo_url: target.repo_url.clone(),
            credentials,
            branch: target.branch.clone(),
            paths: target.paths.clone(),
            base: target.base.clone(),
            app: name.clone(),
            history_id: id,
            reason: reason.to_string(),
            expected_head: expected_head.map(str::to_string),
        };
        GitWriter::new(config)
            .revert(&request)
            .await
            .map_err(|source| RollbackError::Revert { app: name, source })
    }

    /// Record `note` as an Event on `app` (reported as `reporter`) and ask the controller to
    /// refresh it, so the sync follows quickly. Failures are logged: the commit is made.
    async fn announce(&self, app: &Application, type_: EventType, reason: &str, note: String, reporter: &str) {
        let name = app.name_any();
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(capstan_redact::scrub(&truncate(&note, 1000))),
            action: "Rollback".into(),
            secondary: None,
        };
        let recorder = Recorder::new(
            self.client.clone(),
            Reporter {
                controller: reporter.into(),
                instance: None,
            },
        );
        if let Err(err) = recorder.publish(&event, &app.object_ref(&())).await {
            warn!(%err, app = %name, "recording the rollback Event");
        }
        let namespace = app.namespace().unwrap_or_else(|| self.namespace.clone());
        let apps: Api<Application> = Api::namespaced(self.client.clone(), &namespace);
        let refresh = json!({"metadata": {"annotations": {REFRESH_ANNOTATION: "normal"}}});
        if let Err(err) = apps
            .patch(&name, &PatchParams::default(), &Patch::Merge(&refresh))
            .await
        {
            warn!(%err, app = %name, "asking for a refresh after the revert");
        }
    }
}

/// `text` cut to at most `max` characters.
fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::application::{ApplicationSource, RevisionHistory};

    fn app(sources: Vec<ApplicationSource>, history: Vec<RevisionHistory>) -> Application {
        let mut app: Application = serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1",
            "kind": "Application",
            "metadata": {"name": "web", "namespace": "capstan"},
            "spec": {"destination": {"namespace": "web"}, "source": {"repoURL": ""}},
        }))
        .expect("application");
        if let [one] = sources.as_slice() {
            app.spec.source = one.clone();
        } else {
            app.spec.sources = sources;
        }
        app.status = Some(Default::default());
        if let Some(status) = app.status.as_mut() {
            status.history = history;
        }
        app
    }

    fn git(repo: &str, path: &str, rev: &str) -> ApplicationSource {
        ApplicationSource {
            repo_url: repo.into(),
            path: path.into(),
            target_revision: rev.into(),
            ..Default::default()
        }
    }

    fn entry(id: i64, revision: &str, revisions: &[&str]) -> RevisionHistory {
        RevisionHistory {
            id,
            revision: revision.into(),
            deployed_at: String::new(),
            source: Default::default(),
            revisions: revisions.iter().map(|r| r.to_string()).collect(),
            sources: vec![],
        }
    }

    #[test]
    fn a_git_path_source_reverts_its_path_on_its_branch() {
        let sha = "a".repeat(40);
        let target = revert_target(
            &app(
                vec![git("https://g/r.git", "apps/web", "main")],
                vec![entry(3, &sha, &[])],
            ),
            3,
        )
        .expect("target");
        assert_eq!(
            target,
            RevertTarget {
                repo_url: "https://g/r.git".into(),
                branch: "main".into(),
                paths: vec!["apps/web".into()],
                base: sha.clone(),
            }
        );
        let whole =
            revert_target(&app(vec![git("https://g/r.git", "", "")], vec![entry(1, &sha, &[])]), 1).expect("target");
        assert_eq!((whole.branch.as_str(), whole.paths), ("HEAD", vec![".".to_string()]));
        let missing = revert_target(
            &app(vec![git("https://g/r.git", "x", "main")], vec![entry(1, &sha, &[])]),
            2,
        )
        .expect_err("no entry");
        assert_eq!(missing.kind(), ErrorKind::Unprocessable);
    }

    #[test]
    fn multi_source_from_one_repository_reverts_every_path() {
        let sha = "b".repeat(40);
        let mut values = git("https://g/r", "", "main");
        values.ref_name = "values".into();
        let target = revert_target(
            &app(
                vec![
                    git("https://g/r.git", "apps/web", "main"),
                    git("https://g/r", "apps/common", "main"),
                    values,
                ],
                vec![entry(5, "", &[&sha, &sha, &sha])],
            ),
            5,
        )
        .expect("target");
        assert_eq!(target.paths, vec!["apps/web".to_string(), "apps/common".into()]);
        assert_eq!(target.base, sha);
    }

    #[test]
    fn charts_several_repositories_and_several_branches_are_refused() {
        let sha = "c".repeat(40);
        let mut chart = git("https://charts.example", "", "1.2.0");
        chart.chart = "nginx".into();
        let err = revert_target(&app(vec![chart], vec![entry(1, "1.2.0", &[])]), 1).expect_err("chart");
        assert!(
            matches!(
                &err,
                RollbackError::Revert {
                    source: RevertError::ChartSource { .. },
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.kind(), ErrorKind::Unprocessable);
        let err = revert_target(
            &app(
                vec![git("https://g/a.git", "x", "main"), git("https://g/b.git", "y", "main")],
                vec![entry(1, "", &[&sha, &sha])],
            ),
            1,
        )
        .expect_err("two repositories");
        assert!(err.to_string().contains("several repositories"), "{err}");
        assert_eq!(err.kind(), ErrorKind::Unprocessable);
        let err = revert_target(
            &app(
                vec![git("https://g/a.git", "x", "main"), git("https://g/a.git", "y", "dev")],
                vec![entry(1, "", &[&sha, &sha])],
            ),
            1,
        )
        .expect_err("two branches");
        assert_eq!(err.kind(), ErrorKind::Unprocessable);
    }

    #[test]
    fn a_push_needs_a_password_or_a_key_except_locally() {
        let none = Credentials::default();
        assert!(!can_push(&none, "https://g/r.git"));
        let user_only = Credentials {
            username: Some("u".into()),
            ..Default::default()
        };
        assert!(!can_push(&user_only, "https://g/r.git"));
        let token = Credentials {
            password: Some("t".into()),
            ..Default::default()
        };
        assert!(can_push(&token, "https://g/r.git"));
        let key = Credentials {
            ssh_private_key: Some("k".into()),
            ..Default::default()
        };
        assert!(can_push(&key, "ssh://git@g/r.git"));
        assert!(can_push(&none, "file:///srv/r.git"));
    }

    #[test]
    fn the_project_must_permit_writing_under_the_path() {
        let place = revert_place(&app(vec![git("https://g/r.git", "apps/web", "main")], vec![])).expect("place");
        let rules: capstan_api::project::AppProjectSpec = serde_json::from_value(json!({
            "sourceRepos": ["*"],
            "sourceRepoPaths": [{"repo": "*", "paths": ["apps/other/**"], "branches": ["main"]}],
        }))
        .expect("rules");
        let err = check_revert_write("web", "narrow", &rules, &place).expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::Forbidden);
        assert!(err.to_string().contains("apps/web"), "{err}");
        let rules: capstan_api::project::AppProjectSpec = serde_json::from_value(json!({
            "sourceRepos": ["*"],
            "sourceRepoPaths": [{"repo": "*", "paths": ["apps/**"], "branches": ["main"]}],
        }))
        .expect("rules");
        check_revert_write("web", "wide", &rules, &place).expect("permitted");
    }

    #[test]
    fn long_notes_are_cut() {
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(truncate("abcd", 3), "abc…");
    }
}
