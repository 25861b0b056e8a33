//! One Git poller per repository: every poll interval it lists the repository's refs once and, when a
//! ref moved, triggers a reconcile of exactly the Applications that use the repository. However many
//! Applications share a repository, a poll costs one ref listing (and one fetch when something moved);
//! Applications resolve their revisions from that shared answer.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_api::Application;
use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;

use crate::pipeline::Pipeline;

/// The Applications using one repository.
type AppSet = Arc<Mutex<HashSet<ObjectRef<Application>>>>;

/// The pollers of every repository in use.
pub struct Pollers {
    pipeline: Arc<Pipeline>,
    interval: Duration,
    trigger: UnboundedSender<ObjectRef<Application>>,
    repos: Mutex<HashMap<String, AppSet>>,
}

impl Pollers {
    /// Pollers that list refs every `interval` and send triggers to `trigger`.
    pub fn new(pipeline: Arc<Pipeline>, interval: Duration, trigger: UnboundedSender<ObjectRef<Application>>) -> Self {
        Self {
            pipeline,
            interval,
            trigger,
            repos: Mutex::new(HashMap::new()),
        }
    }

    /// Record that `app` uses `url`, starting the repository's poller if it has none.
    pub fn watch(&self, url: &str, app: ObjectRef<Application>) {
        let mut repos = match self.repos.lock() {
            Ok(r) => r,
            Err(p) => p.into_inner(),
        };
        if let Some(apps) = repos.get(url) {
            if let Ok(mut apps) = apps.lock() {
                apps.insert(app);
            }
            return;
        }
        let apps = Arc::new(Mutex::new(HashSet::from([app])));
        repos.insert(url.to_string(), apps.clone());
        let (pipeline, interval, trigger, url) = (
            self.pipeline.clone(),
            self.interval,
            self.trigger.clone(),
            url.to_string(),
        );
        tokio::spawn(async move {
            let mut last: Option<Vec<(String, String)>> = None;
            loop {
                tokio::time::sleep(interval).await;
                let creds = crate::credentials::for_repo(&pipeline.client, &pipeline.namespace, &url)
                    .await
                    .unwrap_or_default();
                match pipeline.repos.refresh(&url, &creds).await {
                    Ok(refs) => {
                        if last.as_ref().is_some_and(|l| *l != refs) {
                            let targets: Vec<ObjectRef<Application>> =
                                apps.lock().map(|a| a.iter().cloned().collect()).unwrap_or_default();
                            tracing::info!(url = %capstan_source::redact(&url, &[]), apps = targets.len(), "repository moved");
                            for t in targets {
                                let _ = trigger.unbounded_send(t);
                            }
                        }
                        last = Some(refs);
                    }
                    Err(err) => tracing::warn!(%err, "polling repository"),
                }
            }
        });
    }
}
