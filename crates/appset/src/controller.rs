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
//! A set belongs to the project its template names (see `controller/project.rs`): its git
//! generators read only repositories that project permits, and every generated Application —
//! checked as generated, after templating and patching — must belong to it; a refusal is a
//! generation error like any other.
//!
//! With `strategy.type: RollingSync`, generated Applications lose `syncPolicy.automated` and the
//! [`crate::rollout`] plan decides which ones to sync (by operation request, `initiatedBy:
//! applicationset-rollingsync`); progress is recorded in `status.applicationStatus` and the
//! `RolloutProgressing` condition.

mod apply;
mod children;
mod desired;
mod generation;
pub mod inputs;
mod problem;
mod project;
mod status;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capstan_api::cluster::CLUSTER_SECRET_TYPE;
use capstan_api::labels::{REFRESH_ANNOTATION, SECRET_TYPE_LABEL};
use capstan_api::operation::OPERATION_ANNOTATION;
use capstan_api::{Application, ApplicationSet};
use capstan_kube::describe_kube_error;
use capstan_source::RepoCache;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::reflector;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;

use apply::*;
use children::*;
use desired::*;
use generation::*;
use status::*;

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
    /// Without an AppProject named `default`, the `default` project permits nothing (the operator's
    /// `--deny-implicit-default-project`): a set must then belong to a project an operator created.
    pub deny_implicit_default_project: bool,
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
            deny_implicit_default_project: false,
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
#[error("ApplicationSet {set}: {}", status::redact(&.source.to_string()))]
pub struct ReconcileError {
    set: String,
    #[source]
    source: WriteError,
}

/// A call to the Kubernetes API that failed, or something the controller waited for in vain.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The API refused or could not be reached.
    #[error("{}", describe_kube_error(.0))]
    Kube(#[from] kube::Error),
    /// An operation request could not be encoded.
    #[error("encoding the operation request: {0}")]
    Encode(#[from] serde_json::Error),
    /// A watch did not list in time or stopped, or an object kept changing under a write.
    #[error("{0}")]
    Waiting(&'static str),
}

struct Ctx {
    client: Client,
    config: AppSetConfig,
    repos: RepoCache,
    clusters: Store<Secret>,
    apps: Store<Application>,
}

/// Run the controller until `shutdown` resolves: from then on no reconcile starts, and those in
/// flight finish before it returns. A shutdown during start-up returns at once.
pub async fn run(
    client: Client,
    config: AppSetConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), AppSetError> {
    let shutdown = shutdown.shared();
    let sets: Api<ApplicationSet> = Api::namespaced(client.clone(), &config.namespace);
    let Some(listed) =
        capstan_kube::shutdown::before(shutdown.clone(), sets.list(&ListParams::default().limit(1))).await
    else {
        return Ok(());
    };
    listed.map_err(|e| AppSetError::NotInstalled(describe_kube_error(&e)))?;
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
    let controller = Controller::for_stream(set_stream, set_reader.clone())
        .with_config(
            controller::Config::default()
                .concurrency(config.concurrency.max(1))
                // Merges the burst of Application status changes one sync causes.
                .debounce(Duration::from_millis(300)),
        )
        .reconcile_on(trigger_rx)
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(err) = res {
                tracing::debug!(%err, "ApplicationSet reconcile error");
            }
        });
    capstan_kube::shutdown::drive(controller, &set_reader, shutdown).await;
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::Inputs;

    pub(super) fn set(yaml: &str) -> ApplicationSet {
        serde_saphyr::from_str(yaml).expect("ApplicationSet")
    }

    pub(super) const BASE: &str = r#"
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

    pub(super) fn generated(set: &ApplicationSet) -> Application {
        crate::generate(set, &Inputs::default()).expect("generate").remove(0)
    }

    #[test]
    fn finds_clusters_generators_at_any_depth() {
        assert!(!uses_clusters(&set(BASE)));
        let nested = BASE.replace(
            "generators: [{list: {elements: [{name: a}]}}]",
            "generators: [{matrix: {generators: [{clusters: {}}, {list: {elements: [{x: y}]}}]}}]",
        );
        assert!(uses_clusters(&set(&nested)));
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
}
