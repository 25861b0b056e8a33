//! Destination clusters as the controller uses them: the cluster Capstan runs in (`in-cluster`) and
//! every cluster registered with a Secret labelled `capstan.dev/secret-type: cluster`.
//!
//! Each destination has its own client, discovery cache and managed-object watches. Cluster
//! Secrets are watched, so registering, relabelling or removing a cluster takes effect at once;
//! every registered cluster is probed periodically, its connection state recorded (for
//! `capstan cluster list`), and while it is unreachable its Applications fail fast with the last
//! error instead of holding workers on connection timeouts — one dead cluster never slows the others.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use capstan_api::Application;
use capstan_api::application::ApplicationDestination;
use capstan_api::cluster::{CLUSTER_SECRET_TYPE, IN_CLUSTER_NAME, IN_CLUSTER_SERVER};
use capstan_api::labels::SECRET_TYPE_LABEL;
use capstan_api::status::ConnectionStatus;
use capstan_cluster::ClusterSecret;
use capstan_cluster::status::{ConnectionState, STATUS_CONFIGMAP, key_for};
use capstan_kube::{Discovery, describe_kube_error};
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::clock;
use crate::error::PipelineError;
use crate::watches::{Trigger, Watches};

/// How often registered clusters are probed.
const PROBE_INTERVAL: Duration = Duration::from_secs(10);

/// One destination cluster.
pub struct Destination {
    /// Its name (`in-cluster` for the cluster Capstan runs in).
    pub name: String,
    /// Its API server URL as Applications name it.
    pub server: String,
    /// A client authenticated as Capstan on it.
    pub client: kube::Client,
    /// Its discovery cache.
    pub discovery: Discovery,
    /// Watches on the objects Capstan manages there.
    pub watches: Watches,
    /// The Secret it was built from (`None` for `in-cluster`).
    pub secret: Option<ClusterSecret>,
    /// Write requests of syncs in flight there, shared by every Application that deploys there.
    pub sync_writes: std::sync::Arc<tokio::sync::Semaphore>,
    /// Versions of objects there that Capstan's syncs wrote (their watch events trigger nothing).
    pub own_writes: capstan_kube::OwnWrites,
    usable: bool,
    state: Mutex<ConnectionState>,
}

impl Destination {
    fn new(
        name: String,
        server: String,
        client: kube::Client,
        secret: Option<ClusterSecret>,
        trigger: &Trigger,
    ) -> Self {
        let own_writes = capstan_kube::OwnWrites::default();
        Self {
            discovery: Discovery::new(client.clone()),
            watches: Watches::new(client.clone(), trigger.clone(), own_writes.clone()),
            own_writes,
            sync_writes: std::sync::Arc::new(tokio::sync::Semaphore::new(capstan_sync::execute::PARALLELISM)),
            client,
            name,
            server,
            secret,
            usable: true,
            state: Mutex::new(ConnectionState {
                status: ConnectionStatus::Unknown,
                ..Default::default()
            }),
        }
    }

    /// The last probe's result.
    pub fn state(&self) -> ConnectionState {
        lock(&self.state).clone()
    }

    /// Whether objects in `namespace` (`None`: cluster-scoped) may be managed here.
    pub fn permits(&self, namespace: Option<&str>) -> bool {
        self.secret.as_ref().is_none_or(|s| s.permits(namespace))
    }

    /// `name (server)`, for messages.
    pub fn describe(&self) -> String {
        format!("cluster {:?} ({})", self.name, self.server)
    }
}

/// What a cluster Secret says of its cluster besides how to connect: what generators select on and
/// `capstan cluster list` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterMetadata {
    /// The Secret's name.
    pub secret: String,
    /// Its labels (the clusters generator's selectors match them).
    pub labels: BTreeMap<String, String>,
    /// Its annotations, but `kubectl apply`'s copy of the whole Secret.
    pub annotations: BTreeMap<String, String>,
    /// The namespaces Capstan may manage there (empty: all).
    pub namespaces: Vec<String>,
}

impl ClusterMetadata {
    fn of(parsed: &ClusterSecret) -> Self {
        Self {
            secret: parsed.secret_name.clone(),
            labels: parsed.labels.clone(),
            annotations: parsed.shown_annotations(),
            namespaces: parsed.namespaces.clone(),
        }
    }
}

/// Every known destination.
pub struct Clusters {
    hub: kube::Client,
    namespace: String,
    local: Arc<Destination>,
    /// Registered clusters by Secret name.
    remote: RwLock<BTreeMap<String, Arc<Destination>>>,
    /// Every cluster Secret's cluster name and metadata, by Secret name: kept apart from the
    /// destinations (a change of labels alone keeps a destination's client and watches) and
    /// holding `in-cluster`'s too (whose Secret, if any, holds only metadata).
    labels: RwLock<BTreeMap<String, (String, ClusterMetadata)>>,
    /// Which Applications asked for which destination key (`server:URL` / `name:NAME`), so a change
    /// to that cluster re-reconciles them.
    users: Mutex<HashMap<String, HashSet<ObjectRef<Application>>>>,
    trigger: Trigger,
    /// Set once the first listing of cluster Secrets has been applied (the controller's watch);
    /// before that, an unknown cluster may just not be read yet.
    ready: tokio::sync::watch::Sender<bool>,
}

impl Clusters {
    /// The registry, knowing only `in-cluster` until [`Clusters::load`] or [`Clusters::spawn`].
    pub fn new(hub: kube::Client, namespace: &str) -> Arc<Self> {
        let trigger: Trigger = Arc::new(OnceLock::new());
        let local = Destination::new(
            IN_CLUSTER_NAME.into(),
            IN_CLUSTER_SERVER.into(),
            hub.clone(),
            None,
            &trigger,
        );
        Arc::new(Self {
            hub,
            namespace: namespace.to_string(),
            local: Arc::new(local),
            remote: RwLock::new(BTreeMap::new()),
            labels: RwLock::new(BTreeMap::new()),
            users: Mutex::new(HashMap::new()),
            trigger,
            ready: tokio::sync::watch::Sender::new(false),
        })
    }

    /// Wait (up to 30 s) until the cluster Secrets have been read once, when a watch runs.
    pub async fn wait_ready(&self) {
        if self.trigger.get().is_none() {
            return; // not a controller: `load` reads them on demand
        }
        let mut rx = self.ready.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|r| *r)).await;
    }

    /// The cluster Capstan runs in.
    pub fn local(&self) -> &Arc<Destination> {
        &self.local
    }

    /// The destination of `app`; unknown and (known to be) unreachable clusters are errors.
    pub fn lookup(&self, app: &Application) -> Result<Arc<Destination>, PipelineError> {
        let d = &app.spec.destination;
        let key = user_key(d);
        lock(&self.users)
            .entry(key)
            .or_default()
            .insert(ObjectRef::from_obj(app));
        let dest = self.find(d)?;
        let state = dest.state();
        if state.status == ConnectionStatus::Failed {
            return Err(PipelineError::Unreachable {
                destination: dest.describe(),
                message: state.message,
            });
        }
        Ok(dest)
    }

    /// The destination named by `d`, whatever its state.
    fn find(&self, d: &ApplicationDestination) -> Result<Arc<Destination>, PipelineError> {
        let server = d.server.trim().trim_end_matches('/');
        let name = d.name.trim();
        if !server.is_empty() && !name.is_empty() {
            return Err(PipelineError::ServerAndName);
        }
        let remote = read(&self.remote);
        let matching: Vec<&Arc<Destination>> = if server.is_empty() {
            let name = if name.is_empty() { IN_CLUSTER_NAME } else { name };
            remote.values().filter(|c| c.name == name).collect()
        } else {
            remote.values().filter(|c| c.server == server).collect()
        };
        if matching.len() > 1 {
            let secrets: Vec<String> = matching
                .iter()
                .filter_map(|c| c.secret.as_ref().map(|s| s.secret_name.clone()))
                .collect();
            return Err(PipelineError::AmbiguousDestination {
                secrets,
                cluster: if server.is_empty() { name } else { server }.to_string(),
            });
        }
        let found = matching.first().map(|c| (*c).clone()).or_else(|| {
            let local = if server.is_empty() {
                name.is_empty() || name == IN_CLUSTER_NAME
            } else {
                server == IN_CLUSTER_SERVER
            };
            local.then(|| self.local.clone())
        });
        found.ok_or_else(|| {
            let which = if server.is_empty() {
                format!("name {name:?}")
            } else {
                format!("server {server:?}")
            };
            let mut known: Vec<String> = remote.values().map(|c| c.name.clone()).collect();
            known.insert(0, IN_CLUSTER_NAME.into());
            PipelineError::UnknownDestination { which, known }
        })
    }

    /// `app` is gone: stop re-reconciling it when its cluster changes.
    pub fn forget(&self, app: &ObjectRef<Application>) {
        lock(&self.users).retain(|_, apps| {
            apps.remove(app);
            !apps.is_empty()
        });
    }

    /// The labels of cluster `name` (`in-cluster` included), as its Secret has them now.
    pub fn labels_of(&self, name: &str) -> BTreeMap<String, String> {
        self.metadata_of(name).map(|m| m.labels).unwrap_or_default()
    }

    /// What the Secret of cluster `name` (`in-cluster` included) says of it now; `None` for
    /// `in-cluster` without a Secret.
    pub fn metadata_of(&self, name: &str) -> Option<ClusterMetadata> {
        read(&self.labels)
            .values()
            .find(|(cluster, _)| cluster == name)
            .map(|(_, metadata)| metadata.clone())
    }

    /// Every destination, `in-cluster` first.
    pub fn all(&self) -> Vec<Arc<Destination>> {
        let mut out = vec![self.local.clone()];
        out.extend(read(&self.remote).values().cloned());
        out
    }

    /// Read the cluster Secrets once (what the CLI does; the controller keeps watching instead).
    pub async fn load(self: &Arc<Self>) -> Result<(), PipelineError> {
        let secrets: Api<Secret> = Api::namespaced(self.hub.clone(), &self.namespace);
        let list = secrets
            .list(&ListParams::default().labels(&format!("{SECRET_TYPE_LABEL}={CLUSTER_SECRET_TYPE}")))
            .await
            .map_err(PipelineError::ClusterSecrets)?;
        for secret in list.items {
            self.upsert(&secret).await;
        }
        Ok(())
    }

    /// Watch cluster Secrets and probe every cluster until the runtime stops; reconcile triggers go
    /// to `trigger`.
    pub fn spawn(self: &Arc<Self>, trigger: UnboundedSender<ObjectRef<Application>>) {
        let _ = self.trigger.set(trigger);
        let this = self.clone();
        tokio::spawn(async move { this.watch_secrets().await });
        let this = self.clone();
        tokio::spawn(async move { this.probe_forever().await });
    }

    /// Watch cluster Secrets only: no probes, no reconcile triggers (what a server process that reads
    /// destinations, without running the controller, needs).
    pub fn spawn_watch(self: &Arc<Self>) {
        let this = self.clone();
        tokio::spawn(async move { this.watch_secrets().await });
    }

    async fn watch_secrets(self: Arc<Self>) {
        let secrets: Api<Secret> = Api::namespaced(self.hub.clone(), &self.namespace);
        let config = watcher::Config::default().labels(&format!("{SECRET_TYPE_LABEL}={CLUSTER_SECRET_TYPE}"));
        let mut stream = std::pin::pin!(watcher(secrets, config).default_backoff());
        let mut seen: HashSet<String> = HashSet::new();
        let mut relisted: Option<HashSet<String>> = None;
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(s)) => {
                    seen.insert(secret_name(&s));
                    self.upsert(&s).await;
                }
                Ok(watcher::Event::Delete(s)) => {
                    seen.remove(&secret_name(&s));
                    self.remove(&secret_name(&s));
                }
                Ok(watcher::Event::Init) => relisted = Some(HashSet::new()),
                Ok(watcher::Event::InitApply(s)) => {
                    if let Some(r) = relisted.as_mut() {
                        r.insert(secret_name(&s));
                    }
                    self.upsert(&s).await;
                }
                Ok(watcher::Event::InitDone) => {
                    self.ready.send_replace(true);
                    // Secrets deleted while the watch was down.
                    if let Some(now) = relisted.take() {
                        for gone in seen.difference(&now).cloned().collect::<Vec<_>>() {
                            self.remove(&gone);
                        }
                        seen = now;
                    }
                }
                Err(err) => tracing::debug!(%err, "cluster Secret watch error"),
            }
        }
    }

    /// Add or replace the destination of `secret` (a Secret whose content did not change keeps its
    /// client, caches and watches).
    async fn upsert(self: &Arc<Self>, secret: &Secret) {
        let parsed = match ClusterSecret::from_secret(secret) {
            Ok(p) => p,
            Err(err) => {
                tracing::warn!(%err, "ignoring cluster Secret");
                self.remove(&secret_name(secret));
                return;
            }
        };
        if parsed.is_in_cluster() {
            // Metadata for `in-cluster` only; its connection is Capstan's own.
            self.remove(&parsed.secret_name);
            self.set_labels(&parsed, IN_CLUSTER_NAME);
            return;
        }
        self.set_labels(&parsed, &parsed.name);
        let unchanged = read(&self.remote)
            .get(&parsed.secret_name)
            .and_then(|existing| existing.secret.as_ref())
            .is_some_and(|old| same_connection(old, &parsed));
        if unchanged {
            return;
        }
        let dest = match capstan_cluster::connect::client(&parsed).await {
            Ok(client) => Destination::new(
                parsed.name.clone(),
                parsed.server.clone(),
                client,
                Some(parsed.clone()),
                &self.trigger,
            ),
            Err(err) => {
                tracing::warn!(%err, "cluster Secret unusable");
                // Keep it known, so its Applications say why instead of "not registered".
                let mut dest = Destination::new(
                    parsed.name.clone(),
                    parsed.server.clone(),
                    self.hub.clone(),
                    Some(parsed.clone()),
                    &self.trigger,
                );
                dest.usable = false;
                *lock(&dest.state) = ConnectionState {
                    status: ConnectionStatus::Failed,
                    message: err.to_string(),
                    ..Default::default()
                };
                dest
            }
        };
        let dest = Arc::new(dest);
        write(&self.remote).insert(parsed.secret_name.clone(), dest.clone());
        tracing::info!(cluster = %parsed.name, server = %parsed.server, "cluster registered");
        self.retrigger(&dest);
        if self.trigger.get().is_some() {
            // Probed in the background: a slow cluster must not hold up the Secret watch.
            let this = self.clone();
            tokio::spawn(async move {
                if dest.usable {
                    this.probe(&dest).await;
                } else {
                    this.record(&dest).await;
                }
            });
        }
    }

    fn set_labels(&self, parsed: &ClusterSecret, cluster: &str) {
        write(&self.labels).insert(
            parsed.secret_name.clone(),
            (cluster.to_string(), ClusterMetadata::of(parsed)),
        );
    }

    fn remove(&self, secret: &str) {
        write(&self.labels).remove(secret);
        let removed = write(&self.remote).remove(secret);
        if let Some(dest) = removed {
            tracing::info!(cluster = %dest.name, "cluster removed");
            self.retrigger(&dest);
        }
    }

    /// Re-reconcile the Applications that used (or looked for) `dest`.
    fn retrigger(&self, dest: &Destination) {
        let Some(trigger) = self.trigger.get() else { return };
        let keys = [format!("server:{}", dest.server), format!("name:{}", dest.name)];
        let users = lock(&self.users);
        for key in keys {
            for app in users.get(&key).into_iter().flatten() {
                let _ = trigger.unbounded_send(app.clone());
            }
        }
    }

    async fn probe_forever(self: Arc<Self>) {
        self.probe(&self.local).await;
        loop {
            tokio::time::sleep(PROBE_INTERVAL).await;
            // Concurrently: one slow or dead cluster must not delay noticing the others.
            let probes = self.all().into_iter().map(|dest| {
                let this = self.clone();
                async move {
                    let before = dest.state().status;
                    this.probe(&dest).await;
                    if dest.state().status != before {
                        this.retrigger(&dest);
                    }
                }
            });
            futures::future::join_all(probes).await;
        }
    }

    /// Ask `dest` for its version and record the outcome.
    async fn probe(&self, dest: &Destination) {
        if !dest.usable {
            // Built on the hub's client only to report why its Secret is unusable: probing it would
            // report the hub's health.
            return;
        }
        let result = tokio::time::timeout(
            capstan_cluster::connect::CONNECT_TIMEOUT * 2,
            dest.client.apiserver_version(),
        )
        .await;
        let now = clock::now();
        let state = match result {
            Ok(Ok(info)) => ConnectionState {
                status: ConnectionStatus::Successful,
                message: String::new(),
                server_version: info.git_version,
                checked_at: now,
            },
            Ok(Err(e)) => failed(dest, describe_kube_error(&e), now),
            Err(_) => failed(dest, "timed out connecting".into(), now),
        };
        let changed = {
            let mut current = lock(&dest.state);
            let changed = current.status != state.status
                || current.message != state.message
                || current.server_version != state.server_version;
            *current = state;
            changed
        };
        if changed {
            self.record(dest).await;
        }
    }

    /// Write `dest`'s connection state to the status ConfigMap (a merge patch of its own key: other
    /// clusters' keys stay as they are).
    async fn record(&self, dest: &Destination) {
        let maps: Api<ConfigMap> = Api::namespaced(self.hub.clone(), &self.namespace);
        let data = json!({key_for(&dest.name): dest.state().to_json()});
        let patched = maps
            .patch(
                STATUS_CONFIGMAP,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": data})),
            )
            .await;
        let result = match patched {
            Err(kube::Error::Api(s)) if s.code == 404 => {
                let map: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": STATUS_CONFIGMAP, "namespace": self.namespace},
                    "data": data,
                }))
                .unwrap_or_default();
                match maps.create(&Default::default(), &map).await {
                    // Created meanwhile by another probe: patch it after all.
                    Err(kube::Error::Api(s)) if s.code == 409 => maps
                        .patch(
                            STATUS_CONFIGMAP,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"data": data})),
                        )
                        .await
                        .map(|_| ()),
                    other => other.map(|_| ()),
                }
            }
            other => other.map(|_| ()),
        };
        if let Err(e) = result {
            tracing::debug!(err = %describe_kube_error(&e), "recording cluster state");
        }
    }
}

fn failed(dest: &Destination, message: String, checked_at: String) -> ConnectionState {
    ConnectionState {
        status: ConnectionStatus::Failed,
        message,
        server_version: dest.state().server_version,
        checked_at,
    }
}

/// Whether two versions of a cluster Secret connect the same way (labels and annotations are the
/// ApplicationSet controller's business; changing them keeps the client, caches and watches).
fn same_connection(a: &ClusterSecret, b: &ClusterSecret) -> bool {
    a.name == b.name
        && a.server == b.server
        && a.config == b.config
        && a.namespaces == b.namespaces
        && a.cluster_resources == b.cluster_resources
}

fn user_key(d: &ApplicationDestination) -> String {
    let server = d.server.trim().trim_end_matches('/');
    if server.is_empty() {
        format!(
            "name:{}",
            if d.name.is_empty() {
                IN_CLUSTER_NAME
            } else {
                d.name.trim()
            }
        )
    } else {
        format!("server:{server}")
    }
}

fn secret_name(s: &Secret) -> String {
    s.metadata.name.clone().unwrap_or_default()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|p| p.into_inner())
}
