//! Automatic rollback by Git revert (`spec.syncPolicy.autoRevert`): on every reconcile, whether the
//! Application can be reverted at all (a Git source in one repository, a project that permits the
//! write, credentials that can push — shown as an `AutoRevertError` condition when not), how long it
//! has stayed Degraded at the revision its last sync deployed, and, past `degradedFor`, the one
//! revert commit back to the previous history entry, made through `capstan-promote`'s revert.
//!
//! At most once per revision: the record ([`AUTO_REVERTED_ANNOTATION`]) is written first, with the
//! Application's resourceVersion as a precondition, and only then is the commit pushed (the pattern
//! of the notifications' record). A restart, a second replica or a stale copy sees the record and
//! does nothing; a revert commit Capstan made is never reverted itself. Only the replica that owns
//! the Application reconciles it, so only it acts. How long it has been Degraded is kept in memory
//! by that replica: a restart or a change of owner starts the clock again.

use std::time::Duration;

use capstan_api::Application;
use capstan_api::application::{ApplicationStatus, RevisionHistory, SyncStatus};
use capstan_api::labels::AUTO_REVERTED_ANNOTATION;
use capstan_api::status::{ConditionType, HealthCode};
use capstan_promote::{AutoRevertRequest, RollbackError};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::context::Ctx;
use crate::pipeline::AppState;
use crate::projects::Project;
use crate::status::set_condition;

/// The field, as conditions name it.
pub const FIELD: &str = "spec.syncPolicy.autoRevert";

/// What the controller records on the Application before it reverts (the annotation's JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The revision that stayed Degraded and is reverted.
    pub revision: String,
    /// The history entry returned to.
    pub history_id: i64,
    /// When the revert was decided (RFC 3339).
    pub at: String,
    /// The revert commit, once pushed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub commit: String,
    /// Why the revert failed, if it did (it is not tried again for this revision).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

impl Record {
    /// The record stored on `app`, if any (an unreadable one counts as none that matches).
    pub fn of(app: &Application) -> Option<Record> {
        let text = app.annotations().get(AUTO_REVERTED_ANNOTATION)?;
        match serde_json::from_str(text) {
            Ok(record) => Some(record),
            Err(err) => {
                tracing::warn!(app = %app.name_any(), %err, "unreadable {AUTO_REVERTED_ANNOTATION} annotation");
                None
            }
        }
    }
}

/// Why an Application's `autoRevert` cannot act, checked on every reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The Application has several sources.
    #[error("{FIELD} is refused: the Application has several sources; automatic reverts cover one Git source")]
    SeveralSources,
    /// The source, the project or the branch does not allow a revert.
    #[error("{FIELD} is refused: {0}")]
    Rollback(RollbackError),
    /// No repository Secret with credentials that can push.
    #[error(
        "{FIELD} is refused: no repository Secret gives credentials that can push to {0} (a password or token, or an SSH key with write access)"
    )]
    NoWriteCredentials(String),
    /// The Application is Degraded at its first history entry: there is nothing to return to.
    #[error(
        "{FIELD} cannot act: the Application is Degraded at {0}, the first revision in its history; there is no earlier entry to revert to"
    )]
    NoEarlierEntry(String),
    /// The entry before took its objects from another repository, path or branch: a revert of the
    /// commits between would write the old source's content over the new one.
    #[error(
        "{FIELD} cannot act: the history entry before {0} deployed another repository, path or branch than spec.source; revert by hand (capstan app rollback --revert) if that is meant"
    )]
    SourceChanged(String),
}

/// What to do about one Application's degradation now; pure, see [`judge`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not Degraded, or not at the revision last synced, or an operation runs: nothing to watch.
    Clear,
    /// This revision was reverted already, or is a revert Capstan made: never again.
    Done,
    /// Degraded at the first history entry: nothing to return to.
    NoEarlierEntry {
        /// The revision.
        revision: String,
    },
    /// Degraded at `revision`, but the entry before deployed another source (repository, path or
    /// branch) than the spec's: not reverted.
    SourceChanged {
        /// The revision.
        revision: String,
    },
    /// Degraded at `revision`; to be reverted once it has been for `remaining` more.
    Waiting {
        /// The revision.
        revision: String,
        /// How much longer.
        remaining: Duration,
    },
    /// Degraded at `revision` for longer than allowed: revert to history entry `to`.
    Revert {
        /// The revision.
        revision: String,
        /// The history entry to return to.
        to: i64,
        /// The revision of that entry.
        base: String,
        /// How long it has been Degraded.
        degraded: Duration,
    },
}

/// The last sync's history entry, if the Application is still at it (its sync revision, the branch
/// head it compares with, is that entry's revision: nothing newer in Git).
fn current_entry(status: &ApplicationStatus) -> Option<&RevisionHistory> {
    let last = status.history.iter().max_by_key(|h| h.id)?;
    let at = status.sync.as_ref().map(|s| s.revision.as_str()).unwrap_or_default();
    (!last.revision.is_empty() && last.revision == at).then_some(last)
}

/// Whether the Application is Degraded, not operating, at the revision its last sync deployed;
/// that revision.
pub fn degraded_revision(app: &Application, status: &ApplicationStatus) -> Option<String> {
    let degraded = status.health.as_ref().is_some_and(|h| h.status == HealthCode::Degraded);
    if !degraded || app.operation_running() {
        return None;
    }
    current_entry(status).map(|e| e.revision.clone())
}

/// Decide for `status` (`record`: what was reverted before; `degraded`: how long it has been
/// Degraded at the current revision, `None` when it is not; `limit`: `degradedFor`).
pub fn judge(
    app: &Application,
    status: &ApplicationStatus,
    record: Option<&Record>,
    degraded: Option<Duration>,
    limit: Duration,
) -> Verdict {
    let (Some(revision), Some(degraded)) = (degraded_revision(app, status), degraded) else {
        return Verdict::Clear;
    };
    if let Some(record) = record
        && (record.revision == revision || record.commit == revision)
    {
        return Verdict::Done;
    }
    let Some(current) = current_entry(status) else {
        return Verdict::Clear;
    };
    // The entry before: the newest older one that deployed something else.
    let Some(previous) = status
        .history
        .iter()
        .filter(|h| h.id < current.id && !h.revision.is_empty() && h.revision != revision)
        .max_by_key(|h| h.id)
    else {
        return Verdict::NoEarlierEntry { revision };
    };
    let same = |a: &capstan_api::application::ApplicationSource| {
        let b = &app.spec.source;
        a.repo_url == b.repo_url && a.path == b.path && a.target_revision == b.target_revision
    };
    if !same(&previous.source) || !same(&current.source) {
        return Verdict::SourceChanged { revision };
    }
    if degraded < limit {
        return Verdict::Waiting {
            revision,
            remaining: limit - degraded,
        };
    }
    Verdict::Revert {
        revision,
        to: previous.id,
        base: previous.revision.clone(),
        degraded,
    }
}

/// `spec.syncPolicy.autoRevert.degradedFor`, when set and valid (the pipeline refuses an invalid
/// one before this is asked).
pub fn limit(app: &Application) -> Option<Duration> {
    let policy = app.spec.sync_policy.as_ref()?.auto_revert.as_ref()?;
    crate::automated::parse_duration(&policy.degraded_for).filter(|d| !d.is_zero())
}

/// Whether `app` (of `project`) can be reverted: its source, the project's write rules and the
/// repository's credentials.
pub async fn check(ctx: &Ctx, app: &Application, project: &Project) -> Result<(), Refusal> {
    if app.spec.is_multi_source() {
        return Err(Refusal::SeveralSources);
    }
    let place = capstan_promote::revert_place(app).map_err(Refusal::Rollback)?;
    capstan_promote::check_revert_write(&app.name_any(), &project.name, &project.spec, &place)
        .map_err(Refusal::Rollback)?;
    let credentials = capstan_cluster::repository::for_repo(&ctx.client, &ctx.config.namespace, &place.repo_url)
        .await
        .unwrap_or_default();
    if !capstan_promote::can_push(&credentials, &place.repo_url) {
        return Err(Refusal::NoWriteCredentials(capstan_source::redact(
            &place.repo_url,
            &[],
        )));
    }
    Ok(())
}

/// Set or clear the `AutoRevertError` condition in `status`: a refusal, a revert of the current
/// revision (`at`, the last synced one while Git has nothing newer) that failed, or nothing.
pub fn show(app: &Application, at: Option<&str>, status: &mut ApplicationStatus, problem: Option<String>) {
    let failed = Record::of(app).filter(|r| !r.error.is_empty()).and_then(|r| {
        (Some(r.revision.as_str()) == at).then(|| {
            format!(
                "the automatic revert of {} failed (it is not tried again for this revision): {}",
                short(&r.revision),
                r.error
            )
        })
    });
    status.conditions.retain(|c| c.type_ != ConditionType::AutoRevertError);
    if let Some(message) = problem.or(failed) {
        set_condition(status, ConditionType::AutoRevertError, message);
    }
}

/// What the reconcile learns from [`before_write`]: whether to look at the degradation after the
/// status is written.
pub enum Armed {
    /// No `autoRevert`, or it cannot act.
    Off,
    /// It can act.
    On(Duration),
}

/// Before the status write: check `app`'s `autoRevert` (when it has one) and show the result in
/// `status`.
pub async fn before_write(
    ctx: &Ctx,
    app: &Application,
    project: Option<&Project>,
    state: Option<&AppState>,
    status: &mut ApplicationStatus,
) -> Armed {
    let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    let (Some(limit), Some(project)) = (limit(app), project) else {
        ctx.auto_reverts.running(&key, None);
        if limit(app).is_none() {
            show(app, None, status, None);
        }
        return Armed::Off;
    };
    match check(ctx, app, project).await {
        Err(refusal) => {
            ctx.auto_reverts.running(&key, None);
            show(app, None, status, Some(refusal.to_string()));
            Armed::Off
        }
        Ok(()) => {
            // Judged on the status as this write will store it.
            let mut probe = status.clone();
            if let Some(state) = state {
                probe.health = Some(state.health.clone());
                probe.sync = Some(SyncStatus {
                    status: state.comparison.sync(),
                    revision: state.revision.id(),
                    revisions: state.revision.revisions(),
                });
            }
            let problem = match degraded_revision(app, &probe) {
                Some(revision) => {
                    let verdict = judge(app, &probe, Record::of(app).as_ref(), Some(Duration::ZERO), limit);
                    match verdict {
                        Verdict::NoEarlierEntry { .. } => {
                            Some(Refusal::NoEarlierEntry(short(&revision).to_string()).to_string())
                        }
                        Verdict::SourceChanged { .. } => {
                            Some(Refusal::SourceChanged(short(&revision).to_string()).to_string())
                        }
                        _ => None,
                    }
                }
                None => None,
            };
            let at = current_entry(&probe).map(|e| e.revision.clone());
            show(app, at.as_deref(), status, problem);
            Armed::On(limit)
        }
    }
}

/// After the status write (`app` as stored): time the degradation and revert when it has lasted
/// too long. Answers how soon to look again, if sooner than usual.
pub async fn after_write(ctx: &Ctx, app: &Application, project: &Project, limit: Duration) -> Option<Duration> {
    let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    let status = app.status.clone().unwrap_or_default();
    let degraded = ctx
        .auto_reverts
        .running(&key, degraded_revision(app, &status).as_deref());
    match judge(app, &status, Record::of(app).as_ref(), degraded, limit) {
        Verdict::Clear | Verdict::Done | Verdict::NoEarlierEntry { .. } | Verdict::SourceChanged { .. } => None,
        Verdict::Waiting { remaining, .. } => Some(remaining + Duration::from_millis(200)),
        Verdict::Revert {
            revision,
            to,
            base,
            degraded,
        } => {
            revert(ctx, app, project, &revision, to, &base, degraded).await;
            Some(Duration::from_secs(1))
        }
    }
}

/// Record, then revert `revision` back to history entry `to`; record the outcome.
async fn revert(
    ctx: &Ctx,
    app: &Application,
    project: &Project,
    revision: &str,
    to: i64,
    base: &str,
    degraded: Duration,
) {
    let name = app.name_any();
    let namespace = app.namespace().unwrap_or_default();
    let api: Api<Application> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut record = Record {
        revision: revision.to_string(),
        history_id: to,
        at: crate::clock::now(),
        commit: String::new(),
        error: String::new(),
    };
    // The record first, on this very version: if anyone wrote the Application since (another
    // replica's record, a new sync), the write fails and nothing is reverted in this pass.
    let Ok(text) = serde_json::to_string(&record) else {
        return;
    };
    let patch = json!({"metadata": {
        "resourceVersion": app.resource_version(),
        "annotations": {AUTO_REVERTED_ANNOTATION: text},
    }});
    let recorded = match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(stored) => stored,
        Err(err) => {
            tracing::debug!(app = %name, %err, "recording the automatic revert (a newer version follows)");
            return;
        }
    };
    let degraded_for = humantime::format_duration(Duration::from_secs(degraded.as_secs()));
    let reason = format!(
        "Automatic revert (spec.syncPolicy.autoRevert): Degraded for {degraded_for} after syncing {}; back to history {to} ({}).",
        short(revision),
        short(base)
    );
    let promoter = capstan_promote::Promoter {
        client: ctx.client.clone(),
        namespace: ctx.config.namespace.clone(),
        allow_local: ctx.config.allow_local_repositories,
        timeout: Duration::from_secs(60),
        email_domain: "capstan.invalid".into(),
        deny_implicit_default: ctx.config.deny_implicit_default_project,
    };
    let request = AutoRevertRequest {
        id: to,
        author_name: ctx.config.git_author_name.clone(),
        author_email: ctx.config.git_author_email.clone(),
        reason,
        reporter: ctx.reporter().controller,
        revision: revision.to_string(),
    };
    match promoter
        .auto_revert(&recorded, &project.name, &project.spec, &request)
        .await
    {
        Ok(reverted) => {
            tracing::info!(app = %name, revision, commit = %reverted.sha, to, "reverted automatically");
            record.commit = reverted.sha;
        }
        Err(err) => {
            tracing::warn!(app = %name, revision, %err, "automatic revert failed");
            record.error = capstan_redact::scrub(&err.to_string());
            ctx.event(
                app,
                kube::runtime::events::EventType::Warning,
                "AutoRevertFailed",
                format!("the automatic revert of {} failed: {}", short(revision), record.error),
            )
            .await;
        }
    }
    let Ok(text) = serde_json::to_string(&record) else {
        return;
    };
    let patch = json!({"metadata": {"annotations": {AUTO_REVERTED_ANNOTATION: text}}});
    if let Err(err) = api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        tracing::warn!(app = %name, %err, "recording the automatic revert's outcome");
    }
}

/// A commit id shortened to 12 characters.
fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::application::HealthStatus;
    use capstan_api::status::SyncCode;

    fn app(history: &[(i64, &str)], at: &str, health: HealthCode) -> (Application, ApplicationStatus) {
        let app: Application = serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1",
            "kind": "Application",
            "metadata": {"name": "web", "namespace": "capstan"},
            "spec": {"destination": {"namespace": "web"}, "source": {"repoURL": "https://g/r", "path": "web"},
                     "syncPolicy": {"autoRevert": {"degradedFor": "10s"}}},
        }))
        .expect("application");
        let status = ApplicationStatus {
            history: history
                .iter()
                .map(|(id, rev)| RevisionHistory {
                    id: *id,
                    revision: rev.to_string(),
                    deployed_at: String::new(),
                    source: app.spec.source.clone(),
                    revisions: vec![],
                    sources: vec![],
                })
                .collect(),
            sync: Some(SyncStatus {
                status: SyncCode::Synced,
                revision: at.into(),
                revisions: vec![],
            }),
            health: Some(HealthStatus {
                status: health,
                message: String::new(),
            }),
            ..Default::default()
        };
        (app, status)
    }

    #[test]
    fn an_entry_of_another_source_is_not_reverted_to() {
        let (mut app, status) = app(&[(0, "a"), (1, "b")], "b", HealthCode::Degraded);
        let limit = Duration::from_secs(10);
        let verdict = judge(&app, &status, None, Some(Duration::from_secs(60)), limit);
        assert!(matches!(verdict, Verdict::Revert { to: 0, .. }), "{verdict:?}");
        // The Application now follows another path: the entries name the old one.
        app.spec.source.path = "web-v2".into();
        let verdict = judge(&app, &status, None, Some(Duration::from_secs(60)), limit);
        assert_eq!(verdict, Verdict::SourceChanged { revision: "b".into() });
    }

    const LIMIT: Duration = Duration::from_secs(10);

    #[test]
    fn a_revision_degraded_too_long_is_reverted_to_the_entry_before() {
        let (a, s) = app(&[(0, "v1"), (1, "v2")], "v2", HealthCode::Degraded);
        assert_eq!(
            judge(&a, &s, None, Some(Duration::from_secs(11)), LIMIT),
            Verdict::Revert {
                revision: "v2".into(),
                to: 0,
                base: "v1".into(),
                degraded: Duration::from_secs(11)
            }
        );
        assert_eq!(
            judge(&a, &s, None, Some(Duration::from_secs(4)), LIMIT),
            Verdict::Waiting {
                revision: "v2".into(),
                remaining: Duration::from_secs(6)
            }
        );
    }

    #[test]
    fn healthy_newer_or_first_revisions_are_not_reverted() {
        let (a, s) = app(&[(0, "v1"), (1, "v2")], "v2", HealthCode::Healthy);
        assert_eq!(judge(&a, &s, None, None, LIMIT), Verdict::Clear);
        // Git moved on (v3 not synced yet): not at the last synced revision.
        let (a, s) = app(&[(0, "v1"), (1, "v2")], "v3", HealthCode::Degraded);
        assert_eq!(degraded_revision(&a, &s), None);
        assert_eq!(judge(&a, &s, None, Some(LIMIT * 2), LIMIT), Verdict::Clear);
        let (a, s) = app(&[(0, "v1")], "v1", HealthCode::Degraded);
        assert_eq!(
            judge(&a, &s, None, Some(LIMIT * 2), LIMIT),
            Verdict::NoEarlierEntry { revision: "v1".into() }
        );
        // A second sync of the same revision is no earlier entry.
        let (a, s) = app(&[(0, "v1"), (1, "v2"), (2, "v2")], "v2", HealthCode::Degraded);
        assert!(matches!(
            judge(&a, &s, None, Some(LIMIT * 2), LIMIT),
            Verdict::Revert { to: 0, .. }
        ));
    }

    #[test]
    fn a_revision_is_reverted_once_and_a_revert_never() {
        let (a, s) = app(&[(0, "v1"), (1, "v2")], "v2", HealthCode::Degraded);
        let record = Record {
            revision: "v2".into(),
            history_id: 0,
            ..Default::default()
        };
        assert_eq!(judge(&a, &s, Some(&record), Some(LIMIT * 2), LIMIT), Verdict::Done);
        // The revert commit itself stays Degraded: not reverted in turn.
        let (a, s) = app(&[(0, "v1"), (1, "v2"), (2, "r")], "r", HealthCode::Degraded);
        let record = Record {
            revision: "v2".into(),
            commit: "r".into(),
            ..Default::default()
        };
        assert_eq!(judge(&a, &s, Some(&record), Some(LIMIT * 2), LIMIT), Verdict::Done);
        // A later bad revision is reverted (to the revert's entry).
        let (a, s) = app(&[(0, "v1"), (1, "v2"), (2, "r"), (3, "v3")], "v3", HealthCode::Degraded);
        assert!(matches!(
            judge(&a, &s, Some(&record), Some(LIMIT * 2), LIMIT),
            Verdict::Revert { to: 2, .. }
        ));
    }

    #[test]
    fn records_round_trip() {
        let record = Record {
            revision: "v2".into(),
            history_id: 3,
            at: "2026-01-01T00:00:00Z".into(),
            commit: "c".into(),
            error: String::new(),
        };
        let text = serde_json::to_string(&record).expect("json");
        assert_eq!(
            text,
            r#"{"revision":"v2","historyId":3,"at":"2026-01-01T00:00:00Z","commit":"c"}"#
        );
        assert_eq!(serde_json::from_str::<Record>(&text).expect("parse"), record);
    }
}
