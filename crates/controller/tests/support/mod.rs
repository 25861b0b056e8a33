//! Shared set-up for the controller's end-to-end tests: a real control plane, a real git server,
//! Capstan's CRDs, and the controller running in-process.
//!
//! [`Env::start`] starts a private control plane for the test. [`Env::shared`] uses the control plane
//! the tests of the test run share ([`capstan_testkit::TestCluster::shared`]), with a Capstan
//! namespace of the test's own ([`Env::ns`]), which its controller serves; such tests must deploy into
//! destination namespaces, and create cluster-scoped objects (CRDs), no other test of the run uses.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use capstan_api::Application;
#[allow(unused_imports)]
pub use capstan_testkit::capstan::{
    eventually, health_of, install, reconciled_at, sync_of, synced_healthy, unique_namespace,
};
use capstan_testkit::{GitServer, TestCluster};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

pub struct Env {
    pub cluster: TestCluster,
    pub git: GitServer,
    pub client: kube::Client,
    pub apps: Api<Application>,
    /// The Capstan namespace: the controller's, where the test's Applications, AppProjects and
    /// Secrets live (`capstan` on a private plane).
    pub ns: String,
    controller: Option<tokio::task::JoinHandle<()>>,
    cache: tempfile::TempDir,
    pub wave_timeout: Duration,
    pub poll_interval: Duration,
    /// `--deny-implicit-default-project` for the next (re)start of the controller.
    pub deny_implicit_default_project: bool,
    /// The clock sync windows are judged by, for the next (re)start of the controller.
    pub clock: capstan_controller::clock::Clock,
}

impl Env {
    pub async fn start() -> anyhow::Result<Env> {
        Self::start_with(Duration::from_secs(120)).await
    }

    pub async fn start_with(wave_timeout: Duration) -> anyhow::Result<Env> {
        Self::start_full(wave_timeout, Duration::from_secs(180)).await
    }

    pub async fn start_full(wave_timeout: Duration, poll_interval: Duration) -> anyhow::Result<Env> {
        capstan_testkit::init_logging();
        Self::on(
            TestCluster::start().await?,
            capstan_api::NAMESPACE.into(),
            wave_timeout,
            poll_interval,
        )
        .await
    }

    /// On the run's shared control plane, in a Capstan namespace of the test's own.
    pub async fn shared() -> anyhow::Result<Env> {
        Self::shared_with(Duration::from_secs(120)).await
    }

    pub async fn shared_with(wave_timeout: Duration) -> anyhow::Result<Env> {
        Self::shared_full(wave_timeout, Duration::from_secs(180)).await
    }

    pub async fn shared_full(wave_timeout: Duration, poll_interval: Duration) -> anyhow::Result<Env> {
        capstan_testkit::init_logging();
        Self::on(
            TestCluster::shared().await?,
            unique_namespace(),
            wave_timeout,
            poll_interval,
        )
        .await
    }

    async fn on(
        cluster: TestCluster,
        ns: String,
        wave_timeout: Duration,
        poll_interval: Duration,
    ) -> anyhow::Result<Env> {
        let git = GitServer::start().await?;
        let client = cluster.client().await?;
        install(&client).await?;
        capstan_testkit::capstan::create_namespace(&client, &ns).await?;
        let apps = Api::namespaced(client.clone(), &ns);
        let mut env = Env {
            cluster,
            git,
            client,
            apps,
            ns,
            controller: None,
            cache: tempfile::tempdir()?,
            wave_timeout,
            poll_interval,
            deny_implicit_default_project: false,
            clock: Default::default(),
        };
        env.start_controller();
        Ok(env)
    }

    /// Start (or restart) the in-process controller.
    pub fn start_controller(&mut self) {
        let config = capstan_controller::Config {
            namespace: self.ns.clone(),
            cache_dir: self.cache.path().to_path_buf(),
            wave_timeout: self.wave_timeout,
            poll_interval: self.poll_interval,
            deny_implicit_default_project: self.deny_implicit_default_project,
            clock: self.clock.clone(),
            ..Default::default()
        };
        let client = self.client.clone();
        self.controller = Some(tokio::spawn(async move {
            if let Err(err) = capstan_controller::run(client, config, std::future::pending()).await {
                eprintln!("controller stopped: {err}");
            }
        }));
    }

    /// Kill the controller at once, as a crash would.
    pub async fn kill_controller(&mut self) {
        if let Some(task) = self.controller.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Create or replace an Application; one made by [`app`] (in `capstan`) goes to [`Env::ns`].
    pub async fn create_app(&self, mut app: Value) -> anyhow::Result<()> {
        if app["metadata"]["namespace"] == capstan_api::NAMESPACE {
            app["metadata"]["namespace"] = json!(self.ns);
        }
        let name = app["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let pp = PatchParams::apply("test").force();
        self.apps.patch(&name, &pp, &Patch::Apply(app)).await?;
        Ok(())
    }

    /// Create or replace the AppProject `name` in Capstan's namespace with `spec`.
    pub async fn apply_project(&self, name: &str, spec: Value) -> anyhow::Result<()> {
        let projects = self.api("capstan.dev/v1alpha1", "AppProject", "appprojects", Some(&self.ns));
        let body = json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "AppProject",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": spec,
        });
        projects
            .patch(name, &PatchParams::apply("test").force(), &Patch::Apply(body))
            .await?;
        Ok(())
    }

    pub async fn app(&self, name: &str) -> anyhow::Result<Application> {
        Ok(self.apps.get(name).await?)
    }

    pub async fn annotate(&self, name: &str, key: &str, value: &str) -> anyhow::Result<()> {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        self.apps
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    pub async fn refresh(&self, name: &str) -> anyhow::Result<()> {
        self.annotate(name, "capstan.dev/refresh", "normal").await
    }

    pub async fn request(&self, name: &str, op: Value) -> anyhow::Result<()> {
        self.annotate(name, "capstan.dev/operation", &op.to_string()).await
    }

    /// Ask for a refresh of `name` and wait until the controller has handled it (its `reconciledAt`
    /// moved): the positive signal that the controller looked, before asserting that nothing
    /// happened.
    pub async fn refresh_and_wait(&self, name: &str) -> anyhow::Result<Application> {
        let before = reconciled_at(&self.app(name).await?);
        self.refresh(name).await?;
        self.wait_reconciled_since(name, before).await
    }

    /// Wait until the `reconciledAt` of `name` differs from `before` (recorded earlier).
    pub async fn wait_reconciled_since(&self, name: &str, before: Option<String>) -> anyhow::Result<Application> {
        self.wait_app(name, "reconciled again", Duration::from_secs(30), |a| {
            capstan_testkit::capstan::refresh_handled_since(a, &before)
        })
        .await
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
                    status.unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub fn api(&self, api_version: &str, kind: &str, plural: &str, namespace: Option<&str>) -> Api<DynamicObject> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    pub async fn get(
        &self,
        api_version: &str,
        kind: &str,
        plural: &str,
        ns: &str,
        name: &str,
    ) -> anyhow::Result<Option<Value>> {
        let obj = self.api(api_version, kind, plural, Some(ns)).get_opt(name).await?;
        Ok(obj.map(|o| serde_json::to_value(o).unwrap_or_default()))
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(task) = self.controller.take() {
            task.abort();
        }
    }
}

/// An Application manifest.
pub fn app(name: &str, repo: &str, path: &str, namespace: &str, automated: bool) -> Value {
    let mut spec = json!({
        "source": {"repoURL": repo, "targetRevision": "main", "path": path},
        "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace},
        "syncPolicy": {"syncOptions": ["CreateNamespace=true"]},
    });
    if automated {
        spec["syncPolicy"]["automated"] = json!({"prune": true, "selfHeal": true});
    }
    json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "Application", "metadata": {"name": name, "namespace": "capstan"}, "spec": spec})
}

pub fn op_phase(app: &Application) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.operation_state.as_ref())
        .map(|o| o.phase.to_string())
        .unwrap_or_default()
}

pub fn op_message(app: &Application) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.operation_state.as_ref())
        .map(|o| o.message.clone())
        .unwrap_or_default()
}

pub fn condition(app: &Application, type_: &str) -> Option<String> {
    app.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_.as_str() == type_)
        .map(|c| c.message.clone())
}

pub const CM_API: (&str, &str, &str) = ("v1", "ConfigMap", "configmaps");
pub const DEPLOY_API: (&str, &str, &str) = ("apps/v1", "Deployment", "deployments");
pub const JOB_API: (&str, &str, &str) = ("batch/v1", "Job", "jobs");
