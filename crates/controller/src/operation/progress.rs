//! While an operation runs: its progress written to the Application (coalesced, cheap merge
//! patches), and the terminate request that stops it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_api::status::ResultCode;
use capstan_kube::describe_kube_error;
use capstan_sync::{Progress, Recorded};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::sync::watch;

/// How long the last write of the Application took (shared by the record and the progress writes).
#[derive(Default)]
pub struct WriteCost(AtomicU64);

impl WriteCost {
    /// The last write took `cost`.
    pub fn set(&self, cost: Duration) {
        self.0.store(cost.as_micros() as u64, Ordering::Relaxed);
    }

    /// How long the last write took.
    pub fn get(&self) -> Duration {
        Duration::from_micros(self.0.load(Ordering::Relaxed))
    }
}

/// Write the progress `rx` reports to the Application `name` (through `apps`) until the sync ends,
/// once the operation has been recorded as running (`recorded`).
///
/// Progress is a small merge patch: the message, and the hook results a resumed operation needs.
/// The full status is written once at the end (rewriting thousands of resources every half second
/// would cost more than the sync). A completed hook is written at once: until it is, a restart would
/// run it again.
pub async fn report(
    apps: Api<Application>,
    name: &str,
    mut recorded: Recorded,
    mut rx: watch::Receiver<Progress>,
    write_cost: &WriteCost,
) {
    if recorded.wait().await.is_err() {
        return;
    }
    let mut hooks_written = 0;
    while rx.changed().await.is_ok() {
        // Coalesce updates, but stop as soon as the sync ends: its final status write follows, and
        // waiting here would only delay it.
        let ended = hooks_done(&rx.borrow()) <= hooks_written && {
            let written = hooks_written;
            let coalesce = async {
                while rx.changed().await.is_ok() {
                    if hooks_done(&rx.borrow()) > written {
                        return false;
                    }
                }
                true
            };
            tokio::time::timeout(progress_interval(write_cost.get()), coalesce)
                .await
                .unwrap_or(false)
        };
        if ended {
            break;
        }
        let p = rx.borrow_and_update().clone();
        hooks_written = hooks_done(&p);
        let hooks: Vec<_> = p.results.into_iter().filter(|r| r.hook).collect();
        let mut patch = json!({"status": {"operationState": {"message": p.message, "resources": hooks}}});
        capstan_redact::scrub_json(&mut patch);
        let written = Instant::now();
        if let Err(err) = apps
            .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            tracing::debug!(err = %describe_kube_error(&err), "progress update");
        }
        write_cost.set(written.elapsed());
    }
}

/// Hooks a running operation has completed so far.
fn hooks_done(p: &Progress) -> usize {
    p.results
        .iter()
        .filter(|r| r.hook && r.status == ResultCode::Synced)
        .count()
}

/// How long progress updates of a running operation are coalesced, given how long the last write
/// of the Application took: every 500 ms for an ordinary Application, but the API server's work for
/// each write grows with the Application's size, and on a large one it would compete with the
/// sync's own requests; so at most about an eighth of the time goes to progress writes.
fn progress_interval(write_cost: Duration) -> Duration {
    (write_cost * 8).max(Duration::from_millis(500))
}

/// Resolves with who asked once the Application carries the terminate annotation (seen by the
/// controller's Application watch, see [`Ctx::observe`](crate::context::Ctx::observe), or `asked`:
/// there when the operation started).
pub async fn terminate_requested(asked: Option<String>, mut rx: watch::Receiver<Option<String>>) -> String {
    if let Some(who) = asked {
        return if who.is_empty() { "a user".into() } else { who };
    }
    let asked = rx
        .wait_for(Option::is_some)
        .await
        .map(|who| who.clone().unwrap_or_default());
    match asked {
        Ok(who) => who,
        // The sender is only dropped when the operation ends: never terminate then.
        Err(_) => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::application::ResourceResult;

    #[test]
    fn progress_writes_take_a_small_share_of_the_time() {
        assert_eq!(progress_interval(Duration::from_millis(10)), Duration::from_millis(500));
        assert_eq!(
            progress_interval(Duration::from_millis(300)),
            Duration::from_millis(2400)
        );
        let cost = WriteCost::default();
        cost.set(Duration::from_millis(42));
        assert_eq!(cost.get(), Duration::from_millis(42));
    }

    #[test]
    fn completed_hooks_are_counted() {
        let result = |status: ResultCode, hook: bool| ResourceResult {
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
            namespace: "n".into(),
            name: "p".into(),
            status,
            message: String::new(),
            sync_phase: "PreSync".into(),
            sync_wave: 0,
            hook,
        };
        let p = Progress {
            message: String::new(),
            results: vec![
                result(ResultCode::Synced, true),
                result(ResultCode::SyncFailed, true),
                result(ResultCode::Synced, false),
            ],
        };
        assert_eq!(hooks_done(&p), 1);
    }

    #[tokio::test]
    async fn a_terminate_request_names_who_asked() {
        let (_tx, rx) = watch::channel(None);
        assert_eq!(terminate_requested(Some(String::new()), rx.clone()).await, "a user");
        assert_eq!(terminate_requested(Some("admin".into()), rx).await, "admin");
        let (tx, rx) = watch::channel(None);
        tx.send_replace(Some("ops".to_string()));
        assert_eq!(terminate_requested(None, rx).await, "ops");
        // The operation ended (its sender dropped): never resolves.
        let (tx, rx) = watch::channel(None::<String>);
        drop(tx);
        let never = tokio::time::timeout(Duration::from_millis(20), terminate_requested(None, rx)).await;
        assert!(never.is_err());
    }
}
