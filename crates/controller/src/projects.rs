//! AppProjects as the controller reads them: a watched cache in the controller, a direct read in
//! the CLI. An Application's project decides which repositories, destinations and kinds of object
//! it may use (the rules themselves are in `capstan-project`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use capstan_api::AppProject;
use capstan_api::project::{AppProjectSpec, DEFAULT_PROJECT};
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use crate::error::PipelineError;

/// An Application's project as one reconcile reads it: read once per pass, so every step of the
/// pass (polling, resolving, comparing, windows, the operation) judges by the same rules.
#[derive(Debug, Clone)]
pub struct Project {
    /// The project's name (`default` for an empty `spec.project`).
    pub name: String,
    /// Its rules.
    pub spec: AppProjectSpec,
}

/// The projects of one namespace.
pub struct Projects {
    client: kube::Client,
    namespace: String,
    store: OnceLock<Store<AppProject>>,
    /// Whether a missing `default` project denies everything instead of allowing everything.
    deny_implicit_default: AtomicBool,
}

impl Projects {
    /// Projects in `namespace`, read directly until [`Projects::spawn`] starts a watch.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_string(),
            store: OnceLock::new(),
            deny_implicit_default: AtomicBool::new(false),
        }
    }

    /// Make a missing `default` project deny everything (the operator's
    /// `--deny-implicit-default-project`): every Application must then name a real AppProject.
    pub fn deny_implicit_default(&self, deny: bool) {
        self.deny_implicit_default.store(deny, Ordering::Relaxed);
    }

    /// Keep a watched cache of the namespace's AppProjects.
    pub fn spawn(&self) {
        let api: Api<AppProject> = Api::namespaced(self.client.clone(), &self.namespace);
        let (reader, writer) = reflector::store();
        if self.store.set(reader).is_err() {
            return;
        }
        tokio::spawn(async move {
            let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
                .default_backoff()
                .touched_objects();
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Err(err) = event {
                    tracing::debug!(%err, "AppProject watch error");
                }
            }
        });
    }

    /// The rules of project `name` (`""` is `default`). A missing `default` project allows
    /// everything; any other missing project is an error.
    pub async fn get(&self, name: &str) -> Result<Project, PipelineError> {
        let name = if name.is_empty() { DEFAULT_PROJECT } else { name };
        let found = match self.store.get() {
            Some(store) => {
                if tokio::time::timeout(Duration::from_secs(10), store.wait_until_ready())
                    .await
                    .is_err()
                {
                    return Err(PipelineError::ProjectsNotReady);
                }
                store
                    .get(&ObjectRef::new(name).within(&self.namespace))
                    .map(|p| p.spec.clone())
            }
            None => {
                let api: Api<AppProject> = Api::namespaced(self.client.clone(), &self.namespace);
                api.get_opt(name)
                    .await
                    .map_err(|source| PipelineError::ReadProject {
                        name: name.to_string(),
                        source,
                    })?
                    .map(|p| p.spec)
            }
        };
        capstan_project::resolve(name, found, self.deny_implicit_default.load(Ordering::Relaxed))
            .map(|(name, spec)| Project { name, spec })
            .map_err(|e| PipelineError::UnknownProject {
                name: e.name,
                namespace: self.namespace.clone(),
            })
    }
}
