//! Metadata-only watches on every kind Capstan manages, filtered by the tracking label, so memory
//! grows with the objects Capstan manages and not with the cluster. A change to a managed object
//! triggers a reconcile of the Application named in its tracking annotation.

use std::collections::HashSet;
use std::sync::Mutex;

use capstan_api::labels::TRACKING_LABEL;
use capstan_compare::KindInfo;

use crate::clusters::Trigger;
use capstan_compare::normalize::TRACKING_ANNOTATION;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};

/// The set of watched kinds and where their events go.
pub struct Watches {
    client: kube::Client,
    kinds: Mutex<HashSet<(String, String)>>,
    trigger: Trigger,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Watches {
    /// Watches sending triggers to `trigger`.
    pub fn new(client: kube::Client, trigger: Trigger) -> Self {
        Self {
            client,
            kinds: Mutex::new(HashSet::new()),
            trigger,
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// Start watching `info`'s kind unless it is watched already.
    pub fn ensure(&self, info: &KindInfo) {
        let Some(trigger) = self.trigger.get().cloned() else {
            // Not running as a controller (e.g. `capstan app diff`): nothing to notify.
            return;
        };
        let key = (info.resource.api_version.clone(), info.resource.kind.clone());
        {
            let mut kinds = lock(&self.kinds);
            if !kinds.insert(key) {
                return;
            }
        }
        // Metadata only: memory grows with the number of managed objects, not their size.
        let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(self.client.clone(), &info.resource);
        let kind = info.resource.kind.clone();
        let task = tokio::spawn(async move {
            tracing::debug!(%kind, "watching managed objects");
            let stream = watcher(api, watcher::Config::default().labels(TRACKING_LABEL)).default_backoff();
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let objs = match event {
                    Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::Delete(o)) => vec![o],
                    Ok(_) => continue,
                    Err(err) => {
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
                    if let Some((ns, name)) = owner.and_then(|o| o.split_once('/')) {
                        tracing::trace!(%kind, app = %name, "managed object changed");
                        let _ = trigger.unbounded_send(ObjectRef::new(name).within(ns));
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
