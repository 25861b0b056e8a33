//! Notifications, driven by the Application watch: every version of an Application this replica
//! owns is compared with what its channels were last told (`capstan-notify`'s record on the
//! Application), the record is written first (with the Application's resourceVersion as a
//! precondition, so two replicas or a restart never send one change twice), then the events go to
//! the channel's worker ([`worker`]), which batches bursts and delivers off the reconcile path: a
//! slow or broken destination delays only its own channel, never a sync.
//!
//! Channels are watched in Capstan's namespace; without the CRD (an install not upgraded yet)
//! there are none.
//!
//! `PromotionMade` is read from the PromotionPipelines of Capstan's namespace (their
//! `status.history`, where every promotion is recorded): a promotion is a fact of its target
//! Application, recorded on it like the others. The pipelines are watched: a new history entry has
//! its target Application looked at. No Application is looked at before the pipelines are first
//! listed (unless their CRD is not installed), so that a channel met for the first time records the
//! promotions made before it instead of sending one.

mod worker;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use capstan_api::notification::{NOTIFIED_ANNOTATION, NotificationChannel};
use capstan_api::{Application, PromotionPipeline};
use capstan_notify::record::{self, ChannelRecord};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

/// Application versions waiting to be looked at; beyond, a version is skipped (a later one follows
/// with every change, and the record makes the comparison whole again).
const QUEUE: usize = 4096;

/// The notifier of one controller replica.
pub struct Notifications {
    client: Client,
    namespace: String,
    ownership: Option<capstan_replicas::Ownership>,
    channels: OnceLock<reflector::Store<NotificationChannel>>,
    pipelines: OnceLock<reflector::Store<PromotionPipeline>>,
    queue: OnceLock<mpsc::Sender<Arc<Application>>>,
    workers: Mutex<HashMap<String, mpsc::Sender<capstan_notify::Event>>>,
    settings: worker::Settings,
}

impl Notifications {
    /// A notifier for the Applications of `namespace` (not started: see [`Notifications::spawn`]).
    pub fn new(client: Client, namespace: &str, ownership: Option<capstan_replicas::Ownership>) -> Arc<Self> {
        Arc::new(Notifications {
            client,
            namespace: namespace.to_string(),
            ownership,
            channels: OnceLock::new(),
            pipelines: OnceLock::new(),
            queue: OnceLock::new(),
            workers: Mutex::default(),
            settings: worker::Settings::default(),
        })
    }

    /// Start watching channels and looking at Application versions. Every Application of `apps`
    /// is looked at again when the channels are first listed and whenever one changes (a new
    /// channel records where each Application stands at once).
    pub fn spawn(self: &Arc<Self>, apps: reflector::Store<Application>) {
        let (reader, writer) = reflector::store();
        if self.channels.set(reader).is_err() {
            return;
        }
        let sweep = Arc::new(tokio::sync::Notify::new());
        let api: Api<NotificationChannel> = Api::namespaced(self.client.clone(), &self.namespace);
        let changed = sweep.clone();
        tokio::spawn(async move {
            let stream = reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
            let mut stream = std::pin::pin!(stream);
            // A channel's status writes (each delivery) are not changes of what it selects: only
            // a new generation of its spec, its creation or its deletion sweeps the Applications.
            let mut generations: HashMap<String, Option<i64>> = HashMap::new();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => changed.notify_one(),
                    Ok(watcher::Event::Apply(c)) => {
                        if generations.insert(c.name_any(), c.metadata.generation) != Some(c.metadata.generation) {
                            changed.notify_one();
                        }
                    }
                    Ok(watcher::Event::InitApply(c)) => {
                        generations.insert(c.name_any(), c.metadata.generation);
                    }
                    Ok(watcher::Event::Delete(c)) => {
                        generations.remove(&c.name_any());
                        changed.notify_one();
                    }
                    Ok(_) => {}
                    Err(err) => tracing::debug!(%err, "NotificationChannel watch error"),
                }
            }
        });
        let (promoted_tx, mut promoted) = mpsc::channel::<String>(QUEUE);
        let pipelines_ready = self.watch_pipelines(promoted_tx, sweep.clone());
        let (tx, mut rx) = mpsc::channel::<Arc<Application>>(QUEUE);
        let _ = self.queue.set(tx);
        let this = self.clone();
        let namespace = self.namespace.clone();
        tokio::spawn(async move {
            // The promotions made so far are known before anything is recorded (see the module).
            pipelines_ready.await;
            loop {
                tokio::select! {
                    app = rx.recv() => match app {
                        Some(app) => this.look(&app).await,
                        None => return,
                    },
                    Some(name) = promoted.recv() => {
                        let key = reflector::ObjectRef::<Application>::new(&name).within(&namespace);
                        if let Some(app) = apps.get(&key) {
                            this.look(&app).await;
                        }
                    },
                    () = sweep.notified() => {
                        for app in apps.state() {
                            this.look(&app).await;
                        }
                    }
                }
            }
        });
    }

    /// Watch the PromotionPipelines of Capstan's namespace: the name of the target Application of
    /// each promotion added to a history goes to `promoted`; the first listing sweeps every
    /// Application (promotions made while no controller ran). Returns a future that ends once the
    /// pipelines are listed, or at once when their CRD is not installed.
    fn watch_pipelines(
        &self,
        promoted: mpsc::Sender<String>,
        sweep: Arc<tokio::sync::Notify>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (reader, writer) = reflector::store();
        let _ = self.pipelines.set(reader.clone());
        let api: Api<PromotionPipeline> = Api::namespaced(self.client.clone(), &self.namespace);
        let probe = api.clone();
        tokio::spawn(async move {
            let stream = reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
            let mut stream = std::pin::pin!(stream);
            // The newest commit of each pipeline's history: entries newer than it are promotions.
            let mut heads: HashMap<String, Vec<String>> = HashMap::new();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitApply(p)) => {
                        heads.insert(p.name_any(), commits(&p));
                    }
                    Ok(watcher::Event::InitDone) => sweep.notify_one(),
                    Ok(watcher::Event::Apply(p)) => {
                        let now = commits(&p);
                        let before = heads.insert(p.name_any(), now.clone()).unwrap_or_default();
                        for record in p.status.iter().flat_map(|s| s.history.iter()) {
                            if before.contains(&record.commit) {
                                continue;
                            }
                            let target = p.spec.application(&record.service, &record.to);
                            if promoted.try_send(target).is_err() {
                                tracing::debug!("promotion queue full: the next sweep looks at it");
                            }
                        }
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        heads.remove(&p.name_any());
                    }
                    Ok(_) => {}
                    Err(err) => tracing::debug!(%err, "PromotionPipeline watch error"),
                }
            }
        });
        async move {
            match probe.list(&kube::api::ListParams::default().limit(1)).await {
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    tracing::info!("no PromotionPipeline CRD: PromotionMade is not sent");
                }
                // Not readable (RBAC, say): the other triggers are not held back for it.
                Err(err) => {
                    tracing::warn!(%err, "PromotionPipelines cannot be listed: PromotionMade is not sent");
                }
                Ok(_) => {
                    let _ = reader.wait_until_ready().await;
                }
            }
        }
    }

    /// A new version of an Application (from the watch), given lazily: nothing is done, not even
    /// the Application shared, while no channel exists. Never waits.
    pub fn observe(&self, app: impl FnOnce() -> Arc<Application>) {
        let Some(queue) = self.queue.get() else { return };
        if self.channels.get().is_none_or(|s| s.is_empty()) {
            return;
        }
        let app = app();
        if queue.try_send(app.clone()).is_err() {
            tracing::debug!(app = %app.name_any(), "notification queue full: this version is skipped");
        }
    }

    /// The channels that concern `app`.
    fn channels_of(&self, app: &Application) -> Vec<Arc<NotificationChannel>> {
        let Some(store) = self.channels.get() else {
            return Vec::new();
        };
        let project = if app.spec.project.is_empty() {
            "default"
        } else {
            &app.spec.project
        };
        store
            .state()
            .into_iter()
            .filter(|c| !c.spec.suspend && !c.spec.triggers.is_empty())
            .filter(|c| c.spec.projects.is_empty() || c.spec.projects.iter().any(|p| p == project))
            .filter(|c| {
                c.spec
                    .selector
                    .as_ref()
                    .is_none_or(|s| capstan_kube::selector::Selector::new(s).is_ok_and(|s| s.matches(app.labels())))
            })
            .collect()
    }

    /// Compare `app` with its record; write the new record, then send what is due.
    async fn look(&self, app: &Application) {
        if app.metadata.deletion_timestamp.is_some() {
            return;
        }
        let channels = self.channels_of(app);
        let previous = record::parse(app.annotations().get(NOTIFIED_ANNOTATION).map(String::as_str));
        if channels.is_empty() && previous.is_empty() {
            return;
        }
        // Only the replica that owns the Application speaks for it.
        let _permit = match &self.ownership {
            Some(o) => match o.enter(&app.namespace().unwrap_or_default(), &app.name_any()) {
                Some(p) => Some(p),
                None => return,
            },
            None => None,
        };
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let mut facts = capstan_notify::facts(app, &now);
        if let Some(pipelines) = self.pipelines.get() {
            facts.extend(capstan_notify::promotion_facts(app, &pipelines.state()));
        }
        let mut next = record::Record::new();
        let mut due: Vec<(String, capstan_notify::Event)> = Vec::new();
        for channel in &channels {
            let name = channel.name_any();
            let triggers: BTreeSet<_> = channel.spec.triggers.iter().copied().collect();
            let (send, rec): (Vec<_>, ChannelRecord) = record::due(previous.get(&name), &triggers, &facts);
            due.extend(send.into_iter().map(|e| (name.clone(), e)));
            next.insert(name, rec);
        }
        if next == previous {
            return;
        }
        // The record first, on this very version: if another writer got there first, the write
        // fails and the next version is looked at instead (nothing is sent twice).
        let api: Api<Application> = Api::namespaced(self.client.clone(), &app.namespace().unwrap_or_default());
        let value = if next.is_empty() {
            serde_json::Value::Null
        } else {
            json!(record::render(&next))
        };
        let patch = json!({"metadata": {
            "resourceVersion": app.resource_version(),
            "annotations": {NOTIFIED_ANNOTATION: value},
        }});
        if let Err(err) = api
            .patch(&app.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(app = %app.name_any(), %err, "recording notifications (a newer version follows)");
            return;
        }
        for (channel, event) in due {
            self.send(&channel, event);
        }
    }

    /// Hand `event` to `channel`'s worker, starting it if needed.
    fn send(&self, channel: &str, event: capstan_notify::Event) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        let tx = workers.entry(channel.to_string()).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(worker::QUEUE);
            let w = worker::Worker {
                client: self.client.clone(),
                namespace: self.namespace.clone(),
                channel: channel.to_string(),
                channels: self.channels.get().cloned(),
                settings: self.settings.clone(),
            };
            tokio::spawn(w.run(rx));
            tx
        });
        if let Err(err) = tx.try_send(event) {
            tracing::warn!(channel, "notification dropped: the channel's queue is full ({err})");
        }
    }
}

/// The commits of a pipeline's history.
fn commits(pipeline: &PromotionPipeline) -> Vec<String> {
    pipeline
        .status
        .iter()
        .flat_map(|s| s.history.iter())
        .map(|r| r.commit.clone())
        .collect()
}

/// How deliveries are batched and retried.
pub use worker::Settings;
