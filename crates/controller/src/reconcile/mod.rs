//! What happens to one Application on each trigger, read top-down in [`reconcile`]: it is loaded
//! (a deleted one is finalized), the requests it carries are read ([`requests`]), its project is
//! read once, the requests are cleared while it is compared with Git, what holds an operation back
//! is read, what to do is decided ([`decide`], pure) and done ([`act`]: an operation runs, the
//! status is written once, handled requests are cleared).

pub mod act;
pub mod decide;
pub mod requests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_api::labels::REFRESH_ANNOTATION;
use capstan_api::operation::{OPERATION_ANNOTATION, TERMINATE_ANNOTATION};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use crate::context::Ctx;
use crate::error::{PipelineError, ReconcileError};
use crate::projects::Project;
use crate::status::clear_terminate;
use crate::{finalize, gates};
use act::Observed;
use decide::{Compared, Gates};
use requests::Requests;

// Kept here for their users outside the crate.
pub use crate::status::clear_annotations;

/// The trigger predicate: spec changes, operation and refresh requests, deletion — not status writes.
pub fn relevant_change(app: &Application) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    app.metadata.generation.hash(&mut h);
    let ann = app.metadata.annotations.as_ref();
    ann.and_then(|a| a.get(OPERATION_ANNOTATION)).hash(&mut h);
    ann.and_then(|a| a.get(REFRESH_ANNOTATION)).hash(&mut h);
    ann.and_then(|a| a.get(TERMINATE_ANNOTATION)).hash(&mut h);
    app.metadata.deletion_timestamp.is_some().hash(&mut h);
    app.metadata.finalizers.hash(&mut h);
    Some(h.finish())
}

/// Backoff after a failed reconcile.
pub fn error_policy(_app: Arc<Application>, err: &ReconcileError, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(%err, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// Reconcile one Application.
pub async fn reconcile(app: Arc<Application>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    // Another replica's Application (or none's while shards move): left alone here; its owner
    // reconciles it, and this replica does when it gains the shard.
    let _permit = match &ctx.config.ownership {
        Some(ownership) => match ownership.enter(&app.namespace().unwrap_or_default(), &app.name_any()) {
            Some(permit) => Some(permit),
            None => {
                // Nor does it poll its repository or watch its objects here.
                let app_ref = ObjectRef::from_obj(&*app);
                ctx.pollers.forget(&app_ref);
                ctx.pipeline.clusters.forget(&app_ref);
                return Ok(Action::await_change());
            }
        },
        None => None,
    };
    let started = Instant::now();
    let result = reconcile_inner(app, ctx).await;
    capstan_metrics::global()
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result
}

/// One reconcile, top-down.
async fn reconcile_inner(app: Arc<Application>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let Some(mut app) = load(&ctx, &app).await? else {
        return Ok(Action::await_change());
    };
    if app.metadata.deletion_timestamp.is_some() {
        ctx.pollers.forget(&ObjectRef::from_obj(&app));
        return finalize::finalize(&app, &ctx).await.map(|_| Action::await_change());
    }
    let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    let requests = Requests::read(&app);
    if requests.hard_refresh() {
        forget_rendered(&ctx, &app).await;
    }
    tracing::debug!(
        app = %key,
        rv = app.resource_version().unwrap_or_default(),
        phase = app.status.as_ref().and_then(|s| s.operation_state.as_ref()).map(|o| o.phase.as_str()).unwrap_or_default(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "reconcile started"
    );

    // The project is read once: every step of this pass judges by the same rules.
    let project = ctx.pipeline.project(&app).await;
    // A refresh (and a request without an id) is cleared while Git is asked and the state compared
    // (neither changes anything): on a large Application the write takes as long as both. Nothing
    // else happens until it is cleared: an operation must not run twice after a restart, and a write
    // of the Application at the same time would make the API server redo one of them.
    let (cleared, observed) = tokio::join!(
        clear_requests(&ctx, &app, &requests),
        observe(&ctx, &app, project, &requests)
    );
    cleared?;
    if requests.stale_terminate() {
        // Nothing runs: the request is stale (and must not stop an operation requested after it).
        clear_terminate(&ctx, &app).await;
        if let Some(a) = app.metadata.annotations.as_mut() {
            a.remove(TERMINATE_ANNOTATION);
        }
    }

    let status = app.status.clone().unwrap_or_default();
    let raw_operation = requests.raw_operation.clone();
    let revision = observed.as_ref().map(|o| o.state.revision.id()).unwrap_or_default();
    let compared = observed.as_ref().ok().map(|o| Compared {
        revision: &revision,
        comparison: &o.state.comparison,
        gates: &o.gates,
    });
    let decision = decide::decide(&app, &status, requests, compared);
    tracing::debug!(app = %key, act = ?decision.act, held = ?decision.held, "decided");
    let action = act::act(&ctx, &mut app, observed, decision, raw_operation).await;
    tracing::debug!(app = %key, elapsed_ms = started.elapsed().as_millis() as u64, "reconciled");
    action
}

/// The Application as stored, or `None` once it is gone (its poller and cache entry are dropped).
///
/// Decide on the stored object, not an older copy: a reconcile queued during a sync may run before
/// the watch cache has seen that sync's final status, and would act on a stale operation state. The
/// cached copy is used once the watch has delivered this controller's last write, if it is the
/// version the watch delivered last.
async fn load(ctx: &Ctx, cached: &Application) -> Result<Option<Application>, ReconcileError> {
    let name = cached.name_any();
    let namespace = cached.namespace().unwrap_or_default();
    let key = format!("{namespace}/{name}");
    if ctx.cache_is_fresh(&key, cached) {
        return Ok(Some(cached.clone()));
    }
    let api: Api<Application> = Api::namespaced(ctx.client.clone(), &namespace);
    match api.get_opt(&name).await {
        Ok(Some(fresh)) => Ok(Some(fresh)),
        Ok(None) => {
            ctx.pollers.forget(&ObjectRef::new(&name).within(&namespace));
            ctx.forget(&key);
            Ok(None)
        }
        Err(e) => Err(ReconcileError::update(name, e)),
    }
}

/// A hard refresh renders again instead of reusing the render cache (as Argo CD's does), and Helm
/// is told the cluster's APIs as they are now.
async fn forget_rendered(ctx: &Ctx, app: &Application) {
    let name = app.name_any();
    let dropped: usize = app
        .spec
        .sources()
        .iter()
        .map(|source| {
            ctx.pipeline
                .renderer
                .invalidate(source, &name, &app.spec.destination.namespace)
        })
        .sum();
    if let Ok(dest) = ctx.pipeline.destination(app).await {
        dest.discovery.forget_api_versions().await;
    }
    tracing::debug!(app = %name, dropped, "hard refresh: the next render runs again");
}

/// Clear the refresh, and an operation request without an id, before anything acts on them.
async fn clear_requests(ctx: &Ctx, app: &Application, requests: &Requests) -> Result<(), ReconcileError> {
    let clear_first = requests.clear_first();
    if requests.refresh.is_none() && clear_first.is_none() {
        return Ok(());
    }
    clear_annotations(&ctx.client, app, requests.refresh.clone(), clear_first).await
}

/// Compare `app` (of `project`) with Git, and read what holds a new operation back.
///
/// Git is asked at most once per poll interval, unless a refresh or an operation asks (a periodic
/// poll shares one answer per repository among all its Applications, see `Pipeline::new`).
/// Comparisons read the watch cache, except for an operation that resumes: it acts on what it
/// compares, read from the API server.
async fn observe(
    ctx: &Ctx,
    app: &Application,
    project: Result<Project, PipelineError>,
    requests: &Requests,
) -> Result<Observed, PipelineError> {
    // Git repositories are polled (chart sources are resolved again on every reconcile interval),
    // only those the project permits: a poller lists refs with the repository Secret's credentials.
    let polled = project
        .as_ref()
        .map(|p| ctx.pipeline.polled_urls(app, p))
        .unwrap_or_default();
    let urls: Vec<&str> = polled.iter().map(String::as_str).collect();
    ctx.pollers.watch(&urls, ObjectRef::from_obj(app));
    let project = project?;
    let started = Instant::now();
    let resolved = ctx.pipeline.resolve(app, &project, None, requests.force()).await?;
    let state = if requests.resuming() {
        ctx.pipeline.compare_fresh(app, &project, resolved.clone()).await
    } else {
        ctx.pipeline.compare(app, &project, resolved.clone()).await
    }?;
    tracing::debug!(
        app = %app.name_any(),
        objects = state.comparison.resources.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        sync = state.comparison.sync().as_str(),
        "compared"
    );
    for r in &state.comparison.resources {
        state.destination.watches.ensure(&r.info);
    }
    crate::operation::guard::audit_live(ctx, app, &project, &state);
    // What holds a new operation back: dependencies not ready, a sync window. A running one goes on.
    let gates = Gates {
        dependencies: gates::dependencies(ctx, app).await,
        windows: gates::windows(ctx, app, &project),
    };
    Ok(Observed {
        project,
        resolved,
        state,
        gates,
    })
}
