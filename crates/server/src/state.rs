//! What every request handler shares: the Kubernetes client, watch-fed caches of Applications,
//! ApplicationSets, the server's Secret and the RBAC ConfigMap, the change feed behind the live
//! updates, and a read-only pipeline for diffs, manifests and resource trees.
//!
//! State and [`crate::auth`] refer to each other on purpose: the state holds authentication's caches
//! (login counters, the parsed RBAC policy, the SSO provider's discovery document and keys) so that
//! they live as long as the server, and authentication reads the state's Secret and policy on every
//! request. Everything else depends on both, never the other way round
//! (`scripts/module-cycles.py` checks it).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use capstan_api::{Application, ApplicationSet};
use capstan_controller::Pipeline;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::broadcast;

use crate::auth::limit::LoginLimiter;
use crate::auth::rbac::{self, Policy, PolicyCache};
use crate::stream::limit::StreamLimiter;

/// Name of the Secret holding the admin password hash, local accounts, API tokens, the session
/// signing key and webhook secrets.
pub const SECRET: &str = "capstan-secret";

/// A change to an Application, as the live-update streams see it (the controller's type: a server
/// in the controller's process follows the controller's feed).
pub use capstan_controller::shared_apps::AppEvent;
use capstan_controller::shared_apps::{FEED_CAPACITY, SharedApps};

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Namespace of the Applications and of the server's own Secret and ConfigMap.
    pub namespace: String,
    /// Whether the session cookie carries `Secure`.
    pub secure_cookies: bool,
    /// Where the read-only pipeline keeps its Git cache.
    pub cache_dir: std::path::PathBuf,
    /// A separate address serving `/metrics` without authentication (for a scraper), if any.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// A directory holding `cache_dir` and every other Git cache of Capstan on this machine; no
    /// Application may read a repository from there.
    pub cache_root: std::path::PathBuf,
    /// Accept webhook events of providers without a configured secret (unsigned); off by default.
    pub webhook_allow_unsigned: bool,
    /// Without an AppProject named `default`, the `default` project permits nothing (the operator's
    /// `--deny-implicit-default-project`): diffs, manifests and promotions follow the same rules as
    /// the controller.
    pub deny_implicit_default_project: bool,
}

/// Shared state of the server.
pub struct State {
    /// Client of the cluster the Applications live in.
    pub client: Client,
    /// Settings.
    pub config: ServerConfig,
    /// Applications.
    pub apps: Store<Application>,
    /// ApplicationSets.
    pub appsets: Store<ApplicationSet>,
    secret: Store<Secret>,
    rbac: Store<ConfigMap>,
    policy: PolicyCache,
    /// Failed-login counters and the bound on concurrent password checks.
    pub logins: LoginLimiter,
    /// Open live-update streams, per principal and in all.
    pub streams: StreamLimiter,
    /// Application changes for live updates.
    pub events: broadcast::Sender<AppEvent>,
    ready: AtomicUsize,
    /// The read-only pipeline (diffs, manifests, destinations).
    pub pipeline: Arc<Pipeline>,
    /// Turns true when the server shuts down: long-lived streams end then.
    shutdown: tokio::sync::watch::Sender<bool>,
    /// The single sign-on provider, once discovered.
    pub sso: crate::auth::oidc::provider::Sso,
}

/// Where the server's Applications come from.
enum AppsSource {
    /// A watch of its own, filling this writer's cache.
    Own(reflector::store::Writer<Application>),
    /// The controller's cache in the same process.
    Shared(Arc<SharedApps>),
}

/// How many watches must have listed once before the server is ready.
const WATCHES: usize = 4;

impl State {
    /// Start the watches and return the state (not ready until each has listed once).
    pub fn start(client: Client, config: ServerConfig) -> Arc<State> {
        Self::start_with(client, config, None)
    }

    /// [`State::start`], reading Applications from `shared` (filled by the controller in this
    /// process) when given, instead of a watch of the server's own.
    pub fn start_with(client: Client, config: ServerConfig, shared: Option<Arc<SharedApps>>) -> Arc<State> {
        let ns = config.namespace.clone();
        let pipeline = Pipeline::guarding(
            client.clone(),
            config.cache_dir.clone(),
            config.cache_root.clone(),
            &ns,
            std::time::Duration::from_secs(60),
            std::time::Duration::from_secs(30),
        );
        pipeline.clusters.spawn_watch();
        // The tree shows child objects' health with the operators' rules, as the controller judges.
        pipeline.health.spawn(None);
        pipeline
            .projects
            .deny_implicit_default(config.deny_implicit_default_project);
        let (apps, events, source) = match shared {
            Some(shared) => (shared.store(), shared.events(), AppsSource::Shared(shared)),
            None => {
                let (apps, apps_w) = reflector::store();
                (apps, broadcast::channel(FEED_CAPACITY).0, AppsSource::Own(apps_w))
            }
        };
        let (appsets, appsets_w) = reflector::store();
        let (secret, secret_w) = reflector::store();
        let (rbac_store, rbac_w) = reflector::store();
        let state = Arc::new(State {
            client: client.clone(),
            config,
            apps,
            appsets,
            secret,
            rbac: rbac_store,
            policy: PolicyCache::default(),
            logins: LoginLimiter::default(),
            streams: StreamLimiter::default(),
            events,
            ready: AtomicUsize::new(0),
            pipeline,
            shutdown: tokio::sync::watch::Sender::new(false),
            sso: Default::default(),
        });

        match source {
            AppsSource::Own(apps_w) => state.watch_apps(apps_w),
            AppsSource::Shared(shared) => {
                // The controller's watch fills the shared cache: ready once it has listed.
                let s = state.clone();
                tokio::spawn(async move {
                    shared.wait_listed().await;
                    s.ready.fetch_add(1, Ordering::SeqCst);
                });
            }
        }
        let api: Api<ApplicationSet> = Api::namespaced(client.clone(), &ns);
        state.spawn_store(appsets_w, api, watcher::Config::default());
        let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
        state.spawn_store(
            secret_w,
            api,
            watcher::Config::default().fields(&format!("metadata.name={SECRET}")),
        );
        let api: Api<ConfigMap> = Api::namespaced(client, &ns);
        state.spawn_store(
            rbac_w,
            api,
            watcher::Config::default().fields(&format!("metadata.name={}", rbac::CONFIGMAP)),
        );
        state
    }

    /// The server's own Application watch: the cache and the feed of changes.
    fn watch_apps(self: &Arc<Self>, apps_w: reflector::store::Writer<Application>) {
        let s = self.clone();
        let api: Api<Application> = Api::namespaced(self.client.clone(), &self.config.namespace);
        tokio::spawn(async move {
            // Kept without managedFields (see `capstan_kube::cache`): the API answers without them too.
            let apps = watcher(api, watcher::Config::default()).modify(capstan_kube::cache::without_managed_fields);
            let stream = reflector::reflector(apps_w, apps).default_backoff();
            let mut stream = std::pin::pin!(stream);
            let mut listed = false;
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(app)) | Ok(watcher::Event::InitApply(app)) => {
                        let _ = s.events.send(AppEvent::Applied(Arc::new(app)));
                    }
                    Ok(watcher::Event::Delete(app)) => {
                        let _ = s.events.send(AppEvent::Deleted(app.name_any()));
                    }
                    Ok(watcher::Event::InitDone) if !listed => {
                        listed = true;
                        s.ready.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {}
                    Err(err) => tracing::debug!(%err, "Application watch error"),
                }
            }
        });
    }

    fn spawn_store<K>(self: &Arc<Self>, writer: reflector::store::Writer<K>, api: Api<K>, config: watcher::Config)
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        let s = self.clone();
        tokio::spawn(async move {
            let stream = reflector::reflector(
                writer,
                watcher(api, config).modify(capstan_kube::cache::without_managed_fields),
            )
            .default_backoff();
            let mut stream = std::pin::pin!(stream);
            let mut listed = false;
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) if !listed => {
                        listed = true;
                        s.ready.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {}
                    Err(err) => tracing::debug!(%err, kind = %K::kind(&()), "watch error"),
                }
            }
        });
    }

    /// Tell long-lived streams that the server is shutting down.
    pub fn shut_down(&self) {
        self.shutdown.send_replace(true);
    }

    /// Resolves when the server shuts down.
    pub fn stopping(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.shutdown.subscribe();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }

    /// Whether every watch has listed once.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) >= WATCHES
    }

    /// A value of the server's Secret.
    pub fn secret_value(&self, key: &str) -> Option<Vec<u8>> {
        let secret = self.secret.state().into_iter().next()?;
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
            .filter(|v| !v.is_empty())
    }

    /// Every key of the server's Secret starting with `prefix`, with its value.
    pub fn secret_values(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        let Some(secret) = self.secret.state().into_iter().next() else {
            return Vec::new();
        };
        secret
            .data
            .as_ref()
            .map(|d| {
                d.iter()
                    .filter(|(k, _)| k.starts_with(prefix))
                    .map(|(k, v)| (k.clone(), v.0.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The RBAC policy, parsed once per version of the ConfigMap; an unreadable policy grants
    /// nothing beyond the admin account (and says why in the log).
    pub fn policy(&self) -> Arc<Policy> {
        let cm = self.rbac.state().into_iter().next();
        let version = cm.as_ref().map(|cm| cm.resource_version().unwrap_or_default());
        self.policy.get(version.as_deref(), || {
            cm.and_then(|cm| cm.data.as_ref().and_then(|d| d.get(rbac::KEY).cloned()))
                .unwrap_or_default()
        })
    }

    /// The Application `name` from the cache.
    pub fn app(&self, name: &str) -> Option<Arc<Application>> {
        self.apps
            .get(&reflector::ObjectRef::new(name).within(&self.config.namespace))
    }
}
