//! Watches on every kind Capstan manages, filtered by the tracking label, so memory grows with the
//! objects Capstan manages and not with the cluster. They do two things:
//!
//! - keep a cache of those objects (of their `managedFields` only Capstan's own `Apply` entry), from
//!   which comparisons read the live state instead of listing it from the API server on every
//!   reconcile (see [`Watches::cached`]);
//! - trigger a reconcile of the Application named in a changed object's tracking annotation, at once
//!   for the first change and at most once per [`THROTTLE`] after it: a rollout's burst of status
//!   updates (a Deployment reports progress several times a second) becomes two comparisons instead
//!   of one each, while a single drift is still noticed immediately. The echoes of Capstan's own
//!   writes (a version its sync wrote, see [`OwnWrites`]) trigger nothing: the sync reports the state
//!   after itself, and an echo would take the place of the next drift's immediate reconcile. While
//!   an Application's operation runs ([`Watches::hold`]) the changes to its objects are held back
//!   (its reconcile could not run before the operation ends anyway); when it ends, every write's
//!   answer is known, so its echoes are told apart exactly and any other change triggers a reconcile.
//!   A change made while a watch was down (or before its first list succeeded, as for a kind whose
//!   CRD the same sync created) arrives only in the re-list that follows: it triggers a reconcile too.
//!   An object deleted while the watch was down is not in that list and triggers nothing: the next
//!   poll of its Application notices it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use capstan_api::labels::TRACKING_LABEL;
use capstan_kube::{KindInfo, ObjectKey, OwnWrites};

use crate::managed_cache::ManagedCache;

use capstan_compare::normalize::TRACKING_ANNOTATION;
use capstan_compare::owned::keep_own_apply_entry;
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};

/// Shortest time between two reconciles of one Application caused by changes to its objects.
pub const THROTTLE: Duration = Duration::from_millis(250);

/// Where reconcile triggers go, once the controller runs (the CLI has none).
pub type Trigger = Arc<OnceLock<UnboundedSender<AppRef>>>;

/// The set of watched kinds and where their events go.
pub struct Watches {
    client: kube::Client,
    kinds: Mutex<HashMap<(String, String), Cache>>,
    trigger: Trigger,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    changes: Arc<Changes>,
}

type AppRef = ObjectRef<capstan_api::Application>;

/// What becomes of the changes the watches see.
struct Changes {
    own_writes: OwnWrites,
    throttle: Throttle,
    /// Applications whose operation is running, with the versions of their objects seen meanwhile.
    held: Mutex<HashMap<AppRef, Vec<(ObjectKey, String)>>>,
}

impl Changes {
    /// A watch saw `key` of `app` change to `version` (`None`: deleted).
    fn seen(&self, app: AppRef, key: ObjectKey, version: Option<String>, trigger: &Sender) {
        if let Some(version) = &version
            && self.own_writes.take(&key, version)
        {
            capstan_metrics::global().managed_object_change(true);
            return;
        }
        if let Some(held) = lock(&self.held).get_mut(&app) {
            // A deletion is held with no version: no write of Capstan's has one.
            held.push((key, version.unwrap_or_default()));
            return;
        }
        capstan_metrics::global().managed_object_change(false);
        self.notify(app, trigger);
    }

    /// The operation of `app` has ended: its held changes that are not its own writes trigger a
    /// reconcile.
    fn release(&self, app: &AppRef, trigger: Option<&Sender>) {
        let Some(held) = lock(&self.held).remove(app) else {
            return;
        };
        let mut others = 0;
        for (key, version) in held {
            let own = self.own_writes.take(&key, &version);
            capstan_metrics::global().managed_object_change(own);
            others += usize::from(!own);
        }
        if let Some(trigger) = trigger.filter(|_| others > 0) {
            self.notify(app.clone(), trigger);
        }
    }

    /// Reconcile `app` now, or once the throttle allows.
    fn notify(&self, app: AppRef, trigger: &Sender) {
        match self.throttle.decide(&app, Instant::now()) {
            Some(Duration::ZERO) => {
                let _ = trigger.unbounded_send(app);
            }
            Some(delay) => {
                let (throttle, trigger) = (self.throttle.clone(), trigger.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    throttle.sent(&app, Instant::now());
                    let _ = trigger.unbounded_send(app);
                });
            }
            None => {}
        }
    }
}

type Sender = futures::channel::mpsc::UnboundedSender<AppRef>;

/// Holds back the changes to an Application's objects while its operation runs (see
/// [`Watches::hold`]); dropping it lets them through.
pub struct Hold {
    changes: Arc<Changes>,
    app: AppRef,
    trigger: Option<Sender>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.changes.release(&self.app, self.trigger.as_ref());
    }
}

/// The managed objects of one kind, as the watch last saw them.
#[derive(Clone)]
struct Cache {
    store: Arc<ManagedCache>,
    /// Listed completely and not failing since: only then may comparisons read from it.
    ready: Arc<AtomicBool>,
}

/// Per Application: when its last object-change reconcile was sent, and whether one is scheduled.
#[derive(Default, Clone)]
struct Throttle {
    apps: Arc<Mutex<HashMap<AppRef, (Instant, bool)>>>,
}

impl Throttle {
    /// What to do about a change to one of `app`'s objects at `now`: send now, send after a delay,
    /// or nothing (a send is already scheduled).
    fn decide(&self, app: &ObjectRef<capstan_api::Application>, now: Instant) -> Option<Duration> {
        let mut apps = lock(&self.apps);
        if apps.len() > 4096 {
            apps.retain(|_, (sent, scheduled)| *scheduled || now.duration_since(*sent) < THROTTLE);
        }
        match apps.get_mut(app) {
            Some((_, true)) => None,
            Some((sent, scheduled)) if now.duration_since(*sent) < THROTTLE => {
                *scheduled = true;
                Some(THROTTLE - now.duration_since(*sent))
            }
            _ => {
                apps.insert(app.clone(), (now, false));
                Some(Duration::ZERO)
            }
        }
    }

    /// A scheduled send went out at `now`.
    fn sent(&self, app: &AppRef, now: Instant) {
        lock(&self.apps).insert(app.clone(), (now, false));
    }
}

impl Watches {
    /// Watches sending triggers to `trigger`, except for the versions in `own_writes`.
    pub fn new(client: kube::Client, trigger: Trigger, own_writes: OwnWrites) -> Self {
        Self {
            client,
            kinds: Mutex::new(HashMap::new()),
            trigger,
            tasks: Mutex::new(Vec::new()),
            changes: Arc::new(Changes {
                own_writes,
                throttle: Throttle::default(),
                held: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Hold back the changes to `app`'s objects until the returned guard is dropped (when its
    /// operation has ended and every version it wrote is recorded).
    pub fn hold(&self, app: AppRef) -> Hold {
        lock(&self.changes.held).entry(app.clone()).or_default();
        Hold {
            changes: self.changes.clone(),
            app,
            trigger: self.trigger.get().cloned(),
        }
    }

    /// The cached managed objects of `info`'s kind, when its watch has listed them and is healthy.
    pub fn cached(&self, info: &KindInfo) -> Option<Arc<ManagedCache>> {
        let key = (info.resource.api_version.clone(), info.resource.kind.clone());
        lock(&self.kinds)
            .get(&key)
            .filter(|c| c.ready.load(Ordering::SeqCst))
            .map(|c| c.store.clone())
    }

    /// Start watching `info`'s kind unless it is watched already.
    pub fn ensure(&self, info: &KindInfo) {
        let Some(trigger) = self.trigger.get().cloned() else {
            // Not running as a controller (e.g. `capstan app diff`): nothing to notify.
            return;
        };
        let key = (info.resource.api_version.clone(), info.resource.kind.clone());
        let cache = Arc::new(ManagedCache::new(kube::core::TypeMeta {
            api_version: info.resource.api_version.clone(),
            kind: info.resource.kind.clone(),
        }));
        let ready = Arc::new(AtomicBool::new(false));
        {
            let mut kinds = lock(&self.kinds);
            if kinds.contains_key(&key) {
                return;
            }
            kinds.insert(
                key,
                Cache {
                    store: cache.clone(),
                    ready: ready.clone(),
                },
            );
        }
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &info.resource);
        let kind = info.resource.kind.clone();
        let group = info.resource.group.clone();
        let changes = self.changes.clone();
        let task = tokio::spawn(async move {
            tracing::debug!(%kind, "watching managed objects");
            let stream = watcher(api, watcher::Config::default().labels(TRACKING_LABEL))
                .default_backoff()
                // Only the comparison's view of the objects is kept: of their field ownership
                // (often the largest part of them) only what Capstan's own last apply set, which
                // shows the fields Git has stopped setting.
                .modify(|o| keep_own_apply_entry(&mut o.metadata));
            let mut stream = std::pin::pin!(stream);
            let mut listed = false;
            // Between an error and the end of the re-list that follows it: changes made while the
            // watch was down arrive only as part of that list.
            let mut recovering = false;
            let mut relisting = false;
            while let Some(event) = stream.next().await {
                // The cache is updated before the change triggers anything, so the reconcile it
                // triggers reads the change from the cache.
                let (obj, deleted) = match event {
                    Ok(watcher::Event::Apply(o)) => {
                        cache.apply(&o);
                        (o, false)
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        cache.delete(&o);
                        (o, true)
                    }
                    Ok(watcher::Event::Init) => {
                        relisting = true;
                        cache.listing();
                        continue;
                    }
                    Ok(watcher::Event::InitApply(o)) => {
                        // The cache keeps its old contents until the list is complete, so it tells
                        // whether this version is news: after an error, a version the cache did not
                        // hold (a status that changed while the watch was down, or before its first
                        // list succeeded) triggers a reconcile like an event would.
                        let old = cache.resource_version(
                            o.metadata.namespace.as_deref().unwrap_or_default(),
                            o.metadata.name.as_deref().unwrap_or_default(),
                        );
                        cache.listed_object(&o);
                        let news = recovering && old != o.metadata.resource_version;
                        if !news {
                            // A version Capstan wrote may come as part of a (re)listing instead of
                            // as an event: it is not waited for any more.
                            if let Some(version) = &o.metadata.resource_version {
                                changes.own_writes.take(&object_key(&group, &kind, &o), version);
                            }
                            continue;
                        }
                        (o, false)
                    }
                    Ok(watcher::Event::InitDone) => {
                        cache.listed();
                        listed = true;
                        relisting = false;
                        recovering = false;
                        ready.store(true, Ordering::SeqCst);
                        continue;
                    }
                    Err(err) => {
                        // Until the next complete list, comparisons list from the API server.
                        ready.store(false, Ordering::SeqCst);
                        recovering = true;
                        tracing::debug!(%kind, %err, "watch error");
                        continue;
                    }
                };
                // A watch resumed after an error (from its last resourceVersion) missed nothing:
                // its first event shows it is healthy again.
                if listed && !relisting {
                    ready.store(true, Ordering::SeqCst);
                }
                let owner = obj
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(TRACKING_ANNOTATION));
                let Some((ns, name)) = owner.and_then(|o| o.split_once('/')) else {
                    continue;
                };
                tracing::trace!(%kind, app = %name, "managed object changed");
                let key = object_key(&group, &kind, &obj);
                let version = if deleted {
                    None
                } else {
                    Some(obj.metadata.resource_version.clone().unwrap_or_default())
                };
                changes.seen(ObjectRef::new(name).within(ns), key, version, &trigger);
            }
        });
        lock(&self.tasks).push(task.abort_handle());
    }
}

impl Drop for Watches {
    /// A removed destination's watches stop with it.
    fn drop(&mut self) {
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
    }
}

/// The key of a watched object of the kind `group`/`kind`.
fn object_key(group: &str, kind: &str, obj: &DynamicObject) -> ObjectKey {
    ObjectKey {
        group: group.to_string(),
        kind: kind.to_string(),
        namespace: obj.metadata.namespace.clone().unwrap_or_default(),
        name: obj.metadata.name.clone().unwrap_or_default(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_change_goes_at_once_and_a_burst_becomes_one_more() {
        let t = Throttle::default();
        let app = ObjectRef::new("web").within("capstan");
        let other = ObjectRef::new("db").within("capstan");
        let start = Instant::now();
        assert_eq!(t.decide(&app, start), Some(Duration::ZERO), "first change: now");
        let later = start + Duration::from_millis(100);
        assert_eq!(
            t.decide(&app, later),
            Some(THROTTLE - Duration::from_millis(100)),
            "scheduled"
        );
        assert_eq!(
            t.decide(&app, later + Duration::from_millis(10)),
            None,
            "already scheduled"
        );
        assert_eq!(t.decide(&other, later), Some(Duration::ZERO), "apps are independent");
        t.sent(&app, start + THROTTLE);
        assert!(
            t.decide(&app, start + THROTTLE + Duration::from_millis(1))
                .is_some_and(|d| d > Duration::ZERO)
        );
        let quiet = start + THROTTLE * 3;
        let t2 = Throttle::default();
        t2.sent(&app, start);
        assert_eq!(
            t2.decide(&app, quiet),
            Some(Duration::ZERO),
            "after a quiet period: now"
        );
    }

    fn changes() -> Changes {
        Changes {
            own_writes: OwnWrites::default(),
            throttle: Throttle::default(),
            held: Mutex::new(HashMap::new()),
        }
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: "n".into(),
            name: name.into(),
        }
    }

    #[tokio::test]
    async fn own_echoes_trigger_nothing_and_changes_by_others_trigger_a_reconcile() {
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let c = changes();
        let app: AppRef = ObjectRef::new("web").within("capstan");
        c.own_writes.record(&key("a"), "5");
        c.seen(app.clone(), key("a"), Some("5".into()), &tx);
        assert!(
            rx.try_recv().is_err(),
            "the echo of a write of Capstan's triggers nothing"
        );
        c.seen(app.clone(), key("a"), Some("6".into()), &tx);
        assert_eq!(rx.try_recv().ok(), Some(app.clone()), "another version: at once");
        let other: AppRef = ObjectRef::new("db").within("capstan");
        c.seen(other.clone(), key("b"), None, &tx);
        assert_eq!(rx.try_recv().ok(), Some(other), "a deletion triggers");
    }

    #[tokio::test]
    async fn changes_during_an_operation_are_decided_when_it_ends() {
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let c = Arc::new(changes());
        let app: AppRef = ObjectRef::new("web").within("capstan");
        let hold = |c: &Arc<Changes>| {
            lock(&c.held).entry(app.clone()).or_default();
            Hold {
                changes: c.clone(),
                app: app.clone(),
                trigger: Some(tx.clone()),
            }
        };
        // The echo arrives before the write's answer is recorded: held, then known as Capstan's.
        let during = hold(&c);
        c.seen(app.clone(), key("a"), Some("7".into()), &tx);
        assert!(rx.try_recv().is_err(), "held while the operation runs");
        c.own_writes.record(&key("a"), "7");
        drop(during);
        assert!(
            rx.try_recv().is_err(),
            "its own write: nothing to do after the operation"
        );
        assert!(c.own_writes.is_empty());
        // Someone else changed an object during the operation: a reconcile when it ends.
        let during = hold(&c);
        c.seen(app.clone(), key("b"), Some("8".into()), &tx);
        assert!(rx.try_recv().is_err());
        drop(during);
        assert_eq!(rx.try_recv().ok(), Some(app.clone()), "noticed when the operation ends");
        // After the operation, changes go through again, throttled after that reconcile.
        c.seen(app.clone(), key("b"), Some("9".into()), &tx);
        assert!(rx.try_recv().is_err(), "within the throttle after the last reconcile");
        tokio::time::sleep(THROTTLE + Duration::from_millis(50)).await;
        assert_eq!(rx.try_recv().ok(), Some(app), "sent once the throttle allows");
    }
}
