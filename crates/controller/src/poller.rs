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

use crate::clock;
use crate::pipeline::Pipeline;
use capstan_cluster::repository;

/// The Applications using one repository.
type AppSet = Arc<Mutex<HashSet<ObjectRef<Application>>>>;

/// The pollers of every repository in use.
pub struct Pollers {
    pipeline: Arc<Pipeline>,
    interval: Duration,
    trigger: UnboundedSender<ObjectRef<Application>>,
    repos: Mutex<HashMap<String, Poller>>,
}

/// One repository's poller and the Applications it serves.
struct Poller {
    apps: AppSet,
    task: tokio::task::AbortHandle,
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

    /// Record that `app` uses the repositories `urls` (and no other), starting each repository's
    /// poller if it has none and stopping pollers no Application uses any more.
    pub fn watch(&self, urls: &[&str], app: ObjectRef<Application>) {
        let mut repos = lock(&self.repos);
        release(&mut repos, &app, urls);
        for url in urls {
            self.watch_one(&mut repos, url, app.clone());
        }
    }

    fn watch_one(&self, repos: &mut HashMap<String, Poller>, url: &str, app: ObjectRef<Application>) {
        if let Some(poller) = repos.get(url) {
            lock(&poller.apps).insert(app);
            return;
        }
        let apps = Arc::new(Mutex::new(HashSet::from([app])));
        let (pipeline, interval, trigger, url) = (
            self.pipeline.clone(),
            self.interval,
            self.trigger.clone(),
            url.to_string(),
        );
        let key = url.clone();
        let poll_apps = apps.clone();
        let task = tokio::spawn(async move {
            let apps = poll_apps;
            let mut last: Option<Vec<(String, String)>> = None;
            loop {
                tokio::time::sleep(poll_delay(interval, &url)).await;
                let creds = repository::for_repo(&pipeline.client, &pipeline.namespace, &url)
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
        repos.insert(
            key,
            Poller {
                apps,
                task: task.abort_handle(),
            },
        );
    }

    /// `app` is gone: stop polling for it (and stop pollers nobody needs).
    pub fn forget(&self, app: &ObjectRef<Application>) {
        release(&mut lock(&self.repos), app, &[]);
    }
}

/// Remove `app` from every repository but those in `keep`; stop the pollers left without Applications.
fn release(repos: &mut HashMap<String, Poller>, app: &ObjectRef<Application>, keep: &[&str]) {
    repos.retain(|url, poller| {
        if keep.contains(&url.as_str()) {
            return true;
        }
        let mut apps = lock(&poller.apps);
        apps.remove(app);
        if apps.is_empty() {
            poller.task.abort();
            tracing::debug!(url = %capstan_source::redact(url, &[]), "repository no longer used; poller stopped");
            return false;
        }
        true
    })
}

/// The time between two polls of `url`: `interval` plus up to 10 % that is stable per URL, so the
/// pollers of repositories watched at the same moment (a controller start) spread out.
fn poll_delay(interval: Duration, url: &str) -> Duration {
    clock::jitter(interval, url)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poller(apps: &[&str]) -> (Poller, tokio::task::JoinHandle<()>) {
        let task = tokio::spawn(std::future::pending::<()>());
        let apps = apps.iter().map(|a| ObjectRef::new(a).within("capstan")).collect();
        (
            Poller {
                apps: Arc::new(Mutex::new(apps)),
                task: task.abort_handle(),
            },
            task,
        )
    }

    #[test]
    fn poll_delays_stay_within_ten_percent_and_differ_between_repositories() {
        let interval = Duration::from_secs(180);
        let urls: Vec<String> = (0..50)
            .map(|i| format!("https://git.example.com/team-{i}/deploy.git"))
            .collect();
        let delays: Vec<Duration> = urls.iter().map(|u| poll_delay(interval, u)).collect();
        for (url, delay) in urls.iter().zip(&delays) {
            assert!(
                *delay >= interval && *delay <= interval.mul_f64(1.1),
                "{url}: {delay:?} outside [{interval:?}, 1.1 × {interval:?}]"
            );
            assert_eq!(poll_delay(interval, url), *delay, "stable per repository");
        }
        let distinct: HashSet<Duration> = delays.iter().copied().collect();
        assert!(
            distinct.len() > 40,
            "delays spread out across repositories: {} distinct of {}",
            distinct.len(),
            delays.len()
        );
        assert!(delays.iter().any(|d| *d > interval), "some delay has jitter");
        // A tiny interval stays as it is rather than failing.
        assert_eq!(poll_delay(Duration::from_millis(5), &urls[0]), Duration::from_millis(5));
    }

    #[tokio::test]
    async fn a_poller_stops_when_its_last_application_leaves() {
        let mut repos = HashMap::new();
        let (shared, shared_task) = poller(&["a", "b"]);
        let (single, single_task) = poller(&["a"]);
        repos.insert("git://shared".to_string(), shared);
        repos.insert("git://single".to_string(), single);

        // `a` moved to the shared repository only: the single-use poller stops.
        release(&mut repos, &ObjectRef::new("a").within("capstan"), &["git://shared"]);
        assert!(
            single_task.await.is_err_and(|e| e.is_cancelled()),
            "unused poller aborted"
        );
        assert_eq!(repos.keys().collect::<Vec<_>>(), vec!["git://shared"]);

        // `b` is deleted; `a` still uses the shared repository.
        release(&mut repos, &ObjectRef::new("b").within("capstan"), &[]);
        assert!(repos.contains_key("git://shared"));
        release(&mut repos, &ObjectRef::new("a").within("capstan"), &[]);
        assert!(repos.is_empty());
        assert!(shared_task.await.is_err_and(|e| e.is_cancelled()));
    }
}
