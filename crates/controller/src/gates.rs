//! What holds an Application's sync back before it starts: its dependencies (`spec.dependsOn`,
//! each Synced and Healthy at its own current revision) and its project's sync windows. Read for
//! each reconcile; the decisions are the pure functions of [`crate::dependencies`] and
//! `capstan_project::windows`.

use capstan_api::Application;
use capstan_api::project::AppProjectSpec;
use capstan_api::status::ConditionType;
use capstan_project::windows::{self, DateTime, Target, Utc, Verdict, WindowError};
use kube::ResourceExt;

use crate::context::Ctx;
use crate::dependencies::{self, Gate};
use crate::projects::Project;

/// The condition an Application carries while a sync window holds its automated sync.
pub const WINDOW_CONDITION: ConditionType = ConditionType::SyncWindowBlocked;
/// The condition an Application carries while a window of its project that applies to it does not
/// parse.
pub const WINDOW_ERROR_CONDITION: ConditionType = ConditionType::SyncWindowError;

/// The sync windows of an Application's project as they stand now.
#[derive(Debug, Clone)]
pub struct Windows {
    /// The project's name.
    pub project: String,
    /// Whether an automated sync may run.
    pub automated: Verdict,
    /// Whether a manual sync may run.
    pub manual: Verdict,
    /// When an automated sync may run next, if it may not now.
    pub next_allowed: Option<DateTime<Utc>>,
    /// When a window applying to the Application opens or closes next (it is reconciled then).
    pub next_change: Option<DateTime<Utc>>,
    /// The windows applying to it that do not parse.
    pub errors: Vec<WindowError>,
}

impl Windows {
    /// Why a sync (`manual` or automated) may not run now, if it may not.
    pub fn refusal(&self, manual: bool) -> Option<String> {
        let verdict = if manual { &self.manual } else { &self.automated };
        if verdict.allowed() {
            return None;
        }
        let when = match (&self.next_allowed, verdict) {
            (_, Verdict::Invalid(_)) => String::new(),
            (Some(t), _) => format!("; next sync may run at {}", windows::format_instant(*t)),
            (None, _) => "; no sync may run within a year".into(),
        };
        Some(format!("{verdict} in project {:?}{when}", self.project))
    }

    /// The `SyncWindowError` message, if a window does not parse.
    pub fn error_message(&self) -> Option<String> {
        if self.errors.is_empty() {
            return None;
        }
        let each: Vec<String> = self.errors.iter().map(ToString::to_string).collect();
        Some(format!(
            "project {:?}: {} (syncs of this Application are held until it is fixed)",
            self.project,
            each.join("; ")
        ))
    }
}

/// Now, as the controller's clock says, for window decisions.
pub fn now(ctx: &Ctx) -> DateTime<Utc> {
    instant(ctx.config.clock.now())
}

/// Now, as the system clock says (the CLI and the server, judging a request).
pub fn system_now() -> DateTime<Utc> {
    instant(crate::clock::Clock::default().now())
}

fn instant(t: k8s_openapi::jiff::Timestamp) -> DateTime<Utc> {
    windows::instant(t.as_second(), t.subsec_nanosecond().max(0) as u32).unwrap_or_default()
}

/// The sync windows of `project` that apply to `app`, at the controller's clock; `None` when none
/// applies.
pub fn windows(ctx: &Ctx, app: &Application, project: &Project) -> Option<Windows> {
    windows_at(app, &project.name, &project.spec, now(ctx))
}

/// The sync windows of `spec` (project `project`) that apply to `app`, at `at`; `None` when none
/// applies.
pub fn windows_at(app: &Application, project: &str, spec: &AppProjectSpec, at: DateTime<Utc>) -> Option<Windows> {
    let list = &spec.sync_windows;
    let d = &app.spec.destination;
    let name = app.name_any();
    let target = Target {
        name: &name,
        namespace: &d.namespace,
        server: &d.server,
        cluster: &d.name,
    };
    if !list.iter().any(|w| windows::applies(w, &target)) {
        return None;
    }
    let automated = windows::verdict(list, &target, false, at);
    let errors = match &automated {
        Verdict::Invalid(errors) => errors.clone(),
        _ => Vec::new(),
    };
    Some(Windows {
        project: project.to_string(),
        manual: windows::verdict(list, &target, true, at),
        next_allowed: if automated.allowed() {
            None
        } else {
            windows::next_allowed(list, &target, false, at)
        },
        next_change: windows::next_change(list, &target, at),
        automated,
        errors,
    })
}

/// Why a manual operation of `app` may not start now, judged before the request is written (the
/// CLI and the HTTP server refuse it with this reason): a dependency that is missing, in a cycle or
/// not Synced and Healthy by its stored status (`lookup` finds the Applications of its
/// namespace), or a sync window of its project (`spec`, named `project`) that blocks manual syncs.
/// The controller checks again when it takes the request up.
pub fn manual_refusal(
    app: &Application,
    lookup: &dyn Fn(&str) -> Option<Application>,
    project: &str,
    spec: &AppProjectSpec,
    at: DateTime<Utc>,
) -> Option<String> {
    let gate = dependencies::gate(app, lookup, &|_| None);
    if !matches!(gate, Gate::Ready) {
        return Some(gate.to_string());
    }
    windows_at(app, project, spec, at).and_then(|w| w.refusal(true))
}

/// The dependency gate of `app`: each dependency's status judged at the revision it resolves to
/// now (from its repository's poller, as its own reconcile resolves it).
pub async fn dependencies(ctx: &Ctx, app: &Application) -> Gate {
    if app.spec.depends_on.is_empty() {
        return Gate::Ready;
    }
    let namespace = app.namespace().unwrap_or_default();
    let mut found = Vec::new();
    for name in dependencies::names(app) {
        if let Some(dep) = ctx.app_named(&namespace, &name).await {
            found.push(dep);
        }
    }
    // The cycle check walks further than the direct dependencies: from the cache.
    let cached = ctx.cached_apps();
    let lookup = |name: &str| {
        found.iter().find(|a| a.name_any() == name).cloned().or_else(|| {
            cached
                .iter()
                .find(|a| a.name_any() == name && a.namespace().as_deref() == Some(namespace.as_str()))
                .map(|a| (**a).clone())
        })
    };
    let mut revisions = Vec::new();
    for dep in &found {
        let resolved = match ctx.pipeline.project(dep).await {
            Ok(project) => ctx.pipeline.resolve(dep, &project, None, false).await,
            Err(err) => Err(err),
        };
        let revision = match resolved {
            Ok(resolved) => Some(resolved.id()),
            Err(err) => {
                tracing::debug!(app = %app.name_any(), dependency = %dep.name_any(), %err, "resolving a dependency's revision");
                None
            }
        };
        revisions.push((dep.name_any(), revision));
    }
    let revision_of = |dep: &Application| {
        revisions
            .iter()
            .find(|(n, _)| *n == dep.name_any())
            .and_then(|(_, r)| r.clone())
    };
    dependencies::gate(app, &lookup, &revision_of)
}
