//! Shared set-up for the ApplicationSet controller's end-to-end tests: a real control plane, a real
//! git server, Capstan's CRDs, and both controllers (Application and ApplicationSet) in-process.
//!
//! [`Env::start`] starts a private control plane for the test. [`Env::shared`] uses the control plane
//! the tests of the test run share ([`capstan_testkit::TestCluster::shared`]), with a Capstan
//! namespace of the test's own ([`Env::ns`]), which both controllers serve; such tests must deploy into
//! destination namespaces, and create cluster-scoped objects (CRDs), no other test of the run uses.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use capstan_api::{Application, ApplicationSet};
#[allow(unused_imports)]
pub use capstan_testkit::capstan::{
    eventually, health_of, install, reconciled_at, sync_of, synced_healthy, unique_namespace,
};
use capstan_testkit::{GitServer, TestCluster};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

pub struct Env {
    pub cluster: TestCluster,
    pub git: GitServer,
    pub client: kube::Client,
    pub apps: Api<Application>,
    pub sets: Api<ApplicationSet>,
    pub secrets: Api<Secret>,
    /// The Capstan namespace: both controllers', where the test's ApplicationSets, Applications and
    /// Secrets live (`capstan` on a private plane).
    pub ns: String,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _cache: tempfile::TempDir,
}

/// Settings of the in-process controllers.
pub struct Settings {
    /// The Application controller's wave timeout.
    pub wave_timeout: Duration,
    /// The Application controller's Git poll interval.
    pub app_poll: Duration,
    /// The ApplicationSet controller's Git poll interval.
    pub set_poll: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            wave_timeout: Duration::from_secs(120),
            app_poll: Duration::from_secs(180),
            set_poll: Duration::from_secs(180),
        }
    }
}

impl Env {
    pub async fn start() -> anyhow::Result<Env> {
        Self::start_with(Settings::default()).await
    }

    pub async fn start_with(settings: Settings) -> anyhow::Result<Env> {
        capstan_testkit::init_logging();
        Self::on(TestCluster::start().await?, capstan_api::NAMESPACE.into(), settings).await
    }

    /// On the run's shared control plane, in a Capstan namespace of the test's own.
    pub async fn shared() -> anyhow::Result<Env> {
        Self::shared_with(Settings::default()).await
    }

    pub async fn shared_with(settings: Settings) -> anyhow::Result<Env> {
        capstan_testkit::init_logging();
        Self::on(TestCluster::shared().await?, unique_namespace(), settings).await
    }

    async fn on(cluster: TestCluster, ns: String, settings: Settings) -> anyhow::Result<Env> {
        let git = GitServer::start().await?;
        let client = cluster.client().await?;
        install(&client).await?;
        capstan_testkit::capstan::create_namespace(&client, &ns).await?;
        let cache = tempfile::tempdir()?;
        let mut tasks = Vec::new();
        {
            let config = capstan_controller::Config {
                namespace: ns.clone(),
                cache_dir: cache.path().to_path_buf(),
                wave_timeout: settings.wave_timeout,
                poll_interval: settings.app_poll,
                ..Default::default()
            };
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(err) = capstan_controller::run(client, config, std::future::pending()).await {
                    eprintln!("Application controller stopped: {err}");
                }
            }));
        }
        {
            // The same cache root as the Application controller: the ApplicationSet controller keeps
            // its own subdirectory.
            let config = capstan_appset::controller::AppSetConfig {
                namespace: ns.clone(),
                cache_dir: cache.path().to_path_buf(),
                poll_interval: settings.set_poll,
                ..Default::default()
            };
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(err) = capstan_appset::controller::run(client, config, std::future::pending()).await {
                    eprintln!("ApplicationSet controller stopped: {err}");
                }
            }));
        }
        Ok(Env {
            apps: Api::namespaced(client.clone(), &ns),
            sets: Api::namespaced(client.clone(), &ns),
            secrets: Api::namespaced(client.clone(), &ns),
            ns,
            cluster,
            git,
            client,
            tasks,
            _cache: cache,
        })
    }

    /// Create or replace an ApplicationSet (server-side apply as the test); one in `capstan` goes to
    /// [`Env::ns`].
    pub async fn apply_set(&self, set: &Value) -> anyhow::Result<ApplicationSet> {
        let name = set["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let mut set = set.clone();
        if set["metadata"]["namespace"] == capstan_api::NAMESPACE {
            set["metadata"]["namespace"] = json!(self.ns);
        }
        let pp = PatchParams::apply("test").force();
        Ok(self.sets.patch(&name, &pp, &Patch::Apply(set)).await?)
    }

    pub async fn set(&self, name: &str) -> anyhow::Result<ApplicationSet> {
        Ok(self.sets.get(name).await?)
    }

    /// Annotate an ApplicationSet with `capstan.dev/refresh`.
    pub async fn refresh_set(&self, name: &str) -> anyhow::Result<()> {
        let patch = json!({"metadata": {"annotations": {"capstan.dev/refresh": "normal"}}});
        self.sets
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// Ask the ApplicationSet controller to reconcile `name` and wait until it has (it removes the
    /// annotation after writing the set's status): the positive signal that it looked, before
    /// asserting that nothing happened.
    pub async fn refresh_set_and_wait(&self, name: &str) -> anyhow::Result<ApplicationSet> {
        self.refresh_set(name).await?;
        self.wait_set(name, "refresh handled", Duration::from_secs(30), |s| {
            !s.metadata
                .annotations
                .as_ref()
                .is_some_and(|m| m.contains_key("capstan.dev/refresh"))
        })
        .await
    }

    /// Ask the Application controller to reconcile `name` and wait until it has (its `reconciledAt`
    /// moved and the annotation is gone).
    pub async fn refresh_app_and_wait(&self, name: &str) -> anyhow::Result<Application> {
        let before = self.app(name).await?.as_ref().and_then(reconciled_at);
        let patch = json!({"metadata": {"annotations": {"capstan.dev/refresh": "normal"}}});
        self.apps
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        self.wait_app(name, "refresh handled", Duration::from_secs(30), |a| {
            capstan_testkit::capstan::refresh_handled_since(a, &before)
        })
        .await
    }

    pub async fn app(&self, name: &str) -> anyhow::Result<Option<Application>> {
        Ok(self.apps.get_opt(name).await?)
    }

    /// Wait until `check` on the Application returns true.
    pub async fn wait_app(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(&Application) -> bool,
    ) -> anyhow::Result<Application> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(app) = self.apps.get_opt(name).await?
                && check(&app)
            {
                return Ok(app);
            }
            if Instant::now() > deadline {
                let app = self.apps.get_opt(name).await?;
                let status = app
                    .and_then(|a| a.status)
                    .map(|s| serde_json::to_string_pretty(&s).unwrap_or_default());
                anyhow::bail!(
                    "timed out after {timeout:?} waiting for {name}: {what}; status: {}",
                    status.unwrap_or_else(|| "(no such Application)".into())
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub async fn wait_gone(&self, name: &str, timeout: Duration) -> anyhow::Result<()> {
        eventually(&format!("Application {name} deleted"), timeout, || async {
            Ok(self.apps.get_opt(name).await?.is_none())
        })
        .await
    }

    /// Wait until `check` on the ApplicationSet returns true.
    pub async fn wait_set(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(&ApplicationSet) -> bool,
    ) -> anyhow::Result<ApplicationSet> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(set) = self.sets.get_opt(name).await?
                && check(&set)
            {
                return Ok(set);
            }
            if Instant::now() > deadline {
                let set = self.sets.get_opt(name).await?;
                let status = set
                    .and_then(|a| a.status)
                    .map(|s| serde_json::to_string_pretty(&s).unwrap_or_default());
                anyhow::bail!(
                    "timed out after {timeout:?} waiting for ApplicationSet {name}: {what}; status: {}",
                    status.unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The Events about object `name` in [`Env::ns`], as `REASON: MESSAGE`.
    pub async fn events_about(&self, name: &str) -> anyhow::Result<Vec<String>> {
        let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(self.client.clone(), &self.ns);
        let params = kube::api::ListParams::default().fields(&format!("involvedObject.name={name}"));
        Ok(events
            .list(&params)
            .await?
            .items
            .into_iter()
            .map(|e| format!("{}: {}", e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect())
    }

    /// Names of the Applications in [`Env::ns`], sorted.
    pub async fn app_names(&self) -> anyhow::Result<Vec<String>> {
        let mut names: Vec<String> = self
            .apps
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter_map(|a| a.metadata.name)
            .collect();
        names.sort();
        Ok(names)
    }

    /// Create or replace a cluster Secret.
    pub async fn cluster_secret(
        &self,
        secret: &str,
        name: &str,
        server: &str,
        labels: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let mut l = serde_json::Map::new();
        l.insert("capstan.dev/secret-type".into(), json!("cluster"));
        for (k, v) in labels {
            l.insert(k.to_string(), json!(v));
        }
        let body = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret, "namespace": self.ns, "labels": l},
            "stringData": {"name": name, "server": server, "config": "{}"},
        });
        let pp = PatchParams::apply("test").force();
        self.secrets.patch(secret, &pp, &Patch::Apply(body)).await?;
        Ok(())
    }

    pub fn api(&self, api_version: &str, kind: &str, plural: &str, namespace: Option<&str>) -> Api<DynamicObject> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    pub async fn configmap(&self, ns: &str, name: &str) -> anyhow::Result<Option<Value>> {
        let obj = self
            .api("v1", "ConfigMap", "configmaps", Some(ns))
            .get_opt(name)
            .await?;
        Ok(obj.map(|o| serde_json::to_value(o).unwrap_or_default()))
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

pub fn revision_of(app: &Application) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.sync.as_ref())
        .map(|s| s.revision.clone())
        .unwrap_or_default()
}

/// The set's condition of `type_`: (status, reason, message).
pub fn condition(set: &ApplicationSet, type_: &str) -> Option<(String, String, String)> {
    set.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_.as_str() == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Whether the set reports `ErrorOccurred` True with `reason`.
pub fn error_with(set: &ApplicationSet, reason: &str) -> bool {
    condition(set, "ErrorOccurred").is_some_and(|(s, r, _)| s == "True" && r == reason)
}

/// Whether the set reports a successful generation.
pub fn up_to_date(set: &ApplicationSet) -> bool {
    condition(set, "ErrorOccurred").is_some_and(|(s, _, _)| s == "False")
        && condition(set, "ResourcesUpToDate").is_some_and(|(s, _, _)| s == "True")
}

/// (uid, resourceVersion) of an Application.
pub fn identity(app: &Application) -> (String, String) {
    (
        app.metadata.uid.clone().unwrap_or_default(),
        app.metadata.resource_version.clone().unwrap_or_default(),
    )
}
