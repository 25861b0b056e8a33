//! The example Applications that `make playground` deploys (`examples/apps/*.yaml`) reach Synced and
//! Healthy against a real control plane, with the real `capstan controller` binary and the files of
//! `examples/` served from a real git server — exactly as `scripts/playground.sh` sets them up:
//! `capstan install`, the whole of `examples/` committed to branch `main` of a repository served over
//! `git://`, the metadata-only `in-cluster` Secret labelled `env=staging`, then every
//! `examples/apps/*.yaml` and then `examples/appsets/*.yaml` with the `REPO_URL` placeholder replaced
//! by that repository's URL, applied with `kubectl`, and `examples/images/*.yaml` pointed at a real
//! registry. So an example that no longer deploys fails here, not in front of a user. Then the
//! playground's image demo: `scripts/push-image.sh` pushes a new tag, the example ImageUpdater commits
//! it to checkout's staging file, staging deploys it, and `capstan promote` takes it to production.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use capstan_api::image_updater::{CHECK_ANNOTATION, ImageUpdater};
use capstan_api::{Application, PromotionPipeline};
use capstan_testkit::capstan::{health_of, sync_of, synced_healthy};
use capstan_testkit::charts::{ChartServer, ChartServerOptions, index_repository, run_helm};
use capstan_testkit::registry::{Registry, RegistryOptions};
use capstan_testkit::{GitServer, TestCluster, run_git};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::ResourceExt;
use kube::api::Api;

use common::{Controller, capstan, kubectl, text};

const NS: &str = "capstan";
/// The Applications of `examples/apps/`.
const TOP: [&str; 9] = [
    "guestbook",
    "helm-guestbook",
    "helm-repo-guestbook",
    "jsonnet-guestbook",
    "kustomize-guestbook",
    "kustomized-helm-guestbook",
    "multi-source-guestbook",
    "payments-secrets",
    "root",
];
/// The Applications of `examples/ordering/apps.yaml` (with its AppProject `ordering`): the API
/// depends on the database.
const ORDERED: [&str; 2] = ["ordering-database", "ordering-api"];
/// The Application of `examples/tenancy/apps.yaml`, syncing as its project's ServiceAccount.
const TENANT: [&str; 1] = ["team-a-web"];
/// The children `root` creates from `examples/app-of-apps/`.
const CHILDREN: [&str; 2] = ["platform", "frontend"];
/// What the ApplicationSets of `examples/appsets/` generate in the playground: `platform`'s guestbook
/// for the `env`-labelled in-cluster, and `services`' one Application per services-root file.
const GENERATED: [&str; 4] = [
    "guestbook-in-cluster",
    "checkout-staging",
    "checkout-production",
    "payments-staging",
];

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// The controller's log, for failure messages.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// One line per Application: name, sync, health, operation and first condition.
async fn summary(apps: &Api<Application>) -> String {
    match apps.list(&Default::default()).await {
        Ok(list) => list
            .items
            .iter()
            .map(|a| {
                let status = a.status.clone().unwrap_or_default();
                format!(
                    "{}: sync={:?} health={:?} ({}) operation={:?} condition={:?}",
                    a.name_any(),
                    sync_of(a),
                    health_of(a),
                    status.health.map(|h| h.message).unwrap_or_default(),
                    status.operation_state.map(|o| format!("{}: {}", o.phase, o.message)),
                    status.conditions.first().map(|c| format!("{}: {}", c.type_, c.message)),
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(err) => format!("listing Applications failed: {err}"),
    }
}

async fn deployment(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<Deployment> {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("Deployment {ns}/{name} exists"))
}

/// The Deployment's desired replicas, available replicas, image and Pod template labels.
fn facts(d: &Deployment) -> (i32, i32, String, std::collections::BTreeMap<String, String>) {
    let spec = d.spec.clone();
    let template = spec.template;
    let image = template
        .spec
        .as_ref()
        .and_then(|p| p.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    (
        spec.replicas.unwrap_or(1),
        d.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0),
        image,
        template.metadata.and_then(|m| m.labels).unwrap_or_default(),
    )
}

fn tracking_id(obj: &impl ResourceExt) -> Option<String> {
    obj.annotations().get("capstan.dev/tracking-id").cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_playground_example_applications_become_synced_and_healthy() -> anyhow::Result<()> {
    let started = Instant::now();
    // A plane of its own: the examples are deployed exactly as the playground deploys them, into
    // the `capstan` namespace their manifests (and root's children in Git) name, and to the fixed
    // destination namespaces they choose; on a shared plane they would have to be rewritten.
    let (cluster, git) = tokio::try_join!(TestCluster::start(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let client = cluster.client().await?;
    let out = capstan(&kc, &["install"]);
    assert!(out.status.success(), "capstan install: {}", text(&out));

    // examples/ as it is, published to branch main, as scripts/playground.sh does.
    let files = capstan_testkit::files_under(&examples())?;
    for wanted in [
        "apps/guestbook.yaml",
        "guestbook/preflight-job.yaml",
        "kustomize-guestbook/overlays/staging/kustomization.yaml",
        "helm-guestbook/Chart.yaml",
        "app-of-apps/Chart.yaml",
    ] {
        assert!(files.iter().any(|(p, _)| p == wanted), "examples/{wanted} exists");
    }
    git.create_repo("examples")?;
    let commit: Vec<(&str, Option<&str>)> = files.iter().map(|(p, t)| (p.as_str(), Some(t.as_str()))).collect();
    let sha = git.commit("examples", "main", &commit, "Publish examples/")?;
    let repo = git.git_url("examples");

    // examples/helm-guestbook packaged into a Helm repository served over HTTP on loopback, as the
    // playground does with `helm package` and `helm repo index`.
    let charts = ChartServer::start(ChartServerOptions::default()).await?;
    let helm_home = tempfile::tempdir()?;
    let chart_src = examples().join("helm-guestbook");
    run_helm(
        helm_home.path(),
        &[
            "package",
            &chart_src.to_string_lossy(),
            "--destination",
            &charts.dir().to_string_lossy(),
        ],
    )?;
    index_repository(charts.dir(), None)?;
    let helm_repository = charts.url();

    // The playground's metadata-only in-cluster Secret, then examples/apps/*.yaml with REPO_URL
    // replaced (sed "s|REPO_URL|$REPO_URL|g" | kubectl apply -f -).
    let work = tempfile::tempdir()?;
    let secret = work.path().join("cluster-in-cluster.yaml");
    std::fs::write(
        &secret,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cluster-in-cluster\n  namespace: capstan\n  labels:\n    capstan.dev/secret-type: cluster\n    env: staging\ntype: Opaque\nstringData:\n  name: in-cluster\n  server: https://kubernetes.default.svc\n",
    )?;
    let out = kubectl(&kc, &["apply", "-f", &secret.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));
    // The demo age key as the decryption Secret `demo-age`, as the playground creates it.
    let key = examples().join("secrets/demo.agekey");
    let out = kubectl(
        &kc,
        &[
            "-n",
            NS,
            "create",
            "secret",
            "generic",
            "demo-age",
            &format!("--from-file=age.agekey={}", key.display()),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl(
        &kc,
        &[
            "-n",
            NS,
            "label",
            "secret",
            "demo-age",
            "capstan.dev/secret-type=decryption",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    // OpenBao in dev mode with the payments service's value, registered as the store
    // `playground-openbao`, as the playground does.
    let bao = tokio::task::spawn_blocking(capstan_testkit::OpenBao::start).await??;
    bao.put_kv(
        "secret/payments",
        &[("WEATHER_API_KEY", "demo-weather-key-from-openbao")],
    )?;
    let out = kubectl(
        &kc,
        &[
            "-n",
            NS,
            "create",
            "secret",
            "generic",
            "playground-openbao",
            &format!("--from-literal=address={}", bao.address()),
            "--from-literal=auth=token",
            &format!("--from-literal=token={}", bao.root_token()),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl(
        &kc,
        &[
            "-n",
            NS,
            "label",
            "secret",
            "playground-openbao",
            "capstan.dev/secret-type=secret-store",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let mut applied = Vec::new();
    // Capstan's settings first, as the playground applies them (examples/settings/: health rules).
    let out = kubectl(&kc, &["apply", "-f", &examples().join("settings").to_string_lossy()]);
    assert!(out.status.success(), "kubectl apply examples/settings/: {}", text(&out));
    // Then the example Policies (examples/policies/): they must not refuse or warn about any
    // example in the playground's staging cluster (every Application is asserted below to have no
    // condition), and they must compile.
    let out = kubectl(&kc, &["apply", "-f", &examples().join("policies").to_string_lossy()]);
    assert!(out.status.success(), "kubectl apply examples/policies/: {}", text(&out));
    // And the example notification channels (suspended: nothing to send to here), which the API
    // server must accept as they are written.
    let out = kubectl(
        &kc,
        &["apply", "-f", &examples().join("notifications").to_string_lossy()],
    );
    assert!(
        out.status.success(),
        "kubectl apply examples/notifications/: {}",
        text(&out)
    );
    for (path, contents) in files
        .iter()
        .filter(|(p, _)| p.starts_with("apps/") && p.ends_with(".yaml"))
    {
        assert!(
            contents.contains("REPO_URL") || contents.contains("HELM_REPOSITORY"),
            "examples/{path} names the REPO_URL or HELM_REPOSITORY placeholder"
        );
        let file = work.path().join(path.replace('/', "-"));
        let contents = contents.replace("HELM_REPOSITORY", &helm_repository);
        std::fs::write(&file, contents.replace("REPO_URL", &repo))?;
        let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
        assert!(out.status.success(), "kubectl apply examples/{path}: {}", text(&out));
        applied.push(path.trim_start_matches("apps/").trim_end_matches(".yaml").to_string());
    }
    assert_eq!(
        applied, TOP,
        "examples/apps/ holds the nine Applications the README describes"
    );
    // Then examples/ordering/apps.yaml (an AppProject with a sync window, two dependent Applications).
    let ordering = std::fs::read_to_string(examples().join("ordering/apps.yaml"))?;
    let file = work.path().join("ordering.yaml");
    std::fs::write(&file, ordering.replace("REPO_URL", &repo))?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(
        out.status.success(),
        "kubectl apply examples/ordering/apps.yaml: {}",
        text(&out)
    );
    // Then examples/tenancy/apps.yaml (a team's namespace, ServiceAccount and Role, its AppProject
    // naming the account, its Application).
    let tenancy = std::fs::read_to_string(examples().join("tenancy/apps.yaml"))?;
    let file = work.path().join("tenancy.yaml");
    std::fs::write(&file, tenancy.replace("REPO_URL", &repo))?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(
        out.status.success(),
        "kubectl apply examples/tenancy/apps.yaml: {}",
        text(&out)
    );
    // Then examples/appsets/*.yaml, joined into one kubectl apply as the playground does.
    let sets: String = files
        .iter()
        .filter(|(p, _)| p.starts_with("appsets/") && p.ends_with(".yaml"))
        .map(|(_, contents)| format!("---\n{}", contents.replace("REPO_URL", &repo)))
        .collect();
    let file = work.path().join("appsets.yaml");
    std::fs::write(&file, sets)?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "kubectl apply examples/appsets/: {}", text(&out));

    // The playground's registry holding checkout's current tag (pushed with scripts/push-image.sh),
    // its repository Secret (plain HTTP), and examples/images/*.yaml with REGISTRY and REPO_URL replaced.
    let registry = Registry::start(RegistryOptions::default()).await?;
    let registry_host = registry.host();
    common::push_image(&format!("{registry_host}/services/checkout:1.4.2"));
    let file = work.path().join("repo-playground-registry.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: repo-playground-registry\n  namespace: capstan\n  labels:\n    capstan.dev/secret-type: repository\ntype: Opaque\nstringData:\n  url: oci://{registry_host}\n  insecureOCIForceHttp: \"true\"\n"
        ),
    )?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));
    let updaters: String = files
        .iter()
        .filter(|(p, _)| p.starts_with("images/") && p.ends_with(".yaml"))
        .map(|(_, contents)| {
            format!(
                "---\n{}",
                contents.replace("REGISTRY", &registry_host).replace("REPO_URL", &repo)
            )
        })
        .collect();
    assert!(
        updaters.contains("kind: ImageUpdater"),
        "examples/images/ holds ImageUpdaters"
    );
    let file = work.path().join("images.yaml");
    std::fs::write(&file, updaters)?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "kubectl apply examples/images/: {}", text(&out));

    // The controller, as the playground runs it (without the HTTP server, which is not under test).
    let cache = work.path().join("cache");
    let log = work.path().join("controller.log");
    let _controller = Controller(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["controller", "--kubeconfig", &kc, "--log", "info", "--cache-dir"])
            .arg(&cache)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?,
    );

    // Every Application, the children of `root` included, ends Synced and Healthy at the commit.
    let apps: Api<Application> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(75);
    loop {
        let list = apps.list(&Default::default()).await?;
        let done = TOP
            .iter()
            .chain(&CHILDREN)
            .chain(&GENERATED)
            .chain(&ORDERED)
            .chain(&TENANT)
            .all(|name| list.items.iter().any(|a| a.name_any() == *name && synced_healthy(a)));
        if done {
            break;
        }
        if Instant::now() > deadline {
            panic!(
                "timed out after {:?} waiting for every example Application to be Synced and Healthy:\n{}\ncontroller log:\n{}",
                started.elapsed(),
                summary(&apps).await,
                log_tail(&log)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("every example Synced and Healthy {:?} after start", started.elapsed());

    let mut names: Vec<String> = apps
        .list(&Default::default())
        .await?
        .items
        .iter()
        .map(|a| a.name_any())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "checkout-production",
            "checkout-staging",
            "frontend",
            "guestbook",
            "guestbook-in-cluster",
            "helm-guestbook",
            "helm-repo-guestbook",
            "jsonnet-guestbook",
            "kustomize-guestbook",
            "kustomized-helm-guestbook",
            "multi-source-guestbook",
            "ordering-api",
            "ordering-database",
            "payments-secrets",
            "payments-staging",
            "platform",
            "root",
            "team-a-web"
        ],
        "the nine entry points, the ordering example's two, the tenancy example's one, root's two children and the ApplicationSets' four, nothing else"
    );
    // ordering-api depends on ordering-database: its first sync started once the database's had
    // finished (both to the millisecond, as the controller records them).
    let op_of = |app: &Application| app.status.clone().and_then(|s| s.operation_state).unwrap_or_default();
    let database = op_of(&apps.get("ordering-database").await?);
    let api = op_of(&apps.get("ordering-api").await?);
    let database_finished = database.finished_at.clone().unwrap_or_default();
    assert!(
        !database_finished.is_empty() && database_finished <= api.started_at,
        "ordering-api started at {} before ordering-database finished at {database_finished}",
        api.started_at
    );
    for name in TOP.iter().chain(&CHILDREN).chain(&GENERATED) {
        let app = apps.get(name).await?;
        let status = app.status.clone().unwrap_or_default();
        // A multi-source Application's revision names each source's commit; a chart's is its version.
        let expected = if app.spec.source.is_chart() {
            "0.1.0".to_string()
        } else {
            vec![sha.as_str(); app.spec.sources().len()].join(",")
        };
        assert_eq!(
            status.sync.map(|s| s.revision),
            Some(expected),
            "{name} at the published commit"
        );
        for source in app.spec.sources() {
            let published = if source.is_chart() { &helm_repository } else { &repo };
            assert_eq!(&source.repo_url, published, "{name} reads the published repository");
        }
        assert!(
            status.conditions.is_empty(),
            "{name} has no conditions: {:?}",
            status.conditions
        );
        let op = status.operation_state.expect("an automated sync ran");
        assert_eq!(op.phase, "Succeeded", "{name}: {}", op.message);
    }
    for policy in ["production-workloads", "image-tags"] {
        let out = kubectl(
            &kc,
            &[
                "-n",
                NS,
                "get",
                "policy",
                policy,
                "-o",
                "jsonpath={.status.conditions[0].status}",
            ],
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "True",
            "Policy {policy} compiled: {}",
            text(&out)
        );
    }

    // guestbook: the PreSync hook ran first and was deleted once it succeeded; then the ConfigMap
    // (wave -1), the Deployment (wave 0, both replicas available) and the Service (wave 1).
    common::apps::assert_hook_ran(&client, NS).await?;
    let app = apps.get("guestbook").await?;
    let op = app.status.and_then(|s| s.operation_state).unwrap_or_default();
    // The operation's results are in the order they were applied.
    let order: Vec<(&str, i64, &str)> = op
        .resources
        .iter()
        .filter(|r| r.kind != "Namespace")
        .map(|r| (r.sync_phase.as_str(), r.sync_wave, r.kind.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            ("PreSync", 0, "Job"),
            ("Sync", -1, "ConfigMap"),
            ("Sync", 0, "Deployment"),
            ("Sync", 1, "Service")
        ],
        "{:?}",
        op.resources
    );
    assert!(
        Api::<Job>::namespaced(client.clone(), "guestbook")
            .get_opt("guestbook-preflight")
            .await?
            .is_none(),
        "the succeeded hook is deleted (hook-delete-policy: HookSucceeded)"
    );
    let config = Api::<ConfigMap>::namespaced(client.clone(), "guestbook")
        .get("guestbook-config")
        .await?;
    assert_eq!(tracking_id(&config).as_deref(), Some("capstan/guestbook"));
    let d = deployment(&client, "guestbook", "guestbook-ui").await?;
    assert_eq!(tracking_id(&d).as_deref(), Some("capstan/guestbook"));
    let (replicas, available, image, _) = facts(&d);
    assert_eq!((replicas, available), (2, 2), "guestbook-ui: both replicas available");
    assert_eq!(image, "gcr.io/heptio-images/ks-guestbook-demo:0.2");
    let service = Api::<Service>::namespaced(client.clone(), "guestbook")
        .get("guestbook-ui")
        .await?;
    assert_eq!(tracking_id(&service).as_deref(), Some("capstan/guestbook"));

    // kustomize-guestbook: the staging overlay (prefix, label on Pods, image tag, 3 replicas).
    let d = deployment(&client, "kustomize-guestbook", "staging-guestbook-ui").await?;
    let (replicas, available, image, labels) = facts(&d);
    assert_eq!(
        (replicas, available),
        (3, 3),
        "the overlay's patch: 3 replicas, all available"
    );
    assert_eq!(image, "gcr.io/heptio-images/ks-guestbook-demo:0.2");
    assert_eq!(labels.get("environment").map(String::as_str), Some("staging"));
    assert!(
        Api::<Service>::namespaced(client.clone(), "kustomize-guestbook")
            .get_opt("staging-guestbook-ui")
            .await?
            .is_some(),
        "the overlay's Service"
    );

    // kustomized-helm-guestbook: the chart inflated by Kustomize (valuesInline: 1 replica), then
    // Kustomize's prefix, label and JSON patch (Service port 8080) on its output.
    let d = deployment(&client, "kustomized-helm-guestbook", "k-kustomized-guestbook-ui").await?;
    let (replicas, available, _, _) = facts(&d);
    assert_eq!((replicas, available), (1, 1), "valuesInline: replicaCount 1");
    assert_eq!(
        d.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("rendered-by"))
            .map(String::as_str),
        Some("kustomize")
    );
    let service = Api::<Service>::namespaced(client.clone(), "kustomized-helm-guestbook")
        .get("k-kustomized-guestbook-ui")
        .await?;
    let ports: Vec<i32> = service
        .spec
        .and_then(|s| s.ports)
        .unwrap_or_default()
        .iter()
        .map(|p| p.port)
        .collect();
    assert_eq!(ports, [8080], "Kustomize's patch on the chart's Service");

    // payments-secrets: the SOPS-encrypted value file decrypted at render, in the Secret the chart
    // makes; the repository holds only ciphertext.
    let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), "payments-secrets")
        .get("payments-secrets-secrets")
        .await?;
    let data = secret.data.unwrap_or_default();
    assert_eq!(
        data.get("DATABASE_PASSWORD").map(|v| v.0.as_slice()),
        Some(b"demo-db-password-from-sops".as_slice())
    );
    let vault = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), "payments-secrets")
        .get("payments-secrets-vault")
        .await?;
    assert_eq!(
        vault
            .data
            .unwrap_or_default()
            .get("WEATHER_API_KEY")
            .map(|v| v.0.as_slice()),
        Some(b"demo-weather-key-from-openbao".as_slice()),
        "the value read from OpenBao when Capstan applied"
    );
    let published = files
        .iter()
        .find(|(p, _)| p == "services-root/secrets/payments.sops.yaml")
        .map(|(_, t)| t.as_str())
        .unwrap_or_default();
    assert!(
        published.contains("ENC[AES256_GCM") && !published.contains("demo-db-password-from-sops"),
        "the value file in Git is encrypted"
    );

    // helm-guestbook: values-production.yaml over values.yaml, release name = Application name.
    let d = deployment(&client, "helm-guestbook", "helm-guestbook").await?;
    let (replicas, available, image, labels) = facts(&d);
    assert_eq!((replicas, available), (3, 3), "values-production.yaml: replicaCount 3");
    assert_eq!(image, "gcr.io/heptio-images/ks-guestbook-demo:0.2");
    assert_eq!(labels.get("environment").map(String::as_str), Some("production"));
    assert_eq!(
        labels.get("app.kubernetes.io/instance").map(String::as_str),
        Some("helm-guestbook")
    );

    // multi-source-guestbook: the same chart, with values from the `config` source's file.
    let d = deployment(
        &client,
        "multi-source-guestbook",
        "multi-source-guestbook-helm-guestbook",
    )
    .await?;
    let (replicas, available, image, labels) = facts(&d);
    assert_eq!(
        (replicas, available),
        (2, 2),
        "$config/…/guestbook-values.yaml: replicaCount 2"
    );
    assert_eq!(image, "gcr.io/heptio-images/ks-guestbook-demo:0.3-rc");
    assert_eq!(labels.get("environment").map(String::as_str), Some("staging"));

    // helm-repo-guestbook: the chart from the Helm repository, with the Application's values.
    let d = deployment(&client, "helm-repo-guestbook", "helm-repo-guestbook-helm-guestbook").await?;
    let (replicas, available, _, labels) = facts(&d);
    assert_eq!((replicas, available), (1, 1), "valuesObject: replicaCount 1");
    assert_eq!(labels.get("source").map(String::as_str), Some("helm-repository"));

    // jsonnet-guestbook: the Jsonnet function's top-level arguments from the Application.
    let d = deployment(&client, "jsonnet-guestbook", "jsonnet-guestbook-ui").await?;
    let (replicas, available, image, _) = facts(&d);
    assert_eq!((replicas, available), (2, 2), "the replicas TLA (code)");
    assert_eq!(image, "quay.io/argoprojlabs/argocd-e2e-container:0.2");
    let services: Api<Service> = Api::namespaced(client.clone(), "jsonnet-guestbook");
    let svc = services.get("jsonnet-guestbook-ui").await?;
    assert_eq!(
        svc.spec.and_then(|s| s.type_).as_deref(),
        Some("ClusterIP"),
        "the type TLA (string)"
    );

    // root: its chart's objects are the Applications platform (wave 0) and frontend (wave 1),
    // tracked by root and pointed at the repository through helm.parameters.
    let root = apps.get("root").await?;
    let op = root.status.and_then(|s| s.operation_state).unwrap_or_default();
    for (child, wave) in [("platform", 0), ("frontend", 1)] {
        let app = apps.get(child).await?;
        assert_eq!(
            tracking_id(&app).as_deref(),
            Some("capstan/root"),
            "{child} belongs to root"
        );
        assert_eq!(app.spec.source.target_revision, "main");
        let result = op
            .resources
            .iter()
            .find(|r| r.kind == "Application" && r.name == child)
            .unwrap_or_else(|| panic!("root's sync applied {child}: {:?}", op.resources));
        assert_eq!(
            (result.sync_wave, result.status.as_str()),
            (wave, "Synced"),
            "{child}: {result:?}"
        );
    }
    // frontend (wave 1) was created only once platform (wave 0) had synced: platform's first sync
    // finished no later than frontend's creation (both to the second).
    let platform = apps.get("platform").await?;
    let frontend = apps.get("frontend").await?;
    let platform_deployed = platform
        .status
        .as_ref()
        .and_then(|s| s.history.first())
        .map(|h| h.deployed_at.clone())
        .expect("platform has a sync in its history");
    let frontend_created = frontend
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .expect("frontend has a creation time");
    assert!(
        platform_deployed <= frontend_created,
        "frontend (wave 1) created at {frontend_created}, before platform (wave 0) finished syncing at {platform_deployed}"
    );
    let (replicas, available, _, _) = facts(&deployment(&client, "platform-guestbook", "guestbook-ui").await?);
    assert_eq!((replicas, available), (2, 2), "platform deploys the guestbook");
    let d = deployment(&client, "frontend", "staging-guestbook-ui").await?;
    assert_eq!(tracking_id(&d).as_deref(), Some("capstan/frontend"));
    let (replicas, available, _, _) = facts(&d);
    assert_eq!((replicas, available), (3, 3), "frontend deploys the staging overlay");

    // The ApplicationSets: platform's guestbook in namespace guestbook-<env label of in-cluster>, and
    // one Deployment per services-root file, running that file's imageTag.
    let (replicas, available, _, _) = facts(&deployment(&client, "guestbook-staging", "guestbook-ui").await?);
    assert_eq!(
        (replicas, available),
        (2, 2),
        "guestbook-in-cluster deploys the guestbook"
    );
    for (ns, name, tag) in [
        ("checkout", "checkout-staging", "1.4.2"),
        ("checkout", "checkout-production", "1.4.1"),
        ("payments", "payments-staging", "0.9.0"),
    ] {
        let d = deployment(&client, ns, name).await?;
        assert_eq!(tracking_id(&d).as_deref(), Some(format!("capstan/{name}").as_str()));
        let (replicas, available, image, _) = facts(&d);
        assert_eq!((replicas, available), (1, 1), "{name} available");
        assert_eq!(image, format!("registry.example/services/app:{tag}"), "{name}");
    }

    custom_health(&kc, &apps, &log).await?;
    image_flow(&client, &kc, &git, &sha, &registry_host, &log).await?;
    eprintln!("done in {:?}", started.elapsed());
    Ok(())
}

/// Wait for the checkout service's Application `name` to be Synced and Healthy, its Deployment
/// running `tag`.
async fn deployed(
    apps: &Api<Application>,
    client: &kube::Client,
    name: &str,
    tag: &str,
    log: &Path,
) -> anyhow::Result<Application> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let app = apps.get(name).await?;
        let image = match deployment(client, "checkout", name).await {
            Ok(d) => facts(&d).2,
            Err(_) => String::new(),
        };
        if synced_healthy(&app) && image == format!("registry.example/services/app:{tag}") {
            return Ok(app);
        }
        assert!(
            Instant::now() < deadline,
            "{name} Synced and Healthy at {tag}: {}/{} running {image:?}\n{}",
            sync_of(&app),
            health_of(&app),
            log_tail(log)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The playground's demo of seed 004 (examples/images/checkout-staging.yaml, the PromotionPipeline of
/// examples/appsets/services-pipeline.yaml): the updater looked and found staging current; a new tag
/// pushed with scripts/push-image.sh is committed to checkout's staging file and deployed by
/// checkout-staging; `capstan promote checkout --from staging --to production` deploys it to production.
async fn image_flow(
    client: &kube::Client,
    kc: &str,
    git: &GitServer,
    published: &str,
    registry_host: &str,
    log: &Path,
) -> anyhow::Result<()> {
    let bare = git.repo_path("examples");
    let head = || -> String {
        run_git(&bare, &["rev-parse", "refs/heads/main"])
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let updaters: Api<ImageUpdater> = Api::namespaced(client.clone(), NS);
    let apps: Api<Application> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(60);
    // The updater asked the registry (latestTag, lastChecked) and found 1.4.2, which staging runs.
    loop {
        let status = updaters.get("checkout-staging").await?.status.unwrap_or_default();
        if status.latest_tag == "1.4.2" && !status.last_checked.is_empty() {
            assert!(status.error.is_empty(), "no error: {}", status.error);
            assert!(status.last_commit.is_empty(), "nothing to commit: {status:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the example ImageUpdater checked the registry: {status:?}\n{}",
            log_tail(log)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(head(), published, "no commit while staging is current");

    // A new tag, and what the registry's notification does (the playground's registry posts to
    // /api/webhook/registry, which sets this annotation; tested in crates/imageupdate).
    common::push_image(&format!("{registry_host}/services/checkout:1.5.0"));
    let out = kubectl(
        kc,
        &[
            "-n",
            NS,
            "annotate",
            "--overwrite",
            "imageupdater",
            "checkout-staging",
            &format!("{CHECK_ANNOTATION}=pushed-1.5.0"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let staging = deployed(&apps, client, "checkout-staging", "1.5.0", log).await?;
    let update = head();
    assert_ne!(update, published, "the updater committed");
    let message = run_git(&bare, &["log", "-1", "--format=%s", &update])?;
    assert!(
        message.contains(&format!("{registry_host}/services/checkout")) && message.contains("1.4.2 → 1.5.0"),
        "the commit names the image old → new: {message}"
    );
    let staging_file = run_git(
        &bare,
        &[
            "show",
            &format!("{update}:services-root/services/checkout/staging.yaml"),
        ],
    )?;
    assert!(
        staging_file.contains("imageTag: \"1.5.0\"") && staging_file.starts_with("# Staging follows"),
        "imageTag edited in place, the comment kept:\n{staging_file}"
    );
    assert_eq!(
        staging.status.and_then(|s| s.sync).map(|s| s.revision),
        Some(update.clone()),
        "checkout-staging at the update's commit"
    );
    let production = run_git(
        &bare,
        &[
            "show",
            &format!("{update}:services-root/services/checkout/production.yaml"),
        ],
    )?;
    assert!(
        production.contains("imageTag: \"1.4.1\""),
        "production untouched:\n{production}"
    );

    // A promotion checks that staging is Synced and Healthy when it is asked for. Once, on v1.20,
    // staging was Healthy for the wait above and Progressing for the promotion's check a moment
    // later (cause not found yet): ask once it is Healthy again.
    deployed(&apps, client, "checkout-staging", "1.5.0", log).await?;

    // The dry run first: the change and the diff, nothing committed.
    let out = common::capstan(
        kc,
        &[
            "promote",
            "checkout",
            "--from",
            "staging",
            "--to",
            "production",
            "--dry-run",
        ],
    );
    assert!(out.status.success(), "capstan promote --dry-run: {}", text(&out));
    let preview = text(&out);
    for wanted in [
        "checks: passed",
        "imageTag: 1.4.1 → 1.5.0",
        "-imageTag: \"1.4.1\"",
        "+imageTag: \"1.5.0\"",
        "dry run: nothing committed",
    ] {
        assert!(preview.contains(wanted), "{wanted:?} in:\n{preview}");
    }
    assert_eq!(head(), update, "a dry run commits nothing");
    // The promotion, with the CLI as the playground's instructions run it.
    let out = common::capstan(kc, &["promote", "checkout", "--from", "staging", "--to", "production"]);
    assert!(out.status.success(), "capstan promote: {}", text(&out));
    assert!(text(&out).contains("imageTag: 1.4.1 → 1.5.0"), "{}", text(&out));
    deployed(&apps, client, "checkout-production", "1.5.0", log).await?;
    let promoted = head();
    let message = run_git(&bare, &["log", "-1", "--format=%s", &promoted])?;
    assert_eq!(
        message.trim(),
        "Promote checkout staging → production: imageTag 1.4.1 → 1.5.0"
    );
    let history = Api::<PromotionPipeline>::namespaced(client.clone(), NS)
        .get("services")
        .await?
        .status
        .unwrap_or_default()
        .history;
    assert_eq!(
        history.first().map(|r| (r.service.as_str(), r.commit.as_str())),
        Some(("checkout", promoted.as_str())),
        "the promotion is in the pipeline's history"
    );
    Ok(())
}

/// examples/settings/capstan-cm.yaml's Lua rule, as examples/README.md describes it: annotating the
/// guestbook's ConfigMap makes the Application Degraded with the rule's message, removing the
/// annotation makes it Healthy again.
async fn custom_health(kc: &str, apps: &Api<Application>, log: &Path) -> anyhow::Result<()> {
    let annotate = |value: &str| {
        let out = kubectl(
            kc,
            &[
                "-n",
                "guestbook",
                "annotate",
                "--overwrite",
                "configmap",
                "guestbook-config",
                value,
            ],
        );
        assert!(out.status.success(), "kubectl annotate: {}", text(&out));
    };
    let wait = |what: &'static str, want: fn(&Application) -> bool| async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let app = apps.get("guestbook").await?;
            if want(&app) {
                return anyhow::Ok(app);
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for guestbook {what}: {}\ncontroller log:\n{}",
                    health_of(&app),
                    log_tail(log)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    annotate("example.capstan.dev/health=Degraded");
    let app = wait("Degraded by the example Lua rule", |a| health_of(a) == "Degraded").await?;
    let message = app.status.and_then(|s| s.health).map(|h| h.message).unwrap_or_default();
    assert!(
        message.contains("set by the example.capstan.dev/health annotation"),
        "{message}"
    );
    annotate("example.capstan.dev/health-");
    wait("Healthy again", synced_healthy).await?;
    Ok(())
}
