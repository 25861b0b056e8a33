//! The Application controller: it drives the pipeline `source → render → compare → sync → health`
//! for every Application and reports where each stands.
//!
//! Modules, each depending only on those listed after it (never on one before it, nor on this root):
//!
//! - [`reconcile`]: what happens to one Application on each trigger — request annotations, the
//!   comparison, requested, resumed and automated operations, status, deletion.
//! - [`operation`]: running a sync or rollback and recording it (operation state, history, Events),
//!   in steps: `prepare`, `record`, `progress`, `finish`.
//! - [`gates`]: what holds a new sync back — dependencies not ready, a sync window — read for one
//!   Application.
//! - [`auto_revert`]: `spec.syncPolicy.autoRevert` — whether it can act (a condition when not), how
//!   long the Application has been Degraded at its last synced revision, and the one revert commit
//!   (through `capstan-promote`), recorded first so it is made at most once per revision.
//! - [`automated`]: whether an automated sync (new revision, self-heal, retry) is due; pure.
//! - [`finalize`]: deleting an Application's objects with the resources finalizer.
//! - [`status`]: writing status (merge patches, conditions) and clearing request annotations.
//! - [`context`]: the shared state ([`context::Ctx`]): clients, pipeline, pollers, settings, the
//!   versions written and watched per Application, terminate signals, Events.
//! - [`poller`]: one Git poller per repository, triggering the Applications that use it.
//! - [`pipeline`]: one read-only pass (resolve, render, prepare, read live state, compare).
//! - [`notifications`]: what each NotificationChannel is told about the Applications this replica
//!   owns, recorded on each Application so a change is sent once; delivered off the reconcile path.
//! - [`policies`]: Policies, compiled and cached, whose verdicts every sync passes.
//! - [`clusters`]: destination clusters — `in-cluster` and those registered with cluster Secrets —
//!   each with its client, discovery and watches, probed for reachability.
//! - [`watches`]: watches, filtered by Capstan's tracking label, on every kind Capstan manages: a
//!   cache of the live managed objects that comparisons read, and a trigger that re-reconciles an
//!   Application when one of its objects changes.
//! - [`managed_cache`]: the watches' cache of one kind's managed objects, indexed by Application.
//! - [`dependencies`]: `spec.dependsOn` — ready, waiting, missing, cycles, dependents; pure.
//! - [`projects`]: AppProjects, whose rules every pass and every sync keeps.
//! - [`shared_apps`]: the Application cache and change feed shared with an HTTP server in the same
//!   process.
//! - [`config`], [`error`], [`clock`]: settings, error types, timestamps and stopwatches; they depend on no module.
//!
//! [`run`] wires them into a kube-runtime controller with a work queue that serialises work per
//! Application and shuts down gracefully.

pub mod auto_revert;
pub mod automated;
pub mod clock;
pub mod clusters;
pub mod config;
pub mod context;
pub mod dependencies;
pub mod error;
pub mod finalize;
pub mod gates;
pub mod health_config;
pub mod managed_cache;
pub mod notifications;
pub mod operation;
pub mod pipeline;
pub mod policies;
pub mod poller;
pub mod projects;
pub mod readiness;
pub mod reconcile;
pub mod shared_apps;
pub mod status;
pub mod watches;

use std::sync::Arc;
use std::time::Duration;

use capstan_api::Application;
use futures::{FutureExt, StreamExt, TryStreamExt};
use kube::runtime::controller::{self, Controller};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};

pub use config::Config;
pub use error::{PipelineError, PipelineErrorKind, ReconcileError};
pub use pipeline::Pipeline;

/// Errors that stop the controller.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The Application CRD is not installed.
    #[error(
        "the Application CRD is not installed in the cluster: run `capstan install` first ({})",
        capstan_kube::describe_kube_error(.0)
    )]
    NotInstalled(#[source] kube::Error),
}

/// Run the controller until `shutdown` resolves: from then on no reconcile starts, and those in
/// flight (an operation among them) finish before it returns. A shutdown during start-up returns at
/// once.
pub async fn run(
    client: Client,
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ControllerError> {
    let shutdown = shutdown.shared();
    // With replicas, every write of this controller stops the moment this replica's ownership
    // lapses (capstan_replicas::fence).
    let client = match &config.ownership {
        Some(ownership) => capstan_replicas::fence::fenced(&client, ownership.clone()),
        None => client,
    };
    // Nothing starts (no probe, no reconcile) before this replica's first pass over the Leases.
    if let Some(ownership) = &config.ownership
        && capstan_kube::shutdown::before(shutdown.clone(), ownership.settled())
            .await
            .is_none()
    {
        return Ok(());
    }
    let apps: Api<Application> = Api::namespaced(client.clone(), &config.namespace);
    let Some(listed) =
        capstan_kube::shutdown::before(shutdown.clone(), apps.list(&kube::api::ListParams::default().limit(1))).await
    else {
        return Ok(());
    };
    listed.map_err(ControllerError::NotInstalled)?;

    // Each repository's poller refreshes its refs every interval; Applications resolve from that
    // answer in between (a refresh or an operation still asks Git directly).
    let refs_ttl = config.poll_interval + Duration::from_secs(5);
    let pipeline = Pipeline::with_local_repositories(
        client.clone(),
        config.cache_dir.clone(),
        &config.namespace,
        config.render_timeout,
        refs_ttl,
        config.allow_local_repositories,
    );
    let (trigger_tx, trigger_rx) = futures::channel::mpsc::unbounded();
    pipeline.clusters.spawn(trigger_tx.clone());
    pipeline
        .projects
        .deny_implicit_default(config.deny_implicit_default_project);
    pipeline.projects.spawn();
    pipeline.policies.spawn();
    let trigger_tx_for_health = trigger_tx.clone();
    let dependency_tx = trigger_tx.clone();
    let trigger_tx_for_gains = trigger_tx.clone();
    let pollers = poller::Pollers::new(pipeline.clone(), config.poll_interval, trigger_tx);
    let ctx = Arc::new(context::Ctx::new(client.clone(), pipeline, pollers, config.clone()));

    let shared = config.shared_apps.clone();
    let (reader, writer) = shared
        .as_ref()
        .and_then(|s| s.take_writer())
        .unwrap_or_else(reflector::store);
    // New health rules change verdicts: every Application is reconciled when they change.
    let all_apps = reader.clone();
    let trigger = trigger_tx_for_health;
    ctx.pipeline.health.spawn(Some(health_config::OnChange {
        reporter: ctx.reporter(),
        reconcile_all: Box::new(move || {
            for app in all_apps.state() {
                let _ = trigger.unbounded_send(kube::runtime::reflector::ObjectRef::from_obj(&*app));
            }
        }),
    }));
    ctx.use_apps(reader.clone());
    if let Some(ownership) = &config.ownership {
        // The first list reconciles what this replica owns by then; what it gains later is
        // reconciled as it gains it.
        reconcile_gained(ownership, reader.clone(), config.ready.clone(), trigger_tx_for_gains);
    }
    let ready = config.ready.clone();
    match capstan_kube::shutdown::before(
        shutdown.clone(),
        ctx.pipeline.health.wait_loaded(Duration::from_secs(10)),
    )
    .await
    {
        None => return Ok(()),
        Some(false) => {
            tracing::warn!("the health rules (capstan-cm) could not be read in 10 s: starting with the built-in rules")
        }
        Some(true) => {}
    }
    let notifier = notifications::Notifications::new(client.clone(), &config.namespace, config.ownership.clone());
    notifier.spawn(reader.clone());
    let forget = ctx.clone();
    let cached = reader.clone();
    // The cache keeps Applications without their managedFields (see `capstan_kube::cache`).
    let apps = watcher(apps, watcher::Config::default()).modify(capstan_kube::cache::without_managed_fields);
    let stream = reflector(writer, apps)
        .default_backoff()
        // A deleted Application is not reconciled again: release its poller and cluster interest here.
        .inspect_ok(move |event| match event {
            watcher::Event::Delete(app) => {
                if let Some(shared) = &shared {
                    shared.send(|| shared_apps::AppEvent::Deleted(kube::ResourceExt::name_any(app)));
                }
                wake_related(&forget, app, &dependency_tx);
                let app_ref = kube::runtime::reflector::ObjectRef::from_obj(app);
                forget.pollers.forget(&app_ref);
                forget.pipeline.clusters.forget(&app_ref);
                forget.forget(&format!(
                    "{}/{}",
                    app_ref.namespace.clone().unwrap_or_default(),
                    app_ref.name
                ));
            }
            watcher::Event::Apply(app) => {
                if let Some(shared) = &shared {
                    // The cache holds the change already: the feed shares its copy.
                    let app_ref = kube::runtime::reflector::ObjectRef::from_obj(app);
                    shared.send(|| {
                        shared_apps::AppEvent::Applied(cached.get(&app_ref).unwrap_or_else(|| Arc::new(app.clone())))
                    });
                }
                forget.record_observed(app);
                forget.observe(app);
                wake_related(&forget, app, &dependency_tx);
                notifier.observe(|| {
                    cached
                        .get(&kube::runtime::reflector::ObjectRef::from_obj(app))
                        .unwrap_or_else(|| Arc::new(app.clone()))
                });
            }
            watcher::Event::InitApply(app) => {
                if let Some(shared) = &shared {
                    shared.send(|| shared_apps::AppEvent::Applied(Arc::new(app.clone())));
                }
                forget.observe(app);
                notifier.observe(|| Arc::new(app.clone()));
            }
            // Listed once: ready (a Pod's readiness probe asks).
            watcher::Event::InitDone => {
                if let Some(shared) = &shared {
                    shared.mark_listed();
                }
                ready.set()
            }
            _ => {}
        })
        .applied_objects()
        .predicate_filter(reconcile::relevant_change, Default::default());
    tracing::info!(namespace = %config.namespace, "Application controller started");
    let controller = Controller::for_stream(stream, reader.clone())
        // A short trailing debounce merges the Application updates one request causes (the request
        // itself, then its clearing); bursts of changes to its objects are throttled where they are
        // watched (`watches::THROTTLE`), so this can stay small: it delays every sync request.
        .with_config(
            controller::Config::default()
                .concurrency(config.concurrency)
                .debounce(Duration::from_millis(50)),
        )
        .reconcile_on(trigger_rx)
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|res| async move {
            if let Err(err) = res {
                tracing::debug!(%err, "reconcile error");
            }
        });
    capstan_kube::shutdown::drive(controller, &reader, shutdown).await;
    tracing::info!("Application controller stopped");
    Ok(())
}

/// Reconcile the Applications of every shard this replica gains (they were left alone before).
fn reconcile_gained(
    ownership: &capstan_replicas::Ownership,
    apps: reflector::Store<Application>,
    listed: readiness::Readiness,
    tx: futures::channel::mpsc::UnboundedSender<kube::runtime::reflector::ObjectRef<Application>>,
) {
    use kube::ResourceExt;
    let Some(mut gained) = ownership.gained() else {
        return;
    };
    // Shards gained before the first list are reconciled by it.
    while gained.try_recv().is_ok() {}
    tokio::spawn(async move {
        while let Some(shards) = gained.recv().await {
            // Gains while the first list runs are reconciled once it has filled the cache.
            while !listed.is_ready() {
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let mut triggered = 0;
            for app in apps.state() {
                let shard = capstan_replicas::hashing::shard_of(&app.namespace().unwrap_or_default(), &app.name_any());
                if !shards.contains(&shard) {
                    continue;
                }
                if tx.unbounded_send(reflector::ObjectRef::from_obj(&*app)).is_err() {
                    return;
                }
                triggered += 1;
            }
            tracing::info!(
                shards = shards.len(),
                applications = triggered,
                "reconciling the Applications of the shards gained"
            );
        }
    });
}

/// `app` changed or was deleted: reconcile the Applications that depend on it (one waiting for it
/// may start its sync now; the status writes of the Application itself pass no trigger filter),
/// and those it depends on that are being deleted (one may be waiting for it to go).
fn wake_related(
    ctx: &context::Ctx,
    app: &Application,
    tx: &futures::channel::mpsc::UnboundedSender<kube::runtime::reflector::ObjectRef<Application>>,
) {
    use kube::ResourceExt;
    let namespace = app.namespace().unwrap_or_default();
    let cached = ctx.cached_apps();
    let dependents = dependencies::dependents(&app.name_any(), &namespace, cached.iter().map(|a| &**a));
    let deleted_dependencies = dependencies::names(app).into_iter().filter(|name| {
        cached.iter().any(|a| {
            a.name_any() == *name
                && a.namespace().as_deref() == Some(namespace.as_str())
                && a.metadata.deletion_timestamp.is_some()
        })
    });
    for name in dependents.into_iter().chain(deleted_dependencies) {
        let _ = tx.unbounded_send(kube::runtime::reflector::ObjectRef::new(&name).within(&namespace));
    }
}
