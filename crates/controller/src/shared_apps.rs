//! The controller's Application watch shared with an HTTP server in the same process (`capstan
//! controller --listen`): one cache of the namespace's Applications and one feed of their changes,
//! instead of a second watch and a second copy of every Application (about 5 KB of heap each,
//! measured with heaptrack at 1,000 Applications).
//!
//! The controller fills the cache (its reflector) and sends each change to the feed once the cache
//! holds it; the server reads the cache and follows the feed, as it does its own watch when it runs
//! alone (`capstan server`).

use std::sync::{Arc, Mutex};

use capstan_api::Application;
use kube::runtime::reflector::{self, Store, store::Writer};
use tokio::sync::broadcast;

/// A change to an Application, as the server's live updates see it.
#[derive(Debug, Clone)]
pub enum AppEvent {
    /// Created or changed.
    Applied(Arc<Application>),
    /// Deleted (its name).
    Deleted(String),
}

/// Changes kept for a feed's slowest reader before it misses some (and lists again).
pub const FEED_CAPACITY: usize = 4096;

/// One cache of Applications and the feed of their changes (see the module's documentation).
pub struct SharedApps {
    store: Store<Application>,
    writer: Mutex<Option<Writer<Application>>>,
    events: broadcast::Sender<AppEvent>,
    /// Turns true when the controller's watch has listed once. (`Store::wait_until_ready` is not
    /// used: kube-runtime keeps one waker for all its waiters, and the controller's own wait takes
    /// it, so a second waiter was never woken.)
    listed: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for SharedApps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedApps")
            .field("applications", &self.store.len())
            .finish()
    }
}

impl SharedApps {
    /// An empty cache, to be filled by the controller it is given to ([`crate::Config::shared_apps`]).
    pub fn new() -> Arc<Self> {
        let (store, writer) = reflector::store();
        let (events, _) = broadcast::channel(FEED_CAPACITY);
        Arc::new(Self {
            store,
            writer: Mutex::new(Some(writer)),
            events,
            listed: tokio::sync::watch::Sender::new(false),
        })
    }

    /// The cache (complete once [`SharedApps::wait_listed`] returns).
    pub fn store(&self) -> Store<Application> {
        self.store.clone()
    }

    /// Wait until the controller's watch has listed once (the cache holds every Application).
    pub async fn wait_listed(&self) {
        let _ = self.listed.subscribe().wait_for(|listed| *listed).await;
    }

    /// The controller's watch has listed once.
    pub(crate) fn mark_listed(&self) {
        self.listed.send_replace(true);
    }

    /// The feed of changes.
    pub fn events(&self) -> broadcast::Sender<AppEvent> {
        self.events.clone()
    }

    /// The cache's writer, for the one controller that fills it (`None` once taken).
    pub(crate) fn take_writer(&self) -> Option<(Store<Application>, Writer<Application>)> {
        let writer = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        Some((self.store.clone(), writer))
    }

    /// Send `event` to the feed's readers, if any (none is not an error).
    pub(crate) fn send(&self, event: impl FnOnce() -> AppEvent) {
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(event());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_for_the_first_list_are_all_woken() {
        let shared = SharedApps::new();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let shared = shared.clone();
                tokio::spawn(async move { shared.wait_listed().await })
            })
            .collect();
        tokio::task::yield_now().await;
        shared.mark_listed();
        for waiter in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                .await
                .expect("woken")
                .expect("ran");
        }
        // And one that comes later returns at once.
        tokio::time::timeout(std::time::Duration::from_secs(5), shared.wait_listed())
            .await
            .expect("listed already");
    }

    #[test]
    fn the_writer_is_taken_once_and_changes_reach_readers_only() {
        let shared = SharedApps::new();
        assert!(shared.take_writer().is_some());
        assert!(shared.take_writer().is_none(), "one controller fills the cache");
        let mut called = false;
        shared.send(|| {
            called = true;
            AppEvent::Deleted("a".into())
        });
        assert!(!called, "no reader: the event is not even made");
        let mut rx = shared.events().subscribe();
        shared.send(|| AppEvent::Deleted("b".into()));
        assert!(matches!(rx.try_recv(), Ok(AppEvent::Deleted(name)) if name == "b"));
    }
}
