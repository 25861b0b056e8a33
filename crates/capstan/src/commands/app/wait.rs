//! `--wait`: following an Application until its sync and health reach what was asked.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::bail;
use capstan_api::Application;
use capstan_api::application::{ApplicationCondition, ApplicationStatus};
use capstan_api::operation::OperationPhase;
use capstan_api::status::{ConditionType, HealthCode, ResultCode, SyncCode};
use kube::api::Api;

use super::*;

pub(super) struct WaitFor {
    /// Wait for an operation to finish: the one with this request id, or (empty) any running one.
    pub(super) operation: Option<String>,
    pub(super) sync: bool,
    pub(super) health: bool,
    /// Fail once the operation is done if the Application is OutOfSync only because of objects that
    /// require pruning (a sync without prune leaves them, so waiting for Synced would be in vain).
    pub(super) stop_when_only_pruning_left: bool,
}

impl WaitFor {
    /// What `capstan app wait` waits for: Synced and/or Healthy (both when neither flag is given),
    /// and with `operation`, any running operation's end.
    pub(super) fn for_command(health: bool, sync: bool, operation: bool) -> WaitFor {
        let (health, sync) = if !health && !sync { (true, true) } else { (health, sync) };
        WaitFor {
            operation: operation.then(String::new),
            sync,
            health,
            stop_when_only_pruning_left: false,
        }
    }
}

/// A new version of the Application being waited for, or why there is none.
pub(super) enum Update {
    /// Its new version.
    Applied(Box<Application>),
    /// It was deleted.
    Deleted,
    /// Following it failed for now (it is retried); the text is shown at the timeout.
    Failed(String),
}

/// Wait until `spec` holds for Application `name`, following it with a watch (a large Application
/// read again and again would load the API server for nothing).
pub(super) async fn wait_for(
    api: &Api<Application>,
    name: &str,
    spec: &WaitFor,
    timeout: Duration,
) -> anyhow::Result<Application> {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let app = get(api, name).await?;
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let updates = watcher(api.clone(), config).filter_map(|e| async move {
        match e {
            Ok(watcher::Event::Apply(a) | watcher::Event::InitApply(a)) => Some(Update::Applied(Box::new(a))),
            Ok(watcher::Event::Delete(_)) => Some(Update::Deleted),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(err = %e, "watching the Application");
                // The watcher retries by itself; a pause keeps a failing API server from being hammered.
                tokio::time::sleep(Duration::from_millis(500)).await;
                Some(Update::Failed(e.to_string()))
            }
        }
    });
    wait_on(app, updates, name, spec, timeout).await
}

/// Wait until `spec` holds, from `app` on, with each new version from `updates` (a watch, or the
/// server's live stream).
pub(super) async fn wait_on(
    mut app: Application,
    updates: impl futures::Stream<Item = Update>,
    name: &str,
    spec: &WaitFor,
    timeout: Duration,
) -> anyhow::Result<Application> {
    use futures::StreamExt;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let finish_bar = || {
        if let Some(bar) = &bar {
            bar.finish_and_clear();
        }
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let mut events = std::pin::pin!(updates);
    let mut watch_error = None;
    let mut operation_done = spec.operation.is_none();
    loop {
        let status = app.status.clone().unwrap_or_default();
        let op = status.operation_state.clone();
        if !operation_done {
            let wanted = spec.operation.as_deref().unwrap_or("");
            let ours = op
                .as_ref()
                .is_some_and(|o| wanted.is_empty() || o.operation.as_ref().is_some_and(|x| x.id == wanted));
            // Waiting for any operation, a request not yet taken up comes first.
            let pending = wanted.is_empty() && app.pending_request().is_some();
            if let Some(o) = op.as_ref().filter(|_| ours && !pending) {
                if o.phase != OperationPhase::Running {
                    if o.phase != OperationPhase::Succeeded {
                        finish_bar();
                        let failed: Vec<String> = o
                            .resources
                            .iter()
                            .filter(|r| r.status == ResultCode::SyncFailed)
                            .map(|r| format!("{}/{} {}: {}", r.kind, r.name, r.status, r.message))
                            .collect();
                        let detail = if failed.is_empty() {
                            String::new()
                        } else {
                            format!("\n  {}", failed.join("\n  "))
                        };
                        bail!(
                            "operation on {name} {}: {}{detail}",
                            o.phase.as_str().to_lowercase(),
                            o.message
                        );
                    }
                    operation_done = true;
                } else if let Some(bar) = &bar {
                    bar.set_message(format!("{name}: {}", o.message));
                }
            } else if wanted.is_empty() && !pending && op.as_ref().is_none_or(|o| o.phase != OperationPhase::Running) {
                operation_done = true;
            }
        }
        let sync_ok = !spec.sync || status.sync.as_ref().is_some_and(|s| s.status == SyncCode::Synced);
        let health_ok = !spec.health || status.health.as_ref().is_some_and(|h| h.status == HealthCode::Healthy);
        if operation_done && sync_ok && health_ok {
            finish_bar();
            return Ok(app);
        }
        // Nothing will become Synced or Healthy while the controller cannot even compare with Git
        // (a bad path, a render or repository error): say why now instead of at the timeout. A
        // request not yet taken up may be what fixes it, so only once none is pending.
        if operation_done
            && app.pending_request().is_none()
            && let Some(error) = comparison_error(&status)
        {
            finish_bar();
            bail!(
                "{name} cannot be compared with Git ({}): {}",
                error.type_,
                error.message
            );
        }
        if operation_done && !sync_ok && spec.stop_when_only_pruning_left {
            let out_of_sync: Vec<_> = status
                .resources
                .iter()
                .filter(|r| r.status == SyncCode::OutOfSync)
                .collect();
            let compared_at_op =
                status.sync.as_ref().map(|s| s.revision.as_str()) == op.as_ref().map(|o| o.revision.as_str());
            if compared_at_op && !out_of_sync.is_empty() && out_of_sync.iter().all(|r| r.requires_pruning) {
                finish_bar();
                let names: Vec<String> = out_of_sync
                    .iter()
                    .map(|r| format!("{}/{}/{}", r.kind, r.namespace, r.name))
                    .collect();
                bail!(
                    "{name} stays OutOfSync: {} object(s) no longer in Git require pruning, and the sync did not prune (sync with --prune): {}",
                    names.len(),
                    names.join(", ")
                );
            }
        }
        if operation_done && let Some(bar) = &bar {
            bar.set_message(summary_line(&app));
        }
        // The next version of the Application from the watch (which retries failed requests).
        let next = loop {
            match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(Some(Update::Applied(a))) => break Some(*a),
                Ok(Some(Update::Deleted)) => {
                    finish_bar();
                    bail!("Application {name} was deleted while waiting for it");
                }
                Ok(Some(Update::Failed(e))) => watch_error = Some(e),
                Ok(None) | Err(_) => break None,
            }
        };
        match next {
            Some(a) => app = a,
            None => {
                finish_bar();
                let op_text = op
                    .map(|o| format!(", operation {}: {}", o.phase, o.message))
                    .unwrap_or_default();
                let cond = status
                    .conditions
                    .first()
                    .map(|c| format!(", {}: {}", c.type_, c.message))
                    .unwrap_or_default();
                let watch = watch_error
                    .map(|e| format!(" (watching it failed: {e})"))
                    .unwrap_or_default();
                bail!(
                    "timed out after {} s waiting for {}{op_text}{cond}{watch}",
                    timeout.as_secs(),
                    summary_line(&app)
                );
            }
        }
    }
}

/// The condition saying the last comparison with Git failed, if there is one.
fn comparison_error(status: &ApplicationStatus) -> Option<&ApplicationCondition> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::ComparisonError)
}
