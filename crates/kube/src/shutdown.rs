//! Stopping a kube-runtime controller at any moment, including before its first list.
//!
//! A `Controller` run with `graceful_shutdown_on` stops taking requests when the shutdown resolves,
//! lets the reconciles in flight finish, and ends. But it holds every reconcile until its store has
//! listed once, and the watch that lists the store is the request stream it stops polling: a
//! shutdown before that first list (a SIGTERM during start-up) left it waiting for a list that
//! could no longer come, and the process ran on until killed. [`drive`] ends it at once in that
//! case — no reconcile has started — and otherwise waits for the graceful end; [`before`] makes the
//! awaits of a controller's start-up (its first API calls) give way to a shutdown.

use std::future::Future;
use std::hash::Hash;

use futures::FutureExt;
use kube::runtime::reflector::{Lookup, Store};

/// Drive `controller` — the run of a kube-runtime `Controller` built with
/// `graceful_shutdown_on(shutdown)`, consumed to its end — until it ends; once `shutdown` resolves
/// before `store` has first listed, end at once instead (nothing was reconciled yet, and the list
/// the controller waits for would never come). `shutdown` must resolve when the controller's does:
/// the same (shared) future.
///
/// Returns whether the controller ran to its own end (`false`: stopped before its first list).
pub async fn drive<K>(
    controller: impl Future<Output = ()>,
    store: &Store<K>,
    shutdown: impl Future<Output = ()>,
) -> bool
where
    K: Lookup + Clone + 'static,
    <K as Lookup>::DynamicType: Eq + Hash + Clone,
{
    let unlisted = async {
        shutdown.await;
        // Once shutdown has resolved, the controller polls its watch no more: the store stays as it
        // is now. Listed: the controller ends by itself once its reconciles are done.
        if store.wait_until_ready().now_or_never().is_none() {
            return;
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        () = controller => true,
        () = unlisted => false,
    }
}

/// `work`, unless `shutdown` resolves first (`None`): for the awaits of a controller's start-up.
pub async fn before<T>(shutdown: impl Future<Output = ()>, work: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        () = shutdown => None,
        out = work => Some(out),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use capstan_api::Application;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;

    #[tokio::test]
    async fn a_shutdown_before_the_first_list_ends_at_once() {
        let (store, _writer) = reflector::store::<Application>();
        // A controller that never ends by itself, as kube-runtime's before its store lists.
        let ran = tokio::time::timeout(
            Duration::from_secs(5),
            drive(std::future::pending::<()>(), &store, async {}),
        )
        .await;
        assert_eq!(ran.ok(), Some(false));
    }

    #[tokio::test]
    async fn a_listed_controller_is_left_to_end_by_itself() {
        let (store, mut writer) = reflector::store::<Application>();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let controller = async {
            let _ = done_rx.await;
        };
        let drove = drive(controller, &store, async {});
        tokio::pin!(drove);
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut drove)
                .await
                .is_err(),
            "waits for the in-flight reconciles"
        );
        let _ = done_tx.send(());
        assert!(drove.await);
    }

    #[tokio::test]
    async fn start_up_gives_way_to_a_shutdown() {
        assert_eq!(before(async {}, std::future::pending::<()>()).await, None);
        assert_eq!(before(std::future::pending::<()>(), async { 7 }).await, Some(7));
    }
}
