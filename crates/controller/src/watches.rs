//! Watches on every kind Capstan manages, filtered by the tracking label, so memory grows with the
//! objects Capstan manages and not with the cluster. They do two things:
//!
//! - keep a cache of those objects (of their `managedFields` only Capstan's own `Apply` entry), from
//!   which comparisons read the live state instead of listing it from the API server on every
//!   reconcile (see [`Watches::cached`]);
//! - trigger a reconcile of the Application named in a changed object's tracking annotation, at once
//!   for the first change and at most once per [`THROTTLE`] after it: a rollout's burst of status
//!   updates (a Deployment reports progress several times a second) becomes two comparisons instead
//!   of one each, while a single drift is still noticed immediately.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_api::labels::TRACKING_LABEL;
use capstan_compare::KindInfo;

use crate::clusters::Trigger;
use capstan_compare::normalize::TRACKING_ANNOTATION;
use capstan_compare::owned::keep_own_apply_entry;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

/// Shortest time between two reconciles of one Application caused by changes to its objects.
pub const THROTTLE: Duration = Duration::from_millis(250);

/// The set of watched kinds and where their events go.
pub struct Watches {
    client: kube::Client,
    kinds: Mutex<HashMap<(String, String), Cache>>,
    trigger: Trigger,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    throttle: Arc<Throttle>,
}

/// The managed objects of one kind, as the watch last saw them.
#[derive(Clone)]
struct Cache {
    store: Store<DynamicObject>,
    /// Listed completely and not failing since: only then may comparisons read from it.
    ready: Arc<AtomicBool>,
}

/// Per Application: when its last object-change reconcile was sent, and whether one is scheduled.
#[derive(Default)]
struct Throttle {
    apps: Mutex<HashMap<ObjectRef<capstan_api::Application>, (Instant, bool)>>,
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
    fn sent(&self, app: &ObjectRef<capstan_api::Application>, now: Instant) {
        lock(&self.apps).insert(app.clone(), (now, false));
    }
}

impl Watches {
    /// Watches sending triggers to `trigger`.
    pub fn new(client: kube::Client, trigger: Trigger) -> Self {
        Self {
            client,
            kinds: Mutex::new(HashMap::new()),
            trigger,
            tasks: Mutex::new(Vec::new()),
            throttle: Arc::default(),
        }
    }

    /// The cached managed objects of `info`'s kind, when its watch has listed them and is healthy.
    pub fn cached(&self, info: &KindInfo) -> Option<Store<DynamicObject>> {
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
        let writer = reflector::store::Writer::<DynamicObject>::new(info.resource.clone());
        let ready = Arc::new(AtomicBool::new(false));
        {
            let mut kinds = lock(&self.kinds);
            if kinds.contains_key(&key) {
                return;
            }
            kinds.insert(
                key,
                Cache {
                    store: writer.as_reader(),
                    ready: ready.clone(),
                },
            );
        }
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &info.resource);
        let kind = info.resource.kind.clone();
        let throttle = self.throttle.clone();
        let task = tokio::spawn(async move {
            tracing::debug!(%kind, "watching managed objects");
            let stream = watcher(api, watcher::Config::default().labels(TRACKING_LABEL))
                .default_backoff()
                // Only the comparison's view of the objects is kept: of their field ownership
                // (often the largest part of them) only what Capstan's own last apply set, which
                // shows the fields Git has stopped setting.
                .modify(|o| keep_own_apply_entry(&mut o.metadata));
            // The store is updated before the event comes out, so the reconcile it triggers reads
            // the change from the cache.
            let stream = reflector::reflector(writer, stream);
            let mut stream = std::pin::pin!(stream);
            let mut listed = false;
            while let Some(event) = stream.next().await {
                let objs = match event {
                    Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::Delete(o)) => {
                        // A watch resumed after an error (from its last resourceVersion) missed
                        // nothing: its first event shows it is healthy again.
                        if listed {
                            ready.store(true, Ordering::SeqCst);
                        }
                        vec![o]
                    }
                    Ok(watcher::Event::InitDone) => {
                        listed = true;
                        ready.store(true, Ordering::SeqCst);
                        continue;
                    }
                    Ok(_) => continue,
                    Err(err) => {
                        // Until the next complete list, comparisons list from the API server.
                        ready.store(false, Ordering::SeqCst);
                        tracing::debug!(%kind, %err, "watch error");
                        continue;
                    }
                };
                for obj in objs {
                    let owner = obj
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(TRACKING_ANNOTATION));
                    let Some((ns, name)) = owner.and_then(|o| o.split_once('/')) else {
                        continue;
                    };
                    tracing::trace!(%kind, app = %name, "managed object changed");
                    let app = ObjectRef::new(name).within(ns);
                    match throttle.decide(&app, Instant::now()) {
                        Some(Duration::ZERO) => {
                            let _ = trigger.unbounded_send(app);
                        }
                        Some(delay) => {
                            let (throttle, trigger) = (throttle.clone(), trigger.clone());
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
}
