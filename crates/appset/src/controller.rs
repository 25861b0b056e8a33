//! The ApplicationSet controller: it keeps the Applications an ApplicationSet generates in step with
//! its generators, and drives their syncs when the set asks for a `RollingSync`.
//!
//! What triggers a reconcile of a set:
//! - a change to the set's spec, finalizers or `capstan.dev/refresh` annotation (not its status);
//! - a change to an Application it owns (spec, labels, annotations, sync, health or operation) —
//!   this is how a rollout advances;
//! - any change to a cluster Secret (labels, annotations or any of its data), for every set with a
//!   clusters generator (so a newly labelled cluster gets its Applications within seconds, without
//!   polling, and fixing a Secret that could not be read lets generation resume);
//! - every poll interval, when Git generators are re-evaluated.
//!
//! What one reconcile does ([`reconcile`]): gather inputs ([`inputs`]), [`crate::generate`], then
//! create, update and delete the owned Applications as `syncPolicy.applicationsSync` allows. Generated
//! Applications carry an owner reference to the set (so Kubernetes garbage-collects them with it) and
//! the label [`APPLICATIONSET_LABEL`]; they are updated with server-side apply under the field manager
//! [`FIELD_MANAGER`], so only what the template says is managed — status, and the operation and
//! refresh annotations others set, are never clobbered. Any generation error — including a cluster
//! Secret that cannot be read, or two describing one cluster, for a set with a clusters generator —
//! leaves every existing Application exactly as it is and is reported as the `ErrorOccurred`
//! condition. An existing Application of the same name that the set does not own is never taken
//! over: Applications are created with a plain create (which fails if the name was taken meanwhile),
//! and updated only after their owner reference was checked on the stored object, with its uid and
//! resourceVersion as preconditions. Credentials in repository URLs are redacted from every condition
//! and log line.
//!
//! With `strategy.type: RollingSync`, generated Applications lose `syncPolicy.automated` and the
//! [`crate::rollout`] plan decides which ones to sync (by operation request, `initiatedBy:
//! applicationset-rollingsync`); progress is recorded in `status.applicationStatus` and the
//! `RolloutProgressing` condition.

pub mod inputs;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_api::applicationset::{
    ApplicationSetApplicationStatus, ApplicationSetCondition, ApplicationSetResource, ApplicationsSyncPolicy,
    RollingSyncStep,
};
use capstan_api::cluster::CLUSTER_SECRET_TYPE;
use capstan_api::labels::{REFRESH_ANNOTATION, RESOURCES_FINALIZER, SECRET_TYPE_LABEL};
use capstan_api::operation::{OPERATION_ANNOTATION, Operation, SyncOperation};
use capstan_api::{Application, ApplicationSet, ApplicationSetStatus};
use capstan_compare::describe_kube_error;
use capstan_source::RepoCache;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::reflector;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::rollout::{self, AppView, OperationView, Summary};
use crate::{GenerateError, Inputs};

/// Label on every generated Application naming its ApplicationSet (informational: ownership is the
/// owner reference).
pub const APPLICATIONSET_LABEL: &str = "capstan.dev/applicationset";
/// Field manager of the controller's server-side applies.
pub const FIELD_MANAGER: &str = "capstan-applicationset";
/// Field manager of the rollout's operation requests.
pub const ROLLOUT_FIELD_MANAGER: &str = "capstan-applicationset-rollout";
/// Finalizer on an ApplicationSet with `preserveResourcesOnDeletion`: it holds the deletion until the
/// generated Applications have lost their resources finalizer, so garbage collection leaves their
/// objects in place.
pub const PRESERVE_FINALIZER: &str = "capstan.dev/applicationset-preserve-resources";

/// Controller settings.
#[derive(Debug, Clone)]
pub struct AppSetConfig {
    /// Namespace whose ApplicationSets (and cluster and repository Secrets) are served; generated
    /// Applications live here too.
    pub namespace: String,
    /// Root of the Git caches; the controller keeps its own cache in the `applicationsets`
    /// subdirectory, so the Application controller's root may be passed as is.
    pub cache_dir: PathBuf,
    /// How often Git generators are re-evaluated.
    pub poll_interval: Duration,
    /// Limit of one git command.
    pub git_timeout: Duration,
    /// Whether `file://` repository URLs and local paths are allowed.
    pub allow_local_repositories: bool,
    /// ApplicationSets reconciled at once.
    pub concurrency: u16,
}

impl Default for AppSetConfig {
    fn default() -> Self {
        Self {
            namespace: capstan_api::NAMESPACE.into(),
            cache_dir: std::env::temp_dir().join("capstan-cache"),
            poll_interval: Duration::from_secs(180),
            git_timeout: Duration::from_secs(120),
            allow_local_repositories: false,
            concurrency: 8,
        }
    }
}

/// Errors that stop the controller.
#[derive(Debug, thiserror::Error)]
pub enum AppSetError {
    /// The ApplicationSet CRD is not installed.
    #[error("the ApplicationSet CRD is not installed in the cluster: run `capstan install` first ({0})")]
    NotInstalled(String),
}

/// A failed reconcile (an API call failed); retried with backoff.
#[derive(Debug, thiserror::Error)]
#[error("ApplicationSet {set}: {message}")]
pub struct ReconcileError {
    set: String,
    message: String,
}

struct Ctx {
    client: Client,
    config: AppSetConfig,
    repos: RepoCache,
    clusters: Store<Secret>,
    apps: Store<Application>,
}

/// Run the controller until `shutdown` resolves.
pub async fn run(
    client: Client,
    config: AppSetConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), AppSetError> {
    let sets: Api<ApplicationSet> = Api::namespaced(client.clone(), &config.namespace);
    sets.list(&ListParams::default().limit(1))
        .await
        .map_err(|e| AppSetError::NotInstalled(describe_kube_error(&e)))?;
    let apps: Api<Application> = Api::namespaced(client.clone(), &config.namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);

    let (set_reader, set_writer) = reflector::store();
    let set_stream = reflector(set_writer, watcher(sets, watcher::Config::default()))
        .default_backoff()
        .applied_objects()
        .predicate_filter(relevant_change, Default::default());
    let (trigger_tx, trigger_rx) = futures::channel::mpsc::unbounded::<ObjectRef<ApplicationSet>>();

    // Cluster Secrets: any change re-reconciles every set with a clusters generator.
    let (cluster_reader, cluster_writer) = reflector::store::<Secret>();
    let clusters_task = {
        let sets = set_reader.clone();
        let tx = trigger_tx.clone();
        let stream = reflector(
            cluster_writer,
            watcher(
                secrets,
                watcher::Config::default().labels(&format!("{SECRET_TYPE_LABEL}={CLUSTER_SECRET_TYPE}")),
            ),
        )
        .default_backoff();
        tokio::spawn(async move {
            let mut seen: HashMap<String, u64> = HashMap::new();
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                let changed = match event {
                    Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => {
                        let print = secret_fingerprint(&s);
                        seen.insert(s.name_any(), print) != Some(print)
                    }
                    Ok(watcher::Event::Delete(s)) => seen.remove(&s.name_any()).is_some(),
                    Ok(watcher::Event::Init) => false,
                    Ok(watcher::Event::InitDone) => true,
                    Err(err) => {
                        tracing::warn!(%err, "watching cluster Secrets");
                        false
                    }
                };
                if changed {
                    for set in sets.state().iter().filter(|s| uses_clusters(s)) {
                        let _ = tx.unbounded_send(ObjectRef::from_obj(set.as_ref()));
                    }
                }
            }
        })
    };

    // Generated Applications: a change that matters to the set (or a deletion) re-reconciles it.
    let (app_reader, app_writer) = reflector::store::<Application>();
    let apps_task = {
        let tx = trigger_tx.clone();
        let stream = reflector(
            app_writer,
            watcher(apps, watcher::Config::default().labels(APPLICATIONSET_LABEL)),
        )
        .default_backoff();
        tokio::spawn(async move {
            let mut seen: HashMap<String, u64> = HashMap::new();
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                let (app, changed) = match event {
                    Ok(watcher::Event::Apply(a) | watcher::Event::InitApply(a)) => {
                        let print = app_fingerprint(&a);
                        let changed = seen.insert(a.uid().unwrap_or_default(), print) != Some(print);
                        (a, changed)
                    }
                    Ok(watcher::Event::Delete(a)) => {
                        seen.remove(&a.uid().unwrap_or_default());
                        (a, true)
                    }
                    Ok(_) => continue,
                    Err(err) => {
                        tracing::warn!(%err, "watching generated Applications");
                        continue;
                    }
                };
                if changed && let Some(owner) = owner_of(&app) {
                    let _ = tx.unbounded_send(owner);
                }
            }
        })
    };

    let ctx = Arc::new(Ctx {
        repos: RepoCache::new(
            config.cache_dir.join("applicationsets"),
            config.git_timeout,
            // Every reconcile in between shares one answer per repository; a refresh asks Git now.
            config.poll_interval.mul_f64(0.9),
        )
        .with_local_repositories(config.allow_local_repositories),
        client,
        config: config.clone(),
        clusters: cluster_reader,
        apps: app_reader,
    });
    tracing::info!(namespace = %config.namespace, "ApplicationSet controller started");
    Controller::for_stream(set_stream, set_reader)
        .with_config(
            controller::Config::default()
                .concurrency(config.concurrency.max(1))
                // Merges the burst of Application status changes one sync causes.
                .debounce(Duration::from_millis(300)),
        )
        .reconcile_on(trigger_rx)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(err) = res {
                tracing::debug!(%err, "ApplicationSet reconcile error");
            }
        })
        .await;
    clusters_task.abort();
    apps_task.abort();
    tracing::info!("ApplicationSet controller stopped");
    Ok(())
}

/// The trigger predicate for sets: spec, finalizers, deletion and the refresh annotation — not status.
fn relevant_change(set: &ApplicationSet) -> Option<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    set.metadata.generation.hash(&mut h);
    set.annotations().get(REFRESH_ANNOTATION).hash(&mut h);
    set.metadata.deletion_timestamp.is_some().hash(&mut h);
    set.metadata.finalizers.hash(&mut h);
    Some(h.finish())
}

/// What of an Application matters to its set.
fn app_fingerprint(app: &Application) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    app.metadata.generation.hash(&mut h);
    app.metadata.labels.hash(&mut h);
    app.annotations().get(OPERATION_ANNOTATION).hash(&mut h);
    app.metadata.finalizers.hash(&mut h);
    app.metadata.deletion_timestamp.is_some().hash(&mut h);
    app.metadata.owner_references.as_ref().map(|o| o.len()).hash(&mut h);
    if let Some(status) = &app.status {
        if let Some(s) = &status.sync {
            (&s.status, &s.revision).hash(&mut h);
        }
        if let Some(hs) = &status.health {
            (&hs.status, &hs.message).hash(&mut h);
        }
        if let Some(op) = &status.operation_state {
            (&op.phase, &op.started_at).hash(&mut h);
        }
    }
    h.finish()
}

/// What of a cluster Secret matters to generators: its labels, annotations and all of its data — not
/// only the name and server, since a Secret that cannot be read stops generation, and fixing any
/// key of it must let generation resume.
fn secret_fingerprint(secret: &Secret) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    secret.metadata.labels.hash(&mut h);
    secret.metadata.annotations.hash(&mut h);
    secret.type_.hash(&mut h);
    for (key, value) in secret.data.iter().flatten() {
        (key, &value.0).hash(&mut h);
    }
    // Separates `data` from `stringData`.
    0xff_u8.hash(&mut h);
    secret.string_data.hash(&mut h);
    h.finish()
}

/// The ApplicationSet controlling `app`, if any.
fn owner_of(app: &Application) -> Option<ObjectRef<ApplicationSet>> {
    let ns = app.namespace()?;
    app.owner_references()
        .iter()
        .find(|o| o.kind == "ApplicationSet" && o.api_version.starts_with("capstan.dev/") && o.controller == Some(true))
        .map(|o| ObjectRef::new(&o.name).within(&ns))
}

/// Whether any generator (nested ones included) is a clusters generator.
pub fn uses_clusters(set: &ApplicationSet) -> bool {
    fn walk(v: &Value) -> bool {
        match v {
            Value::Object(map) => map.iter().any(|(k, v)| (k == "clusters" && v.is_object()) || walk(v)),
            Value::Array(items) => items.iter().any(walk),
            _ => false,
        }
    }
    serde_json::to_value(&set.spec.generators).is_ok_and(|v| walk(&v))
}

fn error_policy(_set: Arc<ApplicationSet>, err: &ReconcileError, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(%err, "ApplicationSet reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// Why a set could not be generated: nothing is changed, the condition says why.
struct Problem {
    reason: &'static str,
    message: String,
}

impl From<GenerateError> for Problem {
    fn from(e: GenerateError) -> Self {
        Problem {
            reason: e.reason(),
            message: e.to_string(),
        }
    }
}

/// Reconcile one ApplicationSet.
async fn reconcile(set: Arc<ApplicationSet>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let name = set.name_any();
    let namespace = set.namespace().unwrap_or_else(|| ctx.config.namespace.clone());
    let api: Api<ApplicationSet> = Api::namespaced(ctx.client.clone(), &namespace);
    let fail = |message: String| ReconcileError {
        set: format!("{namespace}/{name}"),
        message: redact(&message),
    };
    // Decide on the stored object, not the watch cache.
    let Some(mut set) = api.get_opt(&name).await.map_err(|e| fail(describe_kube_error(&e)))? else {
        return Ok(Action::await_change());
    };
    if set.metadata.deletion_timestamp.is_some() {
        finalize(&ctx, &api, &set).await.map_err(fail)?;
        return Ok(Action::await_change());
    }
    ensure_finalizer(&api, &mut set).await.map_err(fail)?;
    let started = Instant::now();
    let refresh = set.annotations().contains_key(REFRESH_ANNOTATION);

    let generated = generate_all(&ctx, &set, &namespace, refresh).await;
    let mut status = set.status.clone().unwrap_or_default();
    let action = match generated {
        Err(problem) => {
            tracing::info!(set = %name, reason = problem.reason, message = %redact(&problem.message), "generation failed; Applications left as they are");
            set_condition(
                &mut status.conditions,
                "ErrorOccurred",
                true,
                problem.reason,
                &problem.message,
            );
            set_condition(
                &mut status.conditions,
                "ParametersGenerated",
                false,
                problem.reason,
                &problem.message,
            );
            set_condition(
                &mut status.conditions,
                "ResourcesUpToDate",
                false,
                problem.reason,
                &problem.message,
            );
            Action::requeue(ctx.config.poll_interval)
        }
        Ok(generated) => {
            let outcome = apply(&ctx, &set, &namespace, generated).await.map_err(fail)?;
            tracing::debug!(
                set = %name,
                created = outcome.created,
                updated = outcome.updated.len(),
                deleted = outcome.deleted,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "generated"
            );
            record(&mut status, &set, &outcome);
            if !outcome.errors.is_empty() {
                Action::requeue(Duration::from_secs(10))
            } else if matches!(outcome.rollout, Some(Summary::Progressing(_))) {
                // A safety net: owned Applications' changes normally advance the rollout.
                Action::requeue(Duration::from_secs(10).min(ctx.config.poll_interval))
            } else {
                Action::requeue(ctx.config.poll_interval)
            }
        }
    };
    write_status(&api, &set, &status).await.map_err(fail)?;
    if refresh {
        let patch = json!({"metadata": {"annotations": {REFRESH_ANNOTATION: null}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| fail(describe_kube_error(&e)))?;
    }
    Ok(action)
}

/// Gather inputs and generate, checking out Git sources a matrix only names during generation.
async fn generate_all(
    ctx: &Ctx,
    set: &ApplicationSet,
    namespace: &str,
    force: bool,
) -> Result<Vec<Application>, Problem> {
    if let Some(steps) = rolling_steps(set) {
        rollout::validate(steps).map_err(|e| Problem {
            reason: "InvalidStrategy",
            message: e.to_string(),
        })?;
    }
    let mut inputs = Inputs::default();
    if uses_clusters(set) {
        tokio::time::timeout(Duration::from_secs(30), ctx.clusters.wait_until_ready())
            .await
            .map_err(|_| Problem {
                reason: "ClustersUnavailable",
                message: "cluster Secrets could not be listed within 30 s".into(),
            })?
            .map_err(|_| Problem {
                reason: "ClustersUnavailable",
                message: "the cluster Secret watch stopped".into(),
            })?;
        inputs.clusters = inputs::clusters(&ctx.clusters.state()).map_err(|e| Problem {
            reason: e.reason(),
            message: e.to_string(),
        })?;
    }
    let checkout = async |source: &crate::GitSource| -> Result<PathBuf, Problem> {
        inputs::checkout(&ctx.client, namespace, &ctx.repos, &ctx.config.cache_dir, source, force)
            .await
            .map_err(|message| Problem {
                reason: "RepositoryError",
                message: format!(
                    "repository {} at revision {}: {message}",
                    source.repo_url, source.revision
                ),
            })
    };
    for source in crate::git_sources(&set.spec)? {
        let path = checkout(&source).await?;
        inputs.checkouts.insert(source, path);
    }
    // A matrix child may name a repository or revision with its sibling's parameters: check those
    // out as generation asks for them.
    for _ in 0..32 {
        match crate::generate(set, &inputs) {
            Ok(apps) => {
                if let Some(other) = apps
                    .iter()
                    .find(|a| a.metadata.namespace.as_deref().is_some_and(|n| n != namespace))
                {
                    return Err(Problem {
                        reason: "InvalidTemplate",
                        message: format!(
                            "template: metadata.namespace: Application {} would be in namespace {:?}; generated Applications must be in the ApplicationSet's namespace {namespace:?}",
                            other.name_any(),
                            other.metadata.namespace.as_deref().unwrap_or_default()
                        ),
                    });
                }
                return Ok(apps);
            }
            Err(err) => match err.missing_git_source() {
                Some(source) if !inputs.checkouts.contains_key(source) => {
                    let source = source.clone();
                    let path = checkout(&source).await?;
                    inputs.checkouts.insert(source, path);
                }
                _ => return Err(err.into()),
            },
        }
    }
    Err(Problem {
        reason: "InvalidGenerator",
        message: "generators name more than 32 Git sources during generation".into(),
    })
}

fn rolling_steps(set: &ApplicationSet) -> Option<&[RollingSyncStep]> {
    let strategy = set.spec.strategy.as_ref()?;
    (strategy.type_ == "RollingSync").then(|| {
        strategy
            .rolling_sync
            .as_ref()
            .map(|r| r.steps.as_slice())
            .unwrap_or_default()
    })
}

fn policy(set: &ApplicationSet) -> ApplicationsSyncPolicy {
    set.spec
        .sync_policy
        .as_ref()
        .and_then(|p| p.applications_sync)
        .unwrap_or(ApplicationsSyncPolicy::Sync)
}

fn preserve(set: &ApplicationSet) -> bool {
    set.spec
        .sync_policy
        .as_ref()
        .is_some_and(|p| p.preserve_resources_on_deletion)
}

/// What one reconcile did to the Applications.
#[derive(Default)]
struct Outcome {
    /// The generated Applications as they now are, by name (those that exist).
    current: BTreeMap<String, Application>,
    /// Names of all generated Applications, in order.
    names: Vec<String>,
    created: usize,
    updated: BTreeSet<String>,
    deleted: usize,
    /// Generated Applications that differ from the template but `applicationsSync` keeps.
    kept: Vec<String>,
    /// Owned Applications no longer generated that `applicationsSync` keeps.
    orphans: Vec<String>,
    /// Names generated that belong to someone else.
    conflicts: Vec<String>,
    /// API errors, one per Application.
    errors: Vec<String>,
    /// The rollout's plan, with RollingSync.
    application_status: Vec<ApplicationSetApplicationStatus>,
    rollout: Option<Summary>,
}

/// Create, update and delete the owned Applications, then advance the rollout.
async fn apply(
    ctx: &Ctx,
    set: &ApplicationSet,
    namespace: &str,
    generated: Vec<Application>,
) -> Result<Outcome, String> {
    let set_name = set.name_any();
    let uid = set.uid().unwrap_or_default();
    let api: Api<Application> = Api::namespaced(ctx.client.clone(), namespace);
    let policy = policy(set);
    let steps = rolling_steps(set);
    tokio::time::timeout(Duration::from_secs(30), ctx.apps.wait_until_ready())
        .await
        .map_err(|_| "generated Applications could not be listed within 30 s".to_string())?
        .map_err(|_| "the Application watch stopped".to_string())?;
    let owned: BTreeMap<String, Arc<Application>> = ctx
        .apps
        .state()
        .into_iter()
        .filter(|a| a.namespace().as_deref() == Some(namespace) && is_owned(a, &uid))
        .map(|a| (a.name_any(), a))
        .collect();

    let mut out = Outcome::default();
    let mut prune: HashMap<String, bool> = HashMap::new();
    let mut work = Vec::with_capacity(generated.len());
    for app in generated {
        let name = app.name_any();
        out.names.push(name.clone());
        prune.insert(
            name.clone(),
            app.spec
                .sync_policy
                .as_ref()
                .and_then(|p| p.automated.as_ref())
                .is_some_and(|a| a.prune),
        );
        let desired = Desired::new(&app, set, steps.is_some());
        let cached = owned.get(&name).map(|live| (**live).clone());
        work.push((name, desired, cached));
    }
    // Reads and writes of different Applications are independent: a few at a time.
    let (api_ref, uid_ref) = (&api, uid.as_str());
    let results: Vec<(String, Change)> = futures::stream::iter(work)
        .map(|(name, desired, cached)| async move {
            let change = change(api_ref, uid_ref, policy, &name, &desired, cached).await;
            (name, change)
        })
        .buffer_unordered(WRITE_PARALLELISM)
        .collect()
        .await;
    for (name, change) in results {
        match change {
            Change::None(live) => {
                out.current.insert(name, live);
            }
            Change::Kept(live) => {
                out.kept.push(name.clone());
                out.current.insert(name, live);
            }
            Change::Created(app) => {
                out.created += 1;
                out.current.insert(name, app);
            }
            Change::Updated(app) => {
                out.updated.insert(name.clone());
                out.current.insert(name, app);
            }
            Change::Conflict => out.conflicts.push(name),
            Change::Failed(e) => out.errors.push(e),
        }
    }
    out.kept.sort();
    out.conflicts.sort();
    out.errors.sort();

    let generated_names: BTreeSet<&String> = out.names.iter().collect();
    for (name, app) in &owned {
        if generated_names.contains(name) || app.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if !policy.allows_delete() {
            out.orphans.push(name.clone());
            continue;
        }
        match delete_app(&api, app, preserve(set)).await {
            Ok(()) => out.deleted += 1,
            Err(e) => out.errors.push(format!("deleting Application {name}: {e}")),
        }
    }

    if let Some(steps) = steps {
        let views: Vec<AppView> = out
            .current
            .values()
            .map(|a| view(a, out.updated.contains(&a.name_any())))
            .collect();
        let previous = set
            .status
            .as_ref()
            .map(|s| s.application_status.clone())
            .unwrap_or_default();
        let mut plan = rollout::plan(steps, &views, &previous, k8s_openapi::jiff::Timestamp::now());
        for name in &plan.sync {
            let Some(app) = out.current.get(name) else { continue };
            let op = Operation {
                sync: Some(SyncOperation {
                    prune: prune.get(name).copied().unwrap_or(false),
                    ..Default::default()
                }),
                rollback: None,
                id: capstan_api::operation::new_request_id(),
                initiated_by: rollout::INITIATED_BY.into(),
            };
            match request_sync(&api, app, &op).await {
                Ok(()) => tracing::info!(set = %set_name, app = %name, "rollout requested a sync"),
                Err(e) => {
                    if let Some(s) = plan.statuses.iter_mut().find(|s| &s.application == name) {
                        s.status = "Pending".into();
                        s.message = format!("requesting the sync failed: {e}");
                    }
                    out.errors.push(format!("requesting a sync of Application {name}: {e}"));
                }
            }
        }
        out.application_status = plan.statuses;
        out.rollout = Some(plan.summary);
    }
    Ok(out)
}

/// Applications read or written at once by one reconcile.
const WRITE_PARALLELISM: usize = 16;

/// What happened to one generated Application.
enum Change {
    /// Already as the template says (or being deleted).
    None(Application),
    /// Differs from the template, but `applicationsSync` does not allow updates.
    Kept(Application),
    Created(Application),
    Updated(Application),
    /// The name belongs to an Application the set does not own.
    Conflict,
    Failed(String),
}

/// Bring one generated Application in line with the template, as `policy` allows. `cached` is the
/// owned Application from the watch cache: when it is as the template says (or may not be updated),
/// nothing is written. Every write is decided on the object just read from the API server, since the
/// cache may lag: the name may be free, or belong to someone else by now.
async fn change(
    api: &Api<Application>,
    uid: &str,
    policy: ApplicationsSyncPolicy,
    name: &str,
    desired: &Desired,
    cached: Option<Application>,
) -> Change {
    if let Some(live) = cached {
        if live.metadata.deletion_timestamp.is_some() || !desired.differs(&live) {
            return Change::None(live);
        }
        if !policy.allows_update() {
            return Change::Kept(live);
        }
    }
    match api.get_opt(name).await {
        Ok(Some(stored)) => update(api, uid, policy, name, desired, stored).await,
        Ok(None) => create(api, uid, policy, name, desired).await,
        Err(e) => Change::Failed(format!("reading Application {name}: {}", describe_kube_error(&e))),
    }
}

/// Create the Application with a plain create: if someone else created the name since it was found
/// free, the create fails (409) and their Application is left alone ([`Change::Conflict`]).
async fn create(
    api: &Api<Application>,
    uid: &str,
    policy: ApplicationsSyncPolicy,
    name: &str,
    desired: &Desired,
) -> Change {
    let app: Application = match serde_json::from_value(desired.body.clone()) {
        Ok(app) => app,
        Err(e) => return Change::Failed(format!("creating Application {name}: {e}")),
    };
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.create(&pp, &app).await {
        Ok(created) => match adopt_fields(api, created.clone()).await {
            Ok(adopted) => Change::Created(adopted),
            Err(e) => {
                // Created all the same; the next update takes the fields over (see `update`).
                let err = redact(&describe_kube_error(&e));
                tracing::warn!(app = %name, %err, "created an Application; its fields stay with the create for now");
                Change::Created(created)
            }
        },
        Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(name).await {
            // Ours after all (created by an earlier attempt): an update at most. Someone else's: a conflict.
            Ok(Some(stored)) => update(api, uid, policy, name, desired, stored).await,
            Ok(None) => Change::Failed(format!(
                "creating Application {name}: it was created and deleted meanwhile; will retry"
            )),
            Err(e) => Change::Failed(format!("reading Application {name}: {}", describe_kube_error(&e))),
        },
        Err(e) => Change::Failed(format!("creating Application {name}: {}", describe_kube_error(&e))),
    }
}

/// Update `stored` (just read from the API server) to the template, if the set owns it: a forced
/// server-side apply whose body carries `stored`'s uid and resourceVersion as preconditions, so an
/// Application changed meanwhile (re-created by someone else, or disowned) is read again and checked
/// again rather than written.
async fn update(
    api: &Api<Application>,
    uid: &str,
    policy: ApplicationsSyncPolicy,
    name: &str,
    desired: &Desired,
    mut stored: Application,
) -> Change {
    for _ in 0..3 {
        if !is_owned(&stored, uid) {
            return Change::Conflict;
        }
        if stored.metadata.deletion_timestamp.is_some() || !desired.differs(&stored) {
            return Change::None(stored);
        }
        if !policy.allows_update() {
            return Change::Kept(stored);
        }
        let result = match adopt_fields(api, stored).await {
            Ok(adopted) => {
                let mut body = desired.body.clone();
                body["metadata"]["uid"] = json!(adopted.uid());
                body["metadata"]["resourceVersion"] = json!(adopted.resource_version());
                api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body))
                    .await
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(applied) => return Change::Updated(applied),
            // Changed since it was read: read it again.
            Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(name).await {
                Ok(Some(again)) => stored = again,
                Ok(None) => {
                    return Change::Failed(format!(
                        "updating Application {name}: it was deleted meanwhile; will retry"
                    ));
                }
                Err(e) => {
                    return Change::Failed(format!("reading Application {name}: {}", describe_kube_error(&e)));
                }
            },
            Err(e) => return Change::Failed(format!("updating Application {name}: {}", describe_kube_error(&e))),
        }
    }
    Change::Failed(format!("updating Application {name}: it kept changing; will retry"))
}

/// Give the fields a create recorded for [`FIELD_MANAGER`] (an `Update` entry in `managedFields`) to
/// its server-side apply entry, as `kubectl` does when moving to server-side apply: otherwise both
/// entries would own them, and a later apply could not remove what the template no longer has. The
/// patch carries `app`'s uid and resourceVersion: a 409 means it changed since it was read.
async fn adopt_fields(api: &Api<Application>, app: Application) -> Result<Application, kube::Error> {
    let Some(entries) = adopted_entries(&app) else {
        return Ok(app);
    };
    let patch = json!({"metadata": {
        "uid": app.uid(),
        "resourceVersion": app.resource_version(),
        "managedFields": entries,
    }});
    api.patch(&app.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
}

/// `app`'s managedFields with [`FIELD_MANAGER`]'s `Update` entries merged into its `Apply` entry, or
/// `None` when it has no such `Update` entry.
fn adopted_entries(app: &Application) -> Option<Vec<ManagedFieldsEntry>> {
    let entries = app.metadata.managed_fields.as_ref()?;
    let ours_updated = |e: &ManagedFieldsEntry| {
        e.manager.as_deref() == Some(FIELD_MANAGER)
            && e.operation.as_deref() == Some("Update")
            && e.subresource.is_none()
    };
    if !entries.iter().any(ours_updated) {
        return None;
    }
    let mut out: Vec<ManagedFieldsEntry> = Vec::with_capacity(entries.len());
    let mut fields = Value::Object(Default::default());
    let mut apply: Option<ManagedFieldsEntry> = None;
    for e in entries {
        let ours_applied = e.manager.as_deref() == Some(FIELD_MANAGER) && e.operation.as_deref() == Some("Apply");
        if ours_updated(e) || ours_applied {
            if let Some(f) = &e.fields_v1 {
                merge_fields(&mut fields, &f.0);
            }
            if ours_applied || apply.is_none() {
                apply = Some(e.clone());
            }
        } else {
            out.push(e.clone());
        }
    }
    let mut apply = apply?;
    apply.operation = Some("Apply".into());
    apply.fields_type = Some("FieldsV1".into());
    apply.fields_v1 = Some(FieldsV1(fields));
    out.push(apply);
    Some(out)
}

/// The union of two managedFields field sets (`{"f:metadata": {"f:labels": {...}}, ...}`).
fn merge_fields(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge_fields(
                    a.entry(k.clone()).or_insert_with(|| Value::Object(Default::default())),
                    v,
                );
            }
        }
        (into, from) => *into = from.clone(),
    }
}

/// What the controller applies for one generated Application.
struct Desired {
    body: Value,
    spec: Value,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    finalizers: Vec<String>,
    owner_uid: String,
}

impl Desired {
    fn new(app: &Application, set: &ApplicationSet, rolling: bool) -> Desired {
        let mut spec = app.spec.clone();
        if rolling && let Some(policy) = spec.sync_policy.as_mut() {
            // The rollout drives syncs.
            policy.automated = None;
        }
        let spec = serde_json::to_value(&spec).unwrap_or(Value::Null);
        let mut labels = app.metadata.labels.clone().unwrap_or_default();
        labels.insert(APPLICATIONSET_LABEL.into(), label_value(&set.name_any()));
        let annotations = app.metadata.annotations.clone().unwrap_or_default();
        let finalizers = app.metadata.finalizers.clone().unwrap_or_default();
        let owner_uid = set.uid().unwrap_or_default();
        let mut metadata = json!({
            "name": app.name_any(),
            "namespace": set.namespace(),
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": format!("{}/{}", capstan_api::GROUP, capstan_api::VERSION),
                "kind": "ApplicationSet",
                "name": set.name_any(),
                "uid": owner_uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        });
        if !annotations.is_empty() {
            metadata["annotations"] = json!(annotations);
        }
        if !finalizers.is_empty() {
            metadata["finalizers"] = json!(finalizers);
        }
        let body = json!({
            "apiVersion": format!("{}/{}", capstan_api::GROUP, capstan_api::VERSION),
            "kind": "Application",
            "metadata": metadata,
            "spec": spec,
        });
        Desired {
            body,
            spec,
            labels,
            annotations,
            finalizers,
            owner_uid,
        }
    }

    /// Whether applying would change `live`: its spec differs, a label, annotation or finalizer of the
    /// template is missing, or one the controller applied before is no longer in the template.
    fn differs(&self, live: &Application) -> bool {
        if serde_json::to_value(&live.spec).unwrap_or(Value::Null) != self.spec {
            return true;
        }
        let live_labels = live.labels();
        if self.labels.iter().any(|(k, v)| live_labels.get(k) != Some(v)) {
            return true;
        }
        let live_annotations = live.annotations();
        if self.annotations.iter().any(|(k, v)| live_annotations.get(k) != Some(v)) {
            return true;
        }
        if self.finalizers.iter().any(|f| !live.finalizers().contains(f)) {
            return true;
        }
        if !live
            .owner_references()
            .iter()
            .any(|o| o.uid == self.owner_uid && o.controller == Some(true))
        {
            return true;
        }
        let stale = |section: &str, want: &dyn Fn(&str) -> bool| managed_keys(live, section).iter().any(|k| !want(k));
        stale("f:labels", &|k| self.labels.contains_key(k))
            || stale("f:annotations", &|k| self.annotations.contains_key(k))
            || stale("f:finalizers", &|k| self.finalizers.iter().any(|f| f == k))
    }
}

/// Keys of `metadata.<section>` that the controller's field manager owns on `app` (per managedFields).
fn managed_keys(app: &Application, section: &str) -> Vec<String> {
    let Some(entries) = &app.metadata.managed_fields else {
        return Vec::new();
    };
    entries
        .iter()
        // The `Update` entry of a create not yet adopted (see `adopt_fields`) counts too.
        .filter(|e| {
            e.manager.as_deref() == Some(FIELD_MANAGER)
                && (e.operation.as_deref() == Some("Apply")
                    || (e.operation.as_deref() == Some("Update") && e.subresource.is_none()))
        })
        .filter_map(|e| e.fields_v1.as_ref())
        .filter_map(|f| {
            f.0.get("f:metadata")
                .and_then(|m| m.get(section))
                .and_then(Value::as_object)
        })
        .flat_map(|m| m.keys().cloned().collect::<Vec<_>>())
        .filter_map(|k| {
            if let Some(key) = k.strip_prefix("f:") {
                Some(key.to_string())
            } else {
                k.strip_prefix("v:")
                    .and_then(|v| serde_json::from_str::<String>(v).ok())
            }
        })
        .collect()
}

/// A label value naming the set (label values are limited to 63 characters).
fn label_value(name: &str) -> String {
    let mut v: String = name.chars().take(63).collect();
    while v.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        v.pop();
    }
    v
}

fn is_owned(app: &Application, uid: &str) -> bool {
    !uid.is_empty() && app.owner_references().iter().any(|o| o.uid == uid)
}

/// Delete an owned Application; with `preserve`, first remove its resources finalizer so its objects
/// stay in the cluster.
async fn delete_app(api: &Api<Application>, app: &Application, preserve: bool) -> Result<(), String> {
    let name = app.name_any();
    if preserve {
        strip_resources_finalizer(api, app).await?;
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: app.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(describe_kube_error(&e)),
    }
}

async fn strip_resources_finalizer(api: &Api<Application>, app: &Application) -> Result<(), String> {
    if !app.finalizers().iter().any(|f| f == RESOURCES_FINALIZER) {
        return Ok(());
    }
    let rest: Vec<&String> = app.finalizers().iter().filter(|f| *f != RESOURCES_FINALIZER).collect();
    let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": app.resource_version()}});
    match api
        .patch(&app.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(describe_kube_error(&e)),
    }
}

/// Ask the Application controller to sync `app` (unless a request or an operation is already there).
async fn request_sync(api: &Api<Application>, app: &Application, op: &Operation) -> Result<(), String> {
    let body = serde_json::to_string(op).map_err(|e| e.to_string())?;
    let pp = PatchParams {
        field_manager: Some(ROLLOUT_FIELD_MANAGER.into()),
        ..Default::default()
    };
    let mut current = app.clone();
    for _ in 0..3 {
        let busy = capstan_api::operation::pending_request(&current).is_some()
            || capstan_api::operation::operation_running(&current);
        if busy {
            return Ok(());
        }
        // With the resourceVersion read, so a request written meanwhile is never overwritten.
        let patch = json!({"metadata": {
            "annotations": {OPERATION_ANNOTATION: body},
            "resourceVersion": current.resource_version(),
        }});
        match api.patch(&current.name_any(), &pp, &Patch::Merge(patch)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                current = api
                    .get(&current.name_any())
                    .await
                    .map_err(|e| describe_kube_error(&e))?;
            }
            Err(e) => return Err(describe_kube_error(&e)),
        }
    }
    Err("the Application kept changing; will retry".into())
}

/// The rollout's view of an Application.
fn view(app: &Application, updated: bool) -> AppView {
    let status = app.status.clone().unwrap_or_default();
    let source = &app.spec.source;
    AppView {
        name: app.name_any(),
        labels: app.labels().clone(),
        source: format!(
            "{}@{}",
            source.repo_url,
            if source.target_revision.is_empty() {
                "HEAD"
            } else {
                &source.target_revision
            }
        ),
        sync: status.sync.as_ref().map(|s| s.status.clone()).unwrap_or_default(),
        revision: status.sync.as_ref().map(|s| s.revision.clone()).unwrap_or_default(),
        health: status.health.as_ref().map(|h| h.status.clone()).unwrap_or_default(),
        health_message: status.health.as_ref().map(|h| h.message.clone()).unwrap_or_default(),
        operation: status.operation_state.as_ref().map(|o| OperationView {
            phase: o.phase,
            message: o.message.clone(),
            started_at: o.started_at.clone(),
            initiated_by: o
                .operation
                .as_ref()
                .map(|op| op.initiated_by.clone())
                .unwrap_or_default(),
        }),
        request_pending: capstan_api::operation::pending_request(app).is_some(),
        updated,
    }
}

/// Put what a successful generation did into the status.
fn record(status: &mut ApplicationSetStatus, set: &ApplicationSet, out: &Outcome) {
    status.resources = out
        .names
        .iter()
        .filter_map(|n| out.current.get(n))
        .map(|a| {
            let s = a.status.clone().unwrap_or_default();
            ApplicationSetResource {
                name: a.name_any(),
                status: s.sync.map(|s| s.status).unwrap_or_default(),
                health: s.health.map(|h| h.status).unwrap_or_default(),
            }
        })
        .collect();
    let conds = &mut status.conditions;
    set_condition(
        conds,
        "ParametersGenerated",
        true,
        "ParametersGenerated",
        &format!("generated {} Applications", out.names.len()),
    );
    let mut problems = Vec::new();
    if !out.conflicts.is_empty() {
        problems.push(format!(
            "Application{} {} already exist{} and {} not owned by ApplicationSet {}: left alone",
            if out.conflicts.len() == 1 { "" } else { "s" },
            out.conflicts.join(", "),
            if out.conflicts.len() == 1 { "s" } else { "" },
            if out.conflicts.len() == 1 { "is" } else { "are" },
            set.name_any()
        ));
    }
    problems.extend(out.errors.iter().cloned());
    if problems.is_empty() {
        let mut message = format!("all {} generated Applications are up to date", out.names.len());
        let policy_text = match policy(set) {
            ApplicationsSyncPolicy::CreateOnly => "create-only",
            ApplicationsSyncPolicy::CreateUpdate => "create-update",
            ApplicationsSyncPolicy::CreateDelete => "create-delete",
            ApplicationsSyncPolicy::Sync => "sync",
        };
        if !out.kept.is_empty() {
            message = format!(
                "{} Application(s) differ from the template and are kept as they are (applicationsSync: {policy_text}): {}",
                out.kept.len(),
                out.kept.join(", ")
            );
        }
        if !out.orphans.is_empty() {
            message.push_str(&format!(
                "; {} Application(s) no longer generated are kept (applicationsSync: {policy_text}): {}",
                out.orphans.len(),
                out.orphans.join(", ")
            ));
        }
        set_condition(conds, "ErrorOccurred", false, "ApplicationSetUpToDate", "");
        set_condition(conds, "ResourcesUpToDate", true, "ApplicationSetUpToDate", &message);
    } else {
        let reason = if out.conflicts.is_empty() {
            "ApplicationUpdateError"
        } else {
            "ApplicationConflict"
        };
        let message = problems.join("; ");
        set_condition(conds, "ErrorOccurred", true, reason, &message);
        set_condition(conds, "ResourcesUpToDate", false, reason, &message);
    }
    match &out.rollout {
        Some(summary) => {
            let (progressing, reason) = match summary {
                Summary::Complete(_) => (false, "RolloutComplete"),
                Summary::Progressing(_) => (true, "RolloutProgressing"),
                Summary::Stopped(_) => (false, "RolloutStopped"),
            };
            set_condition(conds, "RolloutProgressing", progressing, reason, summary.message());
            status.application_status = out
                .application_status
                .iter()
                .map(|s| ApplicationSetApplicationStatus {
                    message: redact(&s.message),
                    ..s.clone()
                })
                .collect();
        }
        None => {
            conds.retain(|c| c.type_ != "RolloutProgressing");
            status.application_status.clear();
        }
    }
}

/// Remove credentials from repository (and any other) URLs in `text`: `https://user:token@host`
/// becomes `https://user:***@host`, `https://token@host` becomes `https://***@host`.
fn redact(text: &str) -> String {
    capstan_source::redact(text, &[])
}

/// Set a condition (its message with credentials redacted); its transition time changes only when its
/// status does.
fn set_condition(conds: &mut Vec<ApplicationSetCondition>, type_: &str, status: bool, reason: &str, message: &str) {
    let status = if status { "True" } else { "False" };
    let message = redact(message);
    let message = message.as_str();
    if let Some(c) = conds.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status {
            c.last_transition_time = rollout::format_time(k8s_openapi::jiff::Timestamp::now());
        }
        c.status = status.into();
        c.reason = reason.into();
        c.message = message.into();
        return;
    }
    conds.push(ApplicationSetCondition {
        type_: type_.into(),
        status: status.into(),
        message: message.into(),
        reason: reason.into(),
        last_transition_time: rollout::format_time(k8s_openapi::jiff::Timestamp::now()),
    });
}

/// Write `status` when it differs from the stored one (a JSON merge patch of the difference).
async fn write_status(
    api: &Api<ApplicationSet>,
    set: &ApplicationSet,
    status: &ApplicationSetStatus,
) -> Result<(), String> {
    let before = set.status.clone().unwrap_or_default();
    if before == *status {
        return Ok(());
    }
    let old = serde_json::to_value(&before).unwrap_or(Value::Null);
    let new = serde_json::to_value(status).unwrap_or(Value::Null);
    let patch = json!({"status": capstan_controller::reconcile::merge_patch(&old, &new)});
    api.patch_status(&set.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|e| describe_kube_error(&e))
}

/// Keep [`PRESERVE_FINALIZER`] on the set exactly when it preserves resources on deletion.
async fn ensure_finalizer(api: &Api<ApplicationSet>, set: &mut ApplicationSet) -> Result<(), String> {
    let has = set.finalizers().iter().any(|f| f == PRESERVE_FINALIZER);
    let want = preserve(set);
    if has == want {
        return Ok(());
    }
    let mut finalizers: Vec<String> = set
        .finalizers()
        .iter()
        .filter(|f| *f != PRESERVE_FINALIZER)
        .cloned()
        .collect();
    if want {
        finalizers.push(PRESERVE_FINALIZER.into());
    }
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": set.resource_version()}});
    *set = api
        .patch(&set.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|e| describe_kube_error(&e))?;
    Ok(())
}

/// A set being deleted: with [`PRESERVE_FINALIZER`], take the resources finalizer off every owned
/// Application, then let garbage collection proceed.
async fn finalize(ctx: &Ctx, api: &Api<ApplicationSet>, set: &ApplicationSet) -> Result<(), String> {
    if !set.finalizers().iter().any(|f| f == PRESERVE_FINALIZER) {
        return Ok(());
    }
    let namespace = set.namespace().unwrap_or_default();
    let apps: Api<Application> = Api::namespaced(ctx.client.clone(), &namespace);
    let uid = set.uid().unwrap_or_default();
    // Listed from the API server, not the cache: no Application may keep its finalizer.
    let list = apps
        .list(&ListParams::default())
        .await
        .map_err(|e| describe_kube_error(&e))?;
    for app in list.items.iter().filter(|a| is_owned(a, &uid)) {
        strip_resources_finalizer(&apps, app).await?;
    }
    let rest: Vec<&String> = set.finalizers().iter().filter(|f| *f != PRESERVE_FINALIZER).collect();
    let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": set.resource_version()}});
    match api
        .patch(&set.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(describe_kube_error(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(yaml: &str) -> ApplicationSet {
        serde_saphyr::from_str(yaml).expect("ApplicationSet")
    }

    const BASE: &str = r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: web, namespace: capstan, uid: "1234"}
spec:
  generators: [{list: {elements: [{name: a}]}}]
  template:
    metadata: {name: "{{name}}", labels: {team: x}, finalizers: [capstan.dev/resources-finalizer]}
    spec:
      source: {repoURL: "git://x/r", path: "{{name}}"}
      destination: {server: "https://kubernetes.default.svc", namespace: web}
      syncPolicy: {automated: {prune: true}}
"#;

    #[test]
    fn finds_clusters_generators_at_any_depth() {
        assert!(!uses_clusters(&set(BASE)));
        let nested = BASE.replace(
            "generators: [{list: {elements: [{name: a}]}}]",
            "generators: [{matrix: {generators: [{clusters: {}}, {list: {elements: [{x: y}]}}]}}]",
        );
        assert!(uses_clusters(&set(&nested)));
    }

    fn generated(set: &ApplicationSet) -> Application {
        crate::generate(set, &Inputs::default()).expect("generate").remove(0)
    }

    #[test]
    fn desired_application_is_owned_labelled_and_loses_automated_under_rolling_sync() {
        let s = set(BASE);
        let app = generated(&s);
        let d = Desired::new(&app, &s, false);
        assert_eq!(d.body.pointer("/metadata/ownerReferences/0/uid"), Some(&json!("1234")));
        assert_eq!(
            d.body.pointer("/metadata/ownerReferences/0/controller"),
            Some(&json!(true))
        );
        assert_eq!(
            d.body.pointer("/metadata/labels/capstan.dev~1applicationset"),
            Some(&json!("web"))
        );
        assert_eq!(
            d.body.pointer("/metadata/finalizers/0"),
            Some(&json!(RESOURCES_FINALIZER))
        );
        assert!(d.body.pointer("/spec/syncPolicy/automated").is_some());
        assert!(d.body.pointer("/status").is_none());
        let rolling = Desired::new(&app, &s, true);
        assert!(rolling.body.pointer("/spec/syncPolicy/automated").is_none());
    }

    #[test]
    fn differs_ignores_what_others_own_and_sees_template_changes() {
        let s = set(BASE);
        let app = generated(&s);
        let d = Desired::new(&app, &s, false);
        let mut live: Application = serde_json::from_value(d.body.clone()).expect("live");
        assert!(!d.differs(&live));
        // Others' annotations, finalizers and status do not count.
        live.metadata
            .annotations
            .get_or_insert_default()
            .insert(OPERATION_ANNOTATION.into(), "{}".into());
        live.metadata
            .finalizers
            .get_or_insert_default()
            .push("example.com/other".into());
        live.status = Some(Default::default());
        assert!(!d.differs(&live));
        // A template change does.
        let mut changed = live.clone();
        changed.spec.source.path = "elsewhere".into();
        assert!(d.differs(&changed));
        // So does a label the controller applied before and the template no longer has.
        let mut stale = live.clone();
        stale
            .metadata
            .labels
            .get_or_insert_default()
            .insert("old".into(), "1".into());
        assert!(!d.differs(&stale), "not ours: kept");
        stale.metadata.managed_fields = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
                manager: Some(FIELD_MANAGER.into()),
                operation: Some("Apply".into()),
                fields_v1: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(json!({
                    "f:metadata": {"f:labels": {"f:old": {}, "f:team": {}}, "f:finalizers": {"v:\"capstan.dev/resources-finalizer\"": {}}}
                }))),
                ..Default::default()
            },
        ]);
        assert!(d.differs(&stale), "ours and no longer in the template: removed");
    }

    #[test]
    fn any_change_to_a_cluster_secret_changes_its_fingerprint() {
        use k8s_openapi::ByteString;
        let mut secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("cluster-prod".into()),
                labels: Some(BTreeMap::from([(
                    SECRET_TYPE_LABEL.to_string(),
                    CLUSTER_SECRET_TYPE.to_string(),
                )])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([
                ("name".to_string(), ByteString(b"prod".to_vec())),
                ("server".to_string(), ByteString(b"https://prod.example:6443".to_vec())),
                ("config".to_string(), ByteString(b"{not json".to_vec())),
            ])),
            ..Default::default()
        };
        let broken = secret_fingerprint(&secret);
        assert_eq!(broken, secret_fingerprint(&secret.clone()), "stable");
        // Fixing the config (name, server, labels unchanged) must re-trigger the sets.
        secret
            .data
            .as_mut()
            .unwrap()
            .insert("config".into(), ByteString(b"{}".to_vec()));
        let fixed = secret_fingerprint(&secret);
        assert_ne!(broken, fixed);
        secret
            .data
            .as_mut()
            .unwrap()
            .insert("namespaces".into(), ByteString(b"web".to_vec()));
        assert_ne!(fixed, secret_fingerprint(&secret));
        let before = secret_fingerprint(&secret);
        secret.string_data = Some(BTreeMap::from([("config".to_string(), "{}".to_string())]));
        assert_ne!(before, secret_fingerprint(&secret));
    }

    #[test]
    fn conditions_never_show_repository_credentials() {
        let mut conds = Vec::new();
        set_condition(
            &mut conds,
            "ErrorOccurred",
            true,
            "RepositoryError",
            "repository https://bot:s3cr3t@git.example/r.git at revision main: fatal: unable to access \
             'https://ghp_T0KEN@git.example/r.git/': 403",
        );
        assert_eq!(
            conds[0].message,
            "repository https://bot:***@git.example/r.git at revision main: fatal: unable to access \
             'https://***@git.example/r.git/': 403"
        );
        let mut status = ApplicationSetStatus::default();
        let out = Outcome {
            errors: vec![
                "applying Application a: spec.source.repoURL \"https://u:p4ssw0rd@h/r.git\" is invalid".into(),
            ],
            rollout: Some(Summary::Progressing("syncing".into())),
            application_status: vec![ApplicationSetApplicationStatus {
                application: "a".into(),
                message: "sync of https://u:p4ssw0rd@h/r.git failed".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        record(&mut status, &set(BASE), &out);
        let text = serde_json::to_string(&status).unwrap();
        assert!(!text.contains("p4ssw0rd"), "{text}");
        assert!(text.contains("https://u:***@h/r.git"), "{text}");
        assert_eq!(
            redact("ssh://git@host/r.git"),
            "ssh://git@host/r.git",
            "a user name is kept"
        );
    }

    #[test]
    fn a_creates_fields_are_handed_to_the_apply_entry() {
        let entry = |manager: &str, operation: &str, subresource: Option<&str>, fields: Value| ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(String::from),
            api_version: Some("capstan.dev/v1alpha1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        };
        let mut app = Application::new("a", Default::default());
        app.metadata.managed_fields = Some(vec![
            entry(
                FIELD_MANAGER,
                "Apply",
                None,
                json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
            ),
            entry(
                "capstan-controller",
                "Update",
                Some("status"),
                json!({"f:status": {"f:sync": {}}}),
            ),
        ]);
        assert!(adopted_entries(&app).is_none(), "nothing to adopt");
        app.metadata.managed_fields.as_mut().unwrap().push(entry(
            FIELD_MANAGER,
            "Update",
            None,
            json!({"f:metadata": {"f:labels": {"f:old": {}}}, "f:spec": {"f:project": {}}}),
        ));
        assert_eq!(
            managed_keys(&app, "f:labels"),
            ["team", "old"],
            "a create's labels count as ours"
        );
        let adopted = adopted_entries(&app).expect("adopted");
        assert_eq!(adopted.len(), 2, "{adopted:?}");
        assert_eq!(
            adopted[0].manager.as_deref(),
            Some("capstan-controller"),
            "others untouched"
        );
        let ours = &adopted[1];
        assert_eq!(
            (ours.manager.as_deref(), ours.operation.as_deref()),
            (Some(FIELD_MANAGER), Some("Apply"))
        );
        assert_eq!(
            ours.fields_v1.as_ref().unwrap().0,
            json!({"f:metadata": {"f:labels": {"f:team": {}, "f:old": {}}}, "f:spec": {"f:project": {}}})
        );
    }

    /// Against a real API server: creating never takes over an Application someone else created, and an
    /// update decided on a stale cache never writes an Application that is no longer the set's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_never_take_over_someone_elses_application() -> anyhow::Result<()> {
        capstan_testkit::init_logging();
        let cluster = capstan_testkit::TestCluster::start().await?;
        let client = cluster.client().await?;
        install_crds(&client).await?;
        let sets: Api<ApplicationSet> = Api::namespaced(client.clone(), "capstan");
        let apps: Api<Application> = Api::namespaced(client.clone(), "capstan");
        let mut owner = set(BASE);
        owner.metadata.uid = None;
        let owner = sets.create(&PostParams::default(), &owner).await?;
        let uid = owner.uid().expect("uid");
        let policy = ApplicationsSyncPolicy::Sync;
        let desired_for = |labels: Value, name: &str| {
            let mut s = owner.clone();
            s.spec.template.metadata.labels = serde_json::from_value(labels).unwrap();
            let mut app = generated(&s);
            app.metadata.name = Some(name.into());
            Desired::new(&app, &s, false)
        };
        let someone_elses = |name: &str| -> Application {
            serde_json::from_value(json!({
                "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
                "metadata": {"name": name, "namespace": "capstan"},
                "spec": {"source": {"repoURL": "git://elsewhere/r", "path": "theirs"}, "destination": {"namespace": "theirs"}},
            }))
            .unwrap()
        };
        let theirs = |app: &Application| {
            app.owner_references().is_empty()
                && app.spec.source.path == "theirs"
                && !app.labels().contains_key(APPLICATIONSET_LABEL)
        };

        // The name was free when looked up, and someone created it before the set did.
        apps.create(&PostParams::default(), &someone_elses("a")).await?;
        let d = desired_for(json!({"team": "x"}), "a");
        assert!(matches!(create(&apps, &uid, policy, "a", &d).await, Change::Conflict));
        assert!(theirs(&apps.get("a").await?), "not taken over");

        // A created Application: its fields belong to the apply, so a label dropped from the template
        // is removed by the next update.
        let d = desired_for(json!({"team": "x", "tier": "web"}), "b");
        let Change::Created(b) = create(&apps, &uid, policy, "b", &d).await else {
            panic!("b not created");
        };
        assert!(is_owned(&b, &uid));
        let ours: Vec<_> = b
            .managed_fields()
            .iter()
            .filter(|e| e.manager.as_deref() == Some(FIELD_MANAGER))
            .map(|e| e.operation.clone().unwrap_or_default())
            .collect();
        assert_eq!(ours, ["Apply"], "{:?}", b.managed_fields());
        let d = desired_for(json!({"team": "x"}), "b");
        let Change::Updated(b) = change(&apps, &uid, policy, "b", &d, Some(b)).await else {
            panic!("b not updated");
        };
        assert_eq!(b.labels().get("tier"), None, "{:?}", b.labels());
        assert_eq!(b.labels().get("team").map(String::as_str), Some("x"));

        // The cache still shows the set's Application c, but it was deleted and someone else created c.
        let d = desired_for(json!({"team": "x"}), "c");
        let Change::Created(stale) = create(&apps, &uid, policy, "c", &d).await else {
            panic!("c not created");
        };
        let no_finalizers = json!({"metadata": {"finalizers": null}});
        apps.patch("c", &PatchParams::default(), &Patch::Merge(no_finalizers))
            .await?;
        apps.delete("c", &DeleteParams::default()).await?;
        while apps.get_opt("c").await?.is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        apps.create(&PostParams::default(), &someone_elses("c")).await?;
        let d = desired_for(json!({"team": "changed"}), "c");
        assert!(matches!(
            change(&apps, &uid, policy, "c", &d, Some(stale.clone())).await,
            Change::Conflict
        ));
        assert!(theirs(&apps.get("c").await?), "not taken over");

        // Even when handed the stale object as if just read, the preconditions refuse the write.
        let outcome = update(&apps, &uid, policy, "c", &d, stale).await;
        assert!(matches!(outcome, Change::Conflict), "re-read and refused");
        assert!(theirs(&apps.get("c").await?), "not taken over");
        Ok(())
    }

    async fn install_crds(client: &Client) -> anyhow::Result<()> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let pp = PatchParams::apply("test").force();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for (_, crd) in capstan_api::crd::all() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            crds.patch(&name, &pp, &Patch::Apply(&crd)).await?;
            let deadline = Instant::now() + Duration::from_secs(30);
            while !crds
                .get(&name)
                .await?
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                anyhow::ensure!(Instant::now() < deadline, "CRD {name} not established");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        ns.patch(
            "capstan",
            &pp,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capstan"}})),
        )
        .await?;
        Ok(())
    }

    #[test]
    fn label_values_fit_the_limit() {
        assert_eq!(label_value("web"), "web");
        let long = format!("{}-x", "a".repeat(62));
        assert_eq!(label_value(&long).len(), 62);
    }
}
