//! The controller's shared state ([`Ctx`]): clients, the pipeline, pollers and settings; per
//! Application, the versions this controller wrote and watched (whether its watch cache is fresh), and
//! the terminate signals of running operations; and the Kubernetes Events it publishes.

use std::sync::Arc;

use capstan_api::Application;
use capstan_api::operation::TERMINATE_ANNOTATION;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};

use crate::config::Config;
use crate::pipeline::Pipeline;
use crate::poller::Pollers;

/// Shared state of the controller.
pub struct Ctx {
    /// Client of the cluster Capstan runs in.
    pub client: Client,
    /// The pipeline.
    pub pipeline: Arc<Pipeline>,
    /// Git pollers, one per repository.
    pub pollers: Pollers,
    /// Settings.
    pub config: Config,
    /// Who publishes Kubernetes Events.
    reporter: Reporter,
    /// Per Application, the resourceVersion of this controller's last status write and of the
    /// last version its watch delivered (see [`Ctx::cache_is_fresh`]).
    written: std::sync::Mutex<std::collections::HashMap<String, Versions>>,
    /// The watched Applications of the namespace (dependencies are read from here).
    apps: std::sync::OnceLock<kube::runtime::reflector::Store<Application>>,
    /// Running operations' terminate signals, fed by the Application watch.
    terminations: std::sync::Mutex<std::collections::HashMap<String, tokio::sync::watch::Sender<Option<String>>>>,
    /// How long each Application has been Degraded, for `spec.syncPolicy.autoRevert`.
    pub auto_reverts: crate::clock::Stopwatches,
}

impl Ctx {
    /// A new context.
    pub fn new(client: Client, pipeline: Arc<Pipeline>, pollers: Pollers, config: Config) -> Self {
        let reporter = Reporter {
            controller: "capstan-controller".into(),
            instance: std::env::var("HOSTNAME").ok(),
        };
        Self {
            reporter,
            client,
            pipeline,
            pollers,
            config,
            written: Default::default(),
            apps: Default::default(),
            terminations: Default::default(),
            auto_reverts: Default::default(),
        }
    }

    /// Read Applications from the controller's watch cache `store` from now on.
    pub fn use_apps(&self, store: kube::runtime::reflector::Store<Application>) {
        let _ = self.apps.set(store);
    }

    /// The Application `name` of `namespace` as the watch cache holds it (read from the API server
    /// when there is no cache).
    pub async fn app_named(&self, namespace: &str, name: &str) -> Option<Application> {
        if let Some(store) = self.apps.get() {
            return store
                .get(&kube::runtime::reflector::ObjectRef::new(name).within(namespace))
                .map(|a| (*a).clone());
        }
        let api: kube::Api<Application> = kube::Api::namespaced(self.client.clone(), namespace);
        api.get_opt(name).await.ok().flatten()
    }

    /// Every Application the watch cache holds.
    pub fn cached_apps(&self) -> Vec<Arc<Application>> {
        self.apps.get().map(|s| s.state()).unwrap_or_default()
    }

    /// Whether `cached`, the watch cache's copy of `key` handed to a reconcile, is as fresh as a
    /// read (see [`Versions::fresh`]).
    pub fn cache_is_fresh(&self, key: &str, cached: &Application) -> bool {
        let rv = cached.resource_version().unwrap_or_default();
        lock(&self.written).get(key).is_some_and(|v| v.fresh(&rv))
    }

    /// This controller wrote `app`: the version its watch must deliver before its cache is fresh.
    pub fn record_written(&self, app: &Application) {
        let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
        tracing::trace!(app = %key, rv = app.resource_version().unwrap_or_default(), "wrote");
        let mut written = lock(&self.written);
        match app.resource_version() {
            Some(rv) => written.entry(key).or_default().wrote(rv),
            None => {
                written.remove(&key);
            }
        }
    }

    /// The watch delivered `app`, and the cache holds it (not so for the events of a re-list, which
    /// the cache takes in only when the list is complete).
    pub fn record_observed(&self, app: &Application) {
        let Some(rv) = app.resource_version() else { return };
        let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
        tracing::trace!(app = %key, %rv, "observed");
        lock(&self.written).entry(key).or_default().observed(rv);
    }

    /// Forget what is kept per Application (it was deleted).
    pub fn forget(&self, key: &str) {
        lock(&self.written).remove(key);
    }

    /// A receiver that turns `Some(who)` when a terminate of `key`'s running operation is asked.
    pub fn watch_terminate(&self, key: &str) -> tokio::sync::watch::Receiver<Option<String>> {
        let (tx, rx) = tokio::sync::watch::channel(None);
        lock(&self.terminations).insert(key.to_string(), tx);
        rx
    }

    /// The operation of `key` ended: no terminate signal for it any more.
    pub fn unwatch_terminate(&self, key: &str) {
        lock(&self.terminations).remove(key);
    }

    /// Called for every Application the watch sees: signal a running operation's terminate request.
    pub fn observe(&self, app: &Application) {
        let Some(who) = app.annotations().get(TERMINATE_ANNOTATION) else {
            return;
        };
        let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
        if let Some(tx) = lock(&self.terminations).get(&key) {
            tx.send_replace(Some(if who.is_empty() { "a user".into() } else { who.clone() }));
        }
    }

    /// Who publishes this controller's Kubernetes Events.
    pub fn reporter(&self) -> Reporter {
        self.reporter.clone()
    }

    /// Publish a Kubernetes Event about `app` (best effort). The returned future owns what it needs,
    /// so it can run beside a write of `app`.
    pub fn event(
        &self,
        app: &Application,
        type_: EventType,
        reason: &str,
        note: String,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(capstan_redact::scrub(&note)),
            action: "Sync".into(),
            secondary: None,
        };
        // A recorder per event: one shared recorder folds every later event of the same type and
        // reason about an Application into a series of the first one, keeping the first one's
        // message (a second failure would still name the first failed object).
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        let reference = app.object_ref(&());
        async move {
            if let Err(err) = recorder.publish(&event, &reference).await {
                tracing::debug!(%err, "publishing an event");
            }
        }
    }
}

/// Resource versions of one Application, as this controller wrote and watched them.
#[derive(Default)]
struct Versions {
    /// Of this controller's last status write.
    written: String,
    /// Of the last version the watch delivered.
    observed: String,
    /// Whether the watch has delivered `written`.
    written_seen: bool,
}

impl Versions {
    /// This controller wrote version `rv`.
    fn wrote(&mut self, rv: String) {
        // The watch may deliver the write before its response arrives.
        self.written_seen = self.observed == rv;
        self.written = rv;
    }

    /// Whether the copy at version `rv` is as fresh as a read: the watch has delivered this
    /// controller's last status write (so a reconcile queued during a sync cannot act on the state
    /// from before that sync's final write), and `rv` is the last version it delivered. The copy a
    /// reconcile gets is taken from the cache when the reconcile is dispatched, which may be just
    /// before the watch delivers the write that the previous reconcile made.
    fn fresh(&self, rv: &str) -> bool {
        self.written_seen && !rv.is_empty() && self.observed == rv
    }

    /// The watch delivered version `rv`.
    fn observed(&mut self, rv: String) {
        if self.written == rv {
            self.written_seen = true;
        }
        self.observed = rv;
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_fresh_once_the_watch_delivered_the_last_write() {
        let mut v = Versions::default();
        assert!(!v.fresh(""), "nothing written, nothing seen: read");
        v.wrote("10".into());
        assert!(!v.fresh("10"), "written, not delivered yet");
        v.observed("9".into());
        assert!(!v.fresh("9"), "an older version delivered late");
        v.observed("10".into());
        assert!(v.fresh("10"));
        assert!(!v.fresh("9"), "a copy taken before the write was delivered");
        v.observed("11".into());
        assert!(v.fresh("11"), "someone else's later change keeps the cache fresh");
        assert!(!v.fresh("10"), "a copy taken before that change was delivered");
        v.wrote("12".into());
        assert!(!v.fresh("11"), "a new write is not delivered yet");
        // The watch delivering a write before the response to it arrives.
        v.observed("13".into());
        v.wrote("13".into());
        assert!(v.fresh("13"));
    }
}
