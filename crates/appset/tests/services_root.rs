//! Seed 004's developer flow, end to end, with the example itself: `examples/appsets/services.yaml`
//! turns one small file per service per environment (`services-root/services/<service>/<env>.yaml`:
//! `cluster`, `service`, `imageTag`, `targetRevision`) into Applications that deploy the shared chart
//! `examples/charts/service` to the cluster the file names.
//!
//! Two real control planes — a hub running both controllers in-process and a spoke registered on it
//! as `prod-eu` — and a real git server. Adding a file deploys a service, editing `imageTag` rolls it,
//! deleting the file removes the Application and its objects. A second test generates the example
//! manifests against `examples/` itself, so the examples cannot rot unnoticed.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use capstan_api::{Application, ApplicationSet};
use capstan_appset::{ClusterInfo, Inputs, generate, git_sources};
use capstan_cluster::ClusterSecret;
use capstan_testkit::{GitServer, TestCluster};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "capstan";
const SPOKE: &str = "prod-eu";
const IMAGE: &str = "registry.example/services/app";

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// The example ApplicationSet `examples/appsets/NAME.yaml` with its `REPO_URL` placeholder replaced.
fn example_set(name: &str, repo_url: &str) -> anyhow::Result<Value> {
    let path = examples().join(format!("appsets/{name}.yaml"));
    let text = std::fs::read_to_string(&path)?;
    assert!(
        text.contains("REPO_URL"),
        "{} names the REPO_URL placeholder",
        path.display()
    );
    Ok(serde_saphyr::from_str(&text.replace("REPO_URL", repo_url))?)
}

fn service_file(cluster: &str, service: &str, tag: &str) -> String {
    format!("cluster: {cluster}\nservice: {service}\nimageTag: \"{tag}\"\ntargetRevision: main\n")
}

async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await? {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Install the CRDs and the `capstan` namespace, as `capstan install` does.
async fn install(client: &kube::Client) -> anyhow::Result<()> {
    let pp = PatchParams::apply("test").force();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, crd) in capstan_api::crd::all() {
        let name = crd.name_any();
        crds.patch(&name, &pp, &Patch::Apply(&crd)).await?;
        eventually(&format!("CRD {name} established"), Duration::from_secs(30), || async {
            let crd = crds.get(&name).await?;
            Ok(crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True"))
        })
        .await?;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    namespaces.patch(NS, &pp, &Patch::Apply(ns)).await?;
    Ok(())
}

/// Both controllers on the hub, in-process, with Git polls far longer than the test: every change
/// below reaches them through a `capstan.dev/refresh` annotation or a spec change.
fn start_controllers(hub: &kube::Client, cache: &Path) -> Vec<tokio::task::JoinHandle<()>> {
    let poll = Duration::from_secs(600);
    let apps = capstan_controller::Config {
        cache_dir: cache.to_path_buf(),
        poll_interval: poll,
        wave_timeout: Duration::from_secs(120),
        ..Default::default()
    };
    let sets = capstan_appset::controller::AppSetConfig {
        cache_dir: cache.to_path_buf(),
        poll_interval: poll,
        ..Default::default()
    };
    let (a, s) = (hub.clone(), hub.clone());
    vec![
        tokio::spawn(async move {
            if let Err(err) = capstan_controller::run(a, apps, std::future::pending()).await {
                eprintln!("Application controller stopped: {err}");
            }
        }),
        tokio::spawn(async move {
            if let Err(err) = capstan_appset::controller::run(s, sets, std::future::pending()).await {
                eprintln!("ApplicationSet controller stopped: {err}");
            }
        }),
    ]
}

struct Controllers(Vec<tokio::task::JoinHandle<()>>);
impl Drop for Controllers {
    fn drop(&mut self) {
        self.0.iter().for_each(|t| t.abort());
    }
}

fn sync_of(app: &Application) -> &str {
    app.status
        .as_ref()
        .and_then(|s| s.sync.as_ref())
        .map_or("", |s| s.status.as_str())
}

fn health_of(app: &Application) -> &str {
    app.status
        .as_ref()
        .and_then(|s| s.health.as_ref())
        .map_or("", |h| h.status.as_str())
}

fn image_of(deployment: &Deployment) -> String {
    deployment
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// The hub's view of the ApplicationSet and its Applications, and what is deployed where.
struct Fleet {
    apps: Api<Application>,
    sets: Api<ApplicationSet>,
    hub: kube::Client,
    spoke: kube::Client,
}

impl Fleet {
    /// Wait until the Application is Synced and Healthy and return it.
    async fn wait_synced(&self, name: &str, what: &str) -> anyhow::Result<Application> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let app = self.apps.get_opt(name).await?;
            if let Some(app) = &app
                && sync_of(app) == "Synced"
                && health_of(app) == "Healthy"
            {
                return Ok(app.clone());
            }
            if Instant::now() > deadline {
                let status = app.and_then(|a| a.status).map(|s| serde_json::to_string_pretty(&s));
                anyhow::bail!("timed out waiting for {name} to be Synced and Healthy ({what}); status: {status:?}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn app_names(&self) -> anyhow::Result<Vec<String>> {
        let mut names: Vec<String> = self
            .apps
            .list(&Default::default())
            .await?
            .items
            .iter()
            .map(|a| a.name_any())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Ask the ApplicationSet controller to look at Git now.
    async fn refresh_set(&self) -> anyhow::Result<()> {
        let patch = json!({"metadata": {"annotations": {"capstan.dev/refresh": "normal"}}});
        self.sets
            .patch("services", &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    fn client(&self, on_spoke: bool) -> kube::Client {
        if on_spoke { self.spoke.clone() } else { self.hub.clone() }
    }

    async fn deployment(&self, on_spoke: bool, ns: &str, name: &str) -> anyhow::Result<Option<Deployment>> {
        Ok(Api::<Deployment>::namespaced(self.client(on_spoke), ns)
            .get_opt(name)
            .await?)
    }

    /// The Deployment `name` in `ns` on the named side, with its image; and nothing of that name on the
    /// other side.
    async fn deployed_only_on(&self, on_spoke: bool, ns: &str, name: &str, tag: &str) -> anyhow::Result<()> {
        let (here, there) = if on_spoke { ("spoke", "hub") } else { ("hub", "spoke") };
        let deployment = self
            .deployment(on_spoke, ns, name)
            .await?
            .ok_or_else(|| anyhow::anyhow!("Deployment {ns}/{name} is on the {here}"))?;
        assert_eq!(image_of(&deployment), format!("{IMAGE}:{tag}"), "{name} on the {here}");
        assert_eq!(
            deployment
                .annotations()
                .get("capstan.dev/tracking-id")
                .map(String::as_str),
            Some(format!("{NS}/{name}").as_str()),
            "{name} on the {here} is tracked by its Application"
        );
        let service = Api::<Service>::namespaced(self.client(on_spoke), ns)
            .get_opt(name)
            .await?;
        assert!(service.is_some(), "Service {ns}/{name} on the {here}");
        let config = Api::<ConfigMap>::namespaced(self.client(on_spoke), ns)
            .get_opt(name)
            .await?;
        let data = config.and_then(|c| c.data).unwrap_or_default();
        assert_eq!(
            data.get("IMAGE_TAG").map(String::as_str),
            Some(tag),
            "ConfigMap {ns}/{name} on the {here}"
        );
        assert!(
            self.deployment(!on_spoke, ns, name).await?.is_none(),
            "Deployment {ns}/{name} must not be on the {there}"
        );
        Ok(())
    }

    /// Whether any of the chart's objects named `name` is left in `ns` on the named side.
    async fn any_object(&self, on_spoke: bool, ns: &str, name: &str) -> anyhow::Result<bool> {
        let client = self.client(on_spoke);
        Ok(self.deployment(on_spoke, ns, name).await?.is_some()
            || Api::<Service>::namespaced(client.clone(), ns)
                .get_opt(name)
                .await?
                .is_some()
            || Api::<ConfigMap>::namespaced(client, ns).get_opt(name).await?.is_some())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn service_files_deploy_the_shared_chart_to_the_cluster_they_name() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    let started = Instant::now();
    // Planes of its own: the example ApplicationSet and AppProject are applied as they are, in the
    // `capstan` namespace they name, and the test checks that nothing of a service reaches the hub's
    // cluster (no `payments` namespace there), which other tests' services could create on a
    // shared plane.
    let (hub, spoke, git) = tokio::try_join!(TestCluster::start(), TestCluster::start(), GitServer::start())?;
    eprintln!("hub, spoke and git server up in {:?}", started.elapsed());
    let hub_client = hub.client().await?;
    let spoke_client = spoke.client().await?;
    install(&hub_client).await?;

    // The spoke, registered on the hub with its kubeconfig's credentials.
    let kubeconfig = capstan_cluster::register::read_kubeconfig(spoke.kubeconfig(), None)?;
    let registration = ClusterSecret {
        secret_name: capstan_cluster::secret::secret_name_for(SPOKE),
        name: SPOKE.into(),
        server: kubeconfig.server,
        config: kubeconfig.config,
        labels: BTreeMap::from([("env".to_string(), "production".to_string())]),
        ..Default::default()
    };
    let secrets: Api<Secret> = Api::namespaced(hub_client.clone(), NS);
    secrets
        .create(&PostParams::default(), &registration.to_secret(NS))
        .await?;

    let cache = tempfile::tempdir()?;
    let _controllers = Controllers(start_controllers(&hub_client, cache.path()));

    // One repository holding the chart (from examples/, as is) and the services root: checkout's
    // staging on the hub, its production on the spoke.
    git.create_repo("platform")?;
    let chart = capstan_testkit::files_under(&examples().join("charts/service"))?;
    assert!(chart.iter().any(|(p, _)| p == "Chart.yaml"), "{chart:?}");
    let mut files: Vec<(String, String)> = chart
        .into_iter()
        .map(|(path, text)| (format!("charts/service/{path}"), text))
        .collect();
    files.push((
        "services-root/services/checkout/staging.yaml".into(),
        service_file("in-cluster", "checkout", "1.4.2"),
    ));
    files.push((
        "services-root/services/checkout/production.yaml".into(),
        service_file(SPOKE, "checkout", "1.4.1"),
    ));
    let files: Vec<(&str, Option<&str>)> = files.iter().map(|(p, t)| (p.as_str(), Some(t.as_str()))).collect();
    git.commit("platform", "main", &files, "chart and services root")?;
    let repo = git.git_url("platform");

    // The example ApplicationSet, exactly as the playground applies it.
    let fleet = Fleet {
        apps: Api::namespaced(hub_client.clone(), NS),
        sets: Api::namespaced(hub_client.clone(), NS),
        hub: hub_client.clone(),
        spoke: spoke_client.clone(),
    };
    // The example's project first: it keeps developers' files out of the system namespaces.
    let project_file = examples().join("appsets/services-project.yaml");
    let project: Value = serde_saphyr::from_str(&std::fs::read_to_string(&project_file)?)?;
    let projects: Api<capstan_api::AppProject> = Api::namespaced(hub_client.clone(), "capstan");
    projects
        .patch("services", &PatchParams::apply("test").force(), &Patch::Apply(&project))
        .await?;
    let set = example_set("services", &repo)?;
    let set = fleet
        .sets
        .patch("services", &PatchParams::apply("test").force(), &Patch::Apply(&set))
        .await?;
    let set_uid = set.uid().unwrap_or_default();

    // Each file is an Application owned by the set, deploying the chart to the cluster it names.
    let production = fleet.wait_synced("checkout-production", "first deploy").await?;
    let staging = fleet.wait_synced("checkout-staging", "first deploy").await?;
    eprintln!("both services Synced and Healthy {:?} after start", started.elapsed());
    assert_eq!(fleet.app_names().await?, ["checkout-production", "checkout-staging"]);
    for app in [&production, &staging] {
        let owner = &app.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("ApplicationSet", set_uid.as_str())
        );
        assert!(app.finalizers().iter().any(|f| f == "capstan.dev/resources-finalizer"));
        assert_eq!(app.spec.source.path, "charts/service");
        assert_eq!(app.spec.destination.namespace, "checkout");
    }
    assert_eq!(production.spec.destination.name, SPOKE);
    assert_eq!(staging.spec.destination.name, "in-cluster");
    fleet
        .deployed_only_on(true, "checkout", "checkout-production", "1.4.1")
        .await?;
    fleet
        .deployed_only_on(false, "checkout", "checkout-staging", "1.4.2")
        .await?;

    // Adding a file deploys a new service (to the spoke: nothing of it on the hub).
    git.commit(
        "platform",
        "main",
        &[(
            "services-root/services/payments/production.yaml",
            Some(&service_file(SPOKE, "payments", "0.9.0")),
        )],
        "payments goes to production",
    )?;
    fleet.refresh_set().await?;
    let payments = fleet.wait_synced("payments-production", "added file").await?;
    assert_eq!(payments.spec.destination.name, SPOKE);
    fleet
        .deployed_only_on(true, "payments", "payments-production", "0.9.0")
        .await?;
    assert!(
        Api::<Namespace>::all(hub_client.clone())
            .get_opt("payments")
            .await?
            .is_none(),
        "nothing of payments on the hub"
    );

    // Editing imageTag rolls the service on the spoke; the other Applications are left alone.
    let staging_generation = fleet.apps.get("checkout-staging").await?.metadata.generation;
    let payments_generation = fleet.apps.get("payments-production").await?.metadata.generation;
    git.commit(
        "platform",
        "main",
        &[(
            "services-root/services/checkout/production.yaml",
            Some(&service_file(SPOKE, "checkout", "1.5.0")),
        )],
        "promote checkout 1.5.0 to production",
    )?;
    fleet.refresh_set().await?;
    eventually(
        "checkout-production's Deployment on the spoke running 1.5.0",
        Duration::from_secs(90),
        || async {
            Ok(fleet
                .deployment(true, "checkout", "checkout-production")
                .await?
                .is_some_and(|d| image_of(&d) == format!("{IMAGE}:1.5.0")))
        },
    )
    .await?;
    fleet.wait_synced("checkout-production", "after the new tag").await?;
    eventually(
        "the spoke's Deployment rolled out (the new Pod available)",
        Duration::from_secs(60),
        || async {
            let Some(d) = fleet.deployment(true, "checkout", "checkout-production").await? else {
                return Ok(false);
            };
            let status = d.status.unwrap_or_default();
            Ok(status.observed_generation == d.metadata.generation
                && status.updated_replicas == Some(1)
                && status.available_replicas == Some(1)
                && status.replicas == Some(1))
        },
    )
    .await?;
    fleet
        .deployed_only_on(true, "checkout", "checkout-production", "1.5.0")
        .await?;
    fleet
        .deployed_only_on(false, "checkout", "checkout-staging", "1.4.2")
        .await?;
    assert_eq!(
        fleet.apps.get("checkout-staging").await?.metadata.generation,
        staging_generation,
        "checkout-staging untouched"
    );
    assert_eq!(
        fleet.apps.get("payments-production").await?.metadata.generation,
        payments_generation,
        "payments-production untouched"
    );

    // Deleting the file removes the Application and, through its finalizer, its objects on the spoke.
    git.commit(
        "platform",
        "main",
        &[("services-root/services/payments/production.yaml", None)],
        "retire payments",
    )?;
    fleet.refresh_set().await?;
    eventually("payments-production deleted", Duration::from_secs(90), || async {
        Ok(fleet.apps.get_opt("payments-production").await?.is_none())
    })
    .await?;
    eventually(
        "payments-production's objects deleted from the spoke",
        Duration::from_secs(60),
        || async { Ok(!fleet.any_object(true, "payments", "payments-production").await?) },
    )
    .await?;
    assert_eq!(fleet.app_names().await?, ["checkout-production", "checkout-staging"]);
    assert!(fleet.any_object(true, "checkout", "checkout-production").await?);
    assert!(fleet.any_object(false, "checkout", "checkout-staging").await?);
    eprintln!("done in {:?}", started.elapsed());

    // Stop the controllers, then both control planes at once (each takes seconds to shut down).
    drop(_controllers);
    let (hub, spoke) = (
        tokio::task::spawn_blocking(move || drop(hub)),
        tokio::task::spawn_blocking(move || drop(spoke)),
    );
    let _ = tokio::join!(hub, spoke);
    Ok(())
}

/// The Applications an example ApplicationSet generates from `examples/` itself (the repository the
/// playground publishes), with `clusters` registered.
fn generate_example(name: &str, clusters: Vec<ClusterInfo>) -> anyhow::Result<Vec<Application>> {
    let url = "git://127.0.0.1:9418/examples.git";
    let set: ApplicationSet = serde_json::from_value(example_set(name, url)?)?;
    let mut inputs = Inputs {
        clusters,
        ..Default::default()
    };
    for source in git_sources(&set.spec)? {
        assert_eq!(
            source.repo_url, url,
            "every git generator reads the examples repository"
        );
        inputs.checkouts.insert(source, examples());
    }
    let apps = generate(&set, &inputs)?;
    for app in &apps {
        assert_eq!(app.spec.source.repo_url, url);
        let path = examples().join(&app.spec.source.path);
        assert!(
            path.is_dir(),
            "{}: source path {} exists in examples/",
            app.name_any(),
            path.display()
        );
    }
    Ok(apps)
}

#[test]
fn the_examples_generate_the_applications_the_readme_describes() -> anyhow::Result<()> {
    // services: one Application per services-root file, named <service>-<file name without .yaml>,
    // with the file's values.
    let root = examples().join("services-root/services");
    let mut expected = BTreeMap::new();
    for (path, text) in capstan_testkit::files_under(&root)? {
        let env = path.rsplit('/').next().unwrap_or_default().trim_end_matches(".yaml");
        let file: BTreeMap<String, String> = serde_saphyr::from_str(&text)?;
        let keys: Vec<&str> = file.keys().map(String::as_str).collect();
        assert_eq!(keys, ["cluster", "imageTag", "service", "targetRevision"], "{path}");
        assert!(
            path.starts_with(&format!("{}/", file["service"])),
            "{path} is under its service"
        );
        expected.insert(format!("{}-{env}", file["service"]), file);
    }
    let apps = generate_example("services", vec![])?;
    let names: Vec<String> = apps.iter().map(|a| a.name_any()).collect();
    assert_eq!(
        names,
        ["checkout-production", "checkout-staging", "payments-staging"],
        "the example services root"
    );
    assert_eq!(names, expected.keys().cloned().collect::<Vec<_>>(), "one per file");
    for app in &apps {
        let file = &expected[&app.name_any()];
        let spec = &app.spec;
        assert_eq!(app.metadata.namespace.as_deref(), Some(NS));
        assert_eq!(spec.destination.name, file["cluster"]);
        assert_eq!(
            spec.destination.name, "in-cluster",
            "the playground has one control plane"
        );
        assert_eq!(spec.destination.namespace, file["service"]);
        assert_eq!(spec.source.target_revision, file["targetRevision"]);
        assert_eq!(spec.source.path, "charts/service");
        let helm = spec.source.helm.as_ref().expect("helm source");
        let tag = helm
            .parameters
            .iter()
            .find(|p| p.name == "image.tag")
            .expect("image.tag");
        assert_eq!(tag.value, file["imageTag"]);
        assert!(tag.force_string, "a tag like 1.10 must stay a string");
        let automated = spec.sync_policy.as_ref().and_then(|p| p.automated.as_ref());
        assert!(
            automated.is_some_and(|a| a.prune),
            "{}: automated with prune",
            app.name_any()
        );
        assert!(app.finalizers().iter().any(|f| f == "capstan.dev/resources-finalizer"));
    }
    assert!(examples().join("charts/service/Chart.yaml").is_file());

    // platform: one guestbook per cluster labelled env — the playground's in-cluster (env=staging)
    // and, say, a registered production spoke; an unlabelled cluster gets none.
    let cluster = |name: &str, server: &str, env: Option<&str>| ClusterInfo {
        name: name.into(),
        server: server.into(),
        labels: env.map(|e| ("env".to_string(), e.to_string())).into_iter().collect(),
        ..Default::default()
    };
    let apps = generate_example(
        "platform",
        vec![
            cluster("in-cluster", "https://kubernetes.default.svc", Some("staging")),
            cluster("prod-eu", "https://prod-eu.example:6443", Some("production")),
            cluster("sandbox", "https://sandbox.example:6443", None),
        ],
    )?;
    let summary: Vec<(String, &str, &str, &str)> = apps
        .iter()
        .map(|a| {
            (
                a.name_any(),
                a.spec.destination.server.as_str(),
                a.spec.destination.namespace.as_str(),
                a.spec.source.path.as_str(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "guestbook-in-cluster".to_string(),
                "https://kubernetes.default.svc",
                "guestbook-staging",
                "guestbook"
            ),
            (
                "guestbook-prod-eu".to_string(),
                "https://prod-eu.example:6443",
                "guestbook-production",
                "guestbook"
            ),
        ]
    );
    // Without the playground's labelled in-cluster Secret, nothing matches.
    assert!(generate_example("platform", vec![])?.is_empty());
    Ok(())
}
