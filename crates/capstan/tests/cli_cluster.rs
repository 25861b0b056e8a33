//! Fleets through the binary: a hub running `capstan controller` and spokes registered with
//! `capstan cluster add`, each a real local control plane. Applications deploy to a spoke by name
//! or by server; `cluster list` shows connection state; a spoke that goes away marks its
//! Applications Unknown without slowing down the others.

mod common;

use std::time::{Duration, Instant};

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster};

use common::modes::{Cli, Mode, same_in_both};
use common::{capstan, capstan_in, controller_with_server, kubectl, text, until};

const MANIFESTS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx}]}\n";

fn app_json(hub: &str, ns: &str, name: &str) -> serde_json::Value {
    let out = capstan_in(hub, ns, &["app", "get", name, "-o", "json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

fn apply(hub: &str, dir: &std::path::Path, name: &str, yaml: &str) {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, yaml).expect("write manifest");
    let out = kubectl(hub, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));
}

fn application(ns: &str, name: &str, repo: &str, destination: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{repo}', targetRevision: main, path: app}}\n  destination: {{{destination}, namespace: cli-cluster}}\n  syncPolicy: {{automated: {{prune: true, selfHeal: true}}, syncOptions: [CreateNamespace=true]}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn applications_deploy_to_registered_clusters_and_survive_a_dead_one() -> anyhow::Result<()> {
    // The hub is the run's shared plane, with Capstan in a namespace of this test's own. The
    // spokes are private: spoke-a ends with Capstan's service account revoked (and the test checks
    // it is gone), spoke-b is stopped halfway.
    let (hub, spoke_a, spoke_b) = tokio::try_join!(TestCluster::shared(), TestCluster::start(), TestCluster::start())?;
    let git = GitServer::start().await?;
    let hub_kc = hub.kubeconfig().to_string_lossy().to_string();
    let a_kc = spoke_a.kubeconfig().to_string_lossy().to_string();
    let b_kc = spoke_b.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&hub_kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));

    // Registration: a service account on the spoke (default) or the kubeconfig's own credentials.
    let out = capstan_in(
        &hub_kc,
        &ns,
        &[
            "cluster",
            "add",
            "spoke-a",
            "--kubeconfig",
            &a_kc,
            "--label",
            "env=staging",
        ],
    );
    assert!(out.status.success(), "cluster add: {}", text(&out));
    let release = capstan_playground::KubeVersion::selected()?.tag;
    assert!(text(&out).contains(&release), "{}", text(&out));
    let sa = kubectl(
        &a_kc,
        &["-n", "kube-system", "get", "serviceaccount", "capstan-manager"],
    );
    assert!(
        sa.status.success(),
        "service account created on the spoke: {}",
        text(&sa)
    );
    let out = capstan_in(
        &hub_kc,
        &ns,
        &[
            "cluster",
            "add",
            "spoke-b",
            "--kubeconfig",
            &b_kc,
            "--use-kubeconfig-credentials",
        ],
    );
    assert!(out.status.success(), "cluster add: {}", text(&out));
    let again = capstan_in(&hub_kc, &ns, &["cluster", "add", "spoke-a", "--kubeconfig", &a_kc]);
    assert!(!again.status.success(), "a second add of the same name is refused");
    assert!(text(&again).contains("--upsert"), "{}", text(&again));
    let bad = capstan_in(
        &hub_kc,
        &ns,
        &["cluster", "add", "nowhere", "--kubeconfig", "/nonexistent/kubeconfig"],
    );
    assert!(!bad.status.success());
    assert!(text(&bad).contains("/nonexistent/kubeconfig"), "{}", text(&bad));

    let cache = tempfile::tempdir()?;
    let (_controller, base, _) = controller_with_server(&hub_kc, cache.path(), &["-n", &ns])?;
    let (kube_cli, server_cli) = (
        Cli::new(&hub_kc, &ns, Mode::Kubeconfig, &base),
        Cli::new(&hub_kc, &ns, Mode::Server, &base),
    );
    git.create_repo("fleet")?;
    git.commit("fleet", "main", &[("app/all.yaml", Some(MANIFESTS))], "v1")?;
    let repo = git.git_url("fleet");
    apply(
        &hub_kc,
        cache.path(),
        "on-a",
        &application(&ns, "on-a", &repo, "name: spoke-a"),
    );
    apply(
        &hub_kc,
        cache.path(),
        "on-b",
        &application(&ns, "on-b", &repo, &format!("server: '{}'", spoke_b.server())),
    );
    apply(
        &hub_kc,
        cache.path(),
        "local",
        &application(&ns, "local", &repo, "name: in-cluster"),
    );
    apply(
        &hub_kc,
        cache.path(),
        "unknown",
        &application(&ns, "unknown", &repo, "name: nowhere"),
    );

    for name in ["on-a", "on-b", "local"] {
        until(&format!("{name} Synced and Healthy"), Duration::from_secs(120), || {
            let app = app_json(&hub_kc, &ns, name);
            app["status"]["sync"]["status"] == "Synced" && app["status"]["health"]["status"] == "Healthy"
        });
    }
    // Each Application's objects are on its own cluster only.
    let on_a = kubectl(
        &a_kc,
        &["-n", "cli-cluster", "get", "configmap", "settings", "-o", "json"],
    );
    assert!(on_a.status.success(), "{}", text(&on_a));
    let cm: serde_json::Value = serde_json::from_slice(&on_a.stdout)?;
    assert_eq!(
        cm["metadata"]["annotations"]["capstan.dev/tracking-id"],
        format!("{ns}/on-a")
    );
    let dep = kubectl(
        &b_kc,
        &[
            "-n",
            "cli-cluster",
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.availableReplicas}",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&dep.stdout), "1", "{}", text(&dep));
    let on_hub = kubectl(
        &hub_kc,
        &["-n", "cli-cluster", "get", "configmap", "settings", "-o", "json"],
    );
    let cm: serde_json::Value = serde_json::from_slice(&on_hub.stdout)?;
    assert_eq!(
        cm["metadata"]["annotations"]["capstan.dev/tracking-id"],
        format!("{ns}/local")
    );
    let unknown = app_json(&hub_kc, &ns, "unknown");
    let conditions = unknown["status"]["conditions"].to_string();
    assert!(
        conditions.contains("InvalidSpecError") && conditions.contains("not registered"),
        "{unknown}"
    );

    // Self-heal works through the spoke's own watches.
    let out = kubectl(
        &a_kc,
        &["-n", "cli-cluster", "scale", "deployment", "web", "--replicas=3"],
    );
    assert!(out.status.success(), "{}", text(&out));
    until("drift on spoke-a healed", Duration::from_secs(30), || {
        let out = kubectl(
            &a_kc,
            &[
                "-n",
                "cli-cluster",
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.spec.replicas}",
            ],
        );
        String::from_utf8_lossy(&out.stdout) == "1"
    });

    // cluster list / get / label.
    until("connection state recorded", Duration::from_secs(30), || {
        let list = text(&capstan_in(&hub_kc, &ns, &["cluster", "list"]));
        list.lines()
            .any(|l| l.starts_with("spoke-a") && l.contains("Successful") && l.contains(&release))
    });
    let list = text(&capstan_in(&hub_kc, &ns, &["cluster", "list"]));
    assert!(list.contains("in-cluster") && list.contains("env=staging"), "{list}");
    let out = capstan_in(
        &hub_kc,
        &ns,
        &["cluster", "label", "spoke-b", "env=production", "tier=1"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = capstan_in(&hub_kc, &ns, &["cluster", "label", "spoke-b", "tier-"]);
    assert!(out.status.success(), "{}", text(&out));
    let get = capstan_in(&hub_kc, &ns, &["cluster", "get", "spoke-b", "-o", "json"]);
    let got: serde_json::Value = serde_json::from_slice(&get.stdout)?;
    assert_eq!(got["labels"], serde_json::json!({"env": "production"}));
    assert!(
        !text(&get).contains("bearerToken") && !text(&get).contains("keyData"),
        "no credentials shown"
    );
    // Logged in to the server, `cluster list` and `get` print the same; changing clusters needs
    // the hub's kubeconfig and says so.
    for args in [
        &["cluster", "list"][..],
        &["cluster", "list", "-o", "json"],
        &["cluster", "list", "-o", "yaml"],
        &["cluster", "get", "spoke-b", "-o", "json"],
        &["cluster", "get", "spoke-b"],
        &["cluster", "get", "in-cluster"],
        &["cluster", "get", "nope"],
    ] {
        same_in_both(&kube_cli, &server_cli, args);
    }
    let out = server_cli.run(&["cluster", "label", "spoke-b", "tier=2"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("capstan context --none"), "{}", text(&out));

    // Spoke B goes away: its Application turns Unknown with the reason; the others carry on.
    let b_server = spoke_b.server().to_string();
    drop(spoke_b);
    git.commit(
        "fleet",
        "main",
        &[("app/all.yaml", Some(&MANIFESTS.replace("blue", "green")))],
        "v2",
    )?;
    for name in ["on-a", "local", "on-b"] {
        let out = kubectl(
            &hub_kc,
            &[
                "-n",
                &ns,
                "annotate",
                "--overwrite",
                "application",
                name,
                "capstan.dev/refresh=normal",
            ],
        );
        assert!(out.status.success(), "{}", text(&out));
    }
    let started = Instant::now();
    until("spoke-a and in-cluster to get v2", Duration::from_secs(60), || {
        let out = kubectl(
            &a_kc,
            &[
                "-n",
                "cli-cluster",
                "get",
                "configmap",
                "settings",
                "-o",
                "jsonpath={.data.color}",
            ],
        );
        let hub_out = kubectl(
            &hub_kc,
            &[
                "-n",
                "cli-cluster",
                "get",
                "configmap",
                "settings",
                "-o",
                "jsonpath={.data.color}",
            ],
        );
        String::from_utf8_lossy(&out.stdout) == "green" && String::from_utf8_lossy(&hub_out.stdout) == "green"
    });
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "a dead cluster slowed the others down: {:?}",
        started.elapsed()
    );
    until("on-b Unknown with the reason", Duration::from_secs(60), || {
        let app = app_json(&hub_kc, &ns, "on-b");
        app["status"]["health"]["status"] == "Unknown"
            && app["status"]["health"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("spoke-b") && m.contains("unreachable"))
    });
    until("cluster list shows spoke-b failed", Duration::from_secs(30), || {
        let list = text(&capstan_in(&hub_kc, &ns, &["cluster", "list"]));
        list.lines()
            .any(|l| l.starts_with("spoke-b") && l.contains(&b_server) && l.contains("Failed"))
    });

    // Removing a registration leaves the spoke's objects alone and says so on the Application.
    let out = capstan_in(&hub_kc, &ns, &["cluster", "rm", "spoke-a", "--revoke-with", &a_kc]);
    assert!(out.status.success(), "{}", text(&out));
    let sa = kubectl(
        &a_kc,
        &["-n", "kube-system", "get", "serviceaccount", "capstan-manager"],
    );
    assert!(
        !sa.status.success(),
        "--revoke-with deletes Capstan's service account on the cluster"
    );
    until("on-a reports its cluster is gone", Duration::from_secs(30), || {
        app_json(&hub_kc, &ns, "on-a")["status"]["conditions"]
            .to_string()
            .contains("not registered")
    });
    let still = kubectl(&a_kc, &["-n", "cli-cluster", "get", "deployment", "web"]);
    assert!(still.status.success(), "objects stay when a cluster is unregistered");
    Ok(())
}
