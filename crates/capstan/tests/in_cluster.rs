//! In-cluster mode, run for real: `capstan controller` and `capstan server` started as their Pods
//! would be (common::pod: the service account's token, CA and namespace at
//! `/var/run/secrets/kubernetes.io/serviceaccount` in a private mount namespace,
//! `KUBERNETES_SERVICE_HOST`/`PORT`, an empty `HOME`, no kubeconfig), with tokens of the
//! ServiceAccounts `capstan install` creates, so only the shipped RBAC is used.
//!
//! - The controller waits, saying why, while the token is missing and while the API server refuses
//!   it (expired), starts once a valid one is written, syncs a directory with a PreSync hook, a Helm
//!   chart and a Kustomize overlay, and keeps working after the token is rotated and the old one
//!   revoked (kube-rs reads the file again at least once a minute).
//! - The server lists Applications and takes a sync request through its HTTP API, and the API server
//!   refuses its account what its role does not grant (deleting a Deployment).
//!
//! The same run from the image's root file system is in `image.rs`.

mod common;

use std::process::Command;
use std::time::Duration;

use capstan_testkit::{GitServer, TestCluster};
use common::apps::{self, APPS};
use common::pod::{self, Root, ServiceAccountFiles};
use common::{kubectl, text};

/// Kills the child (only it) however the test ends.
struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `capstan install -n NS` with the admin's kubeconfig; the admin password it printed.
fn install(kubeconfig: &str, ns: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["install", "--kubeconfig", kubeconfig, "-n", ns])
        .output()
        .expect("capstan install starts");
    assert!(out.status.success(), "capstan install: {}", text(&out));
    common::admin_password(&out)
}

/// A request with `token` (and nothing else) to the API server: kubectl's answer.
fn as_token(cluster: &TestCluster, token: &str, args: &[&str]) -> std::process::Output {
    let ca = tempfile::NamedTempFile::new().expect("a temporary file");
    std::fs::write(ca.path(), cluster.ca_pem().expect("the plane's CA")).expect("writing the CA");
    let kubectl = capstan_playground::binaries::find("kubectl").expect("kubectl from scripts/setup.sh");
    Command::new(kubectl)
        .args([
            "--kubeconfig",
            "/dev/null",
            "--server",
            cluster.server(),
            "--token",
            token,
        ])
        .arg(format!("--certificate-authority={}", ca.path().display()))
        .args(args)
        .output()
        .expect("kubectl starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_in_a_pod_waits_for_a_valid_token_syncs_with_the_shipped_rbac_and_follows_its_rotation()
-> anyhow::Result<()> {
    // The run's shared plane, in a namespace of this test's own.
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().into_owned();
    let client = cluster.client().await?;
    let ns = capstan_testkit::capstan::unique_namespace();
    install(&kc, &ns);
    let repo = apps::publish(&git, "apps")?;

    let sa = ServiceAccountFiles::new(&cluster.ca_pem()?, &ns);
    let scratch = tempfile::tempdir()?;
    let log = scratch.path().join("controller.log");
    let health = apps::free_port();
    let health_listen = format!("127.0.0.1:{health}");
    let mut controller = Kill(pod::start(
        &Root::Host,
        &sa,
        pod::port_of(cluster.server()),
        &["controller", "-n", &ns, "--health-listen", &health_listen],
        scratch.path(),
        &log,
    ));

    // No token yet (automountServiceAccountToken: false, or the kubelet not done): said, and waited.
    apps::wait_log(
        &mut controller.0,
        &log,
        "the service account token /var/run/secrets/kubernetes.io/serviceaccount/token cannot be used",
        Duration::from_secs(30),
    )
    .await;
    assert_ne!(apps::get(health, "/readyz").map(|(s, _)| s), Some(200));

    // An expired token of the right account: the API server refuses it, the controller says so.
    let first = pod::token(&kc, &ns, "capstan-controller", "controller-token-1");
    sa.write_token(&pod::expired(&first, &cluster.dir()));
    apps::wait_log(
        &mut controller.0,
        &log,
        "refused the service account token in /var/run/secrets/kubernetes.io/serviceaccount/token",
        Duration::from_secs(30),
    )
    .await;
    let refused = as_token(
        &cluster,
        &pod::expired(&first, &cluster.dir()),
        &["get", "--raw", "/version"],
    );
    assert!(
        !refused.status.success(),
        "an expired token is refused: {}",
        text(&refused)
    );

    // The kubelet writes a valid one: the controller starts.
    sa.write_token(&first);
    apps::wait_ready(&mut controller.0, health, &log, Duration::from_secs(60)).await;
    assert!(
        std::fs::read_to_string(&log)?.contains("the service account token works now"),
        "{}",
        apps::tail(&log)
    );

    for (name, path, values) in APPS {
        apps::create(&client, &ns, &repo, name, path, values).await?;
    }
    let names: Vec<&str> = APPS.iter().map(|(n, _, _)| *n).collect();
    apps::wait_synced(&client, &ns, &names, Duration::from_secs(180), &log).await?;
    apps::assert_hook_ran(&client, &ns).await?;

    // Rotation: a new token in the file, and the old one revoked (its bound Secret deleted). The
    // controller's next requests must carry the new one: kube-rs reads the file again within a minute.
    let second = pod::token(&kc, &ns, "capstan-controller", "controller-token-2");
    sa.write_token(&second);
    let out = kubectl(
        &kc,
        &["-n", &ns, "delete", "secret", "controller-token-1", "--wait=true"],
    );
    assert!(out.status.success(), "{}", text(&out));
    common::until(
        "the first token revoked once its Secret is gone",
        Duration::from_secs(30),
        || {
            !as_token(&cluster, &first, &["get", "--raw", "/version"])
                .status
                .success()
        },
    );
    apps::create(
        &client,
        &ns,
        &repo,
        "after-rotation",
        "kustomize-guestbook/overlays/staging",
        None,
    )
    .await?;
    apps::wait_synced(&client, &ns, &["after-rotation"], Duration::from_secs(180), &log).await?;

    assert!(controller.0.try_wait()?.is_none(), "the controller still runs");
    let text = std::fs::read_to_string(&log)?;
    assert!(!text.contains("panicked"), "{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_in_a_pod_lists_and_syncs_applications_and_cannot_do_what_its_role_forbids() -> anyhow::Result<()> {
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().into_owned();
    let client = cluster.client().await?;
    let ns = capstan_testkit::capstan::unique_namespace();
    let password = install(&kc, &ns);
    let repo = apps::publish(&git, "apps")?;
    // An Application for the server to show: synced by a controller with the controller's own
    // in-cluster identity.
    let controller_sa = ServiceAccountFiles::new(&cluster.ca_pem()?, &ns);
    controller_sa.write_token(&pod::token(&kc, &ns, "capstan-controller", "controller-token"));
    let scratch = tempfile::tempdir()?;
    let controller_log = scratch.path().join("controller.log");
    let controller_home = scratch.path().join("controller");
    std::fs::create_dir_all(&controller_home)?;
    let _controller = Kill(pod::start(
        &Root::Host,
        &controller_sa,
        pod::port_of(cluster.server()),
        &["controller", "-n", &ns],
        &controller_home,
        &controller_log,
    ));
    let (name, path, values) = APPS[2];
    apps::create(&client, &ns, &repo, name, path, values).await?;
    apps::wait_synced(&client, &ns, &[name], Duration::from_secs(180), &controller_log).await?;

    // The server with the capstan-server account's token.
    let server_token = pod::token(&kc, &ns, "capstan-server", "server-token");
    let sa = ServiceAccountFiles::new(&cluster.ca_pem()?, &ns);
    sa.write_token(&server_token);
    let log = scratch.path().join("server.log");
    let server_home = scratch.path().join("server");
    std::fs::create_dir_all(&server_home)?;
    let port = apps::free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut server = Kill(pod::start(
        &Root::Host,
        &sa,
        pod::port_of(cluster.server()),
        &["server", "-n", &ns, "--listen", &listen],
        &server_home,
        &log,
    ));
    apps::wait_ready(&mut server.0, port, &log, Duration::from_secs(60)).await;

    let mut http = common::http::Http::new(&format!("http://127.0.0.1:{port}"));
    let login = http.login("admin", &password);
    assert_eq!(login.status, 200, "{}", login.body);
    let list = http.get("/api/applications");
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(list.body.contains(name), "{}", list.body);
    let sync = http.post(&format!("/api/applications/{name}/sync"), serde_json::json!({}));
    assert!(
        (200..300).contains(&sync.status),
        "the server takes the sync request: {} {}",
        sync.status,
        sync.body
    );

    // What the server's role does not grant, the API server refuses its token.
    let deployments = kubectl(&kc, &["-n", &format!("{ns}-{name}"), "get", "deploy", "-o", "name"]);
    assert!(deployments.status.success(), "{}", text(&deployments));
    let deployment = String::from_utf8_lossy(&deployments.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(deployment.starts_with("deployment"), "{}", text(&deployments));
    let refused = as_token(
        &cluster,
        &server_token,
        &["-n", &format!("{ns}-{name}"), "delete", &deployment],
    );
    assert!(
        !refused.status.success(),
        "the server's token may not delete a Deployment"
    );
    assert!(text(&refused).contains("forbidden"), "{}", text(&refused));
    let can_list = as_token(
        &cluster,
        &server_token,
        &["-n", &format!("{ns}-{name}"), "get", "deploy"],
    );
    assert!(can_list.status.success(), "it may read: {}", text(&can_list));
    assert!(server.0.try_wait()?.is_none(), "the server still runs");
    Ok(())
}
