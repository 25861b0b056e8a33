//! Logs and resource actions through the HTTP server, end to end: two teams' Applications on the
//! shared plane, their Pods on kwok nodes whose container logs the API server reads from the
//! playground's log file. A developer of one team reads their Pods' logs (a resource's Pods, one
//! container, the last line, the previous container, followed live) and is refused another team's
//! Pod (403) and Application (404); runs `restart`, `suspend` and `resume` with the `action` role
//! (recorded in an Event naming them), while a read-only user is refused; an unknown action names
//! the ones that exist. A Job that failed (its Pod failed by kwok) is retried: the controller
//! deletes it with its Pods and creates it again from Git.

mod common;

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use capstan_playground::kwok::PodLogs;
use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};

use common::http::Http;
use common::{capstan, capstan_in, kubectl, text, until};

const WAIT: Duration = Duration::from_secs(120);

fn project(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: AppProject\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  sourceRepos: ['*']\n  destinations: [{{server: '*', namespace: '*'}}]\n  clusterResourceWhitelist: [{{group: '', kind: Namespace}}]\n"
    )
}

fn application(ns: &str, name: &str, project: &str, repo: &str, dest: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  project: {project}\n  source: {{repoURL: '{repo}', targetRevision: main, path: {name}}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: {dest}}}\n  syncPolicy: {{automated: {{prune: true}}, syncOptions: [CreateNamespace=true]}}\n"
    )
}

const SHOP: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx}, {name: sidecar, image: envoy}]}\n---\napiVersion: batch/v1\nkind: CronJob\nmetadata: {name: nightly}\nspec:\n  schedule: '0 3 * * *'\n  jobTemplate:\n    spec:\n      template:\n        spec: {restartPolicy: Never, containers: [{name: job, image: busybox}]}\n";

const BILLING: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: ledger}\nspec:\n  selector: {matchLabels: {app: ledger}}\n  template:\n    metadata: {labels: {app: ledger}}\n    spec: {containers: [{name: ledger, image: postgres}]}\n";

/// The NDJSON lines of a logs answer.
fn log_lines(body: &str) -> Vec<Value> {
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn logs_and_actions_are_served_to_their_team_only() -> anyhow::Result<()> {
    let cluster = TestCluster::shared().await?;
    let client = cluster.client().await?;
    let git = GitServer::start().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);
    let cache = tempfile::tempdir()?;
    let (_controller, base, _) = common::controller_with_server(&kc, cache.path(), &["-n", &ns])?;

    for (user, pass) in [("dev", "dev-password-1"), ("viewer", "viewer-password-1")] {
        let out = capstan_in(&kc, &ns, &["account", "set-password", user, "--password", pass]);
        assert!(out.status.success(), "{}", text(&out));
    }
    common::create_policy(
        &kc,
        &ns,
        "default: none\ngrants:\n  - {role: action, projects: [team-a], users: [dev]}\n  - {role: read-only, projects: [team-a], users: [viewer]}\n",
    );

    git.create_repo("teams")?;
    git.commit(
        "teams",
        "main",
        &[("shop/all.yaml", Some(SHOP)), ("billing/all.yaml", Some(BILLING))],
        "two teams",
    )?;
    let (shop_ns, billing_ns) = (format!("shop-{ns}"), format!("billing-{ns}"));
    let file = cache.path().join("apps.yaml");
    std::fs::write(
        &file,
        [
            project(&ns, "team-a"),
            project(&ns, "team-b"),
            application(&ns, "shop", "team-a", &git.git_url("teams"), &shop_ns),
            application(&ns, "billing", "team-b", &git.git_url("teams"), &billing_ns),
            // An ApplicationSet of team-a (not synced: it only has to be listed the same way).
            format!(
                "apiVersion: capstan.dev/v1alpha1\nkind: ApplicationSet\nmetadata: {{name: extras, namespace: {ns}}}\nspec:\n  generators:\n  - list: {{elements: [{{svc: one}}]}}\n  template:\n    metadata: {{name: 'extra-{{{{svc}}}}'}}\n    spec:\n      project: team-a\n      source: {{repoURL: '{}', targetRevision: main, path: shop}}\n      destination: {{server: 'https://kubernetes.default.svc', namespace: 'extra-{ns}'}}\n",
                git.git_url("teams")
            ),
        ]
        .join("---\n"),
    )?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));

    let mut admin = Http::new(&base);
    until("the server to be ready", Duration::from_secs(30), || {
        admin.get("/readyz").status == 200
    });
    assert_eq!(admin.login("admin", &password).status, 200);
    until("both Applications Synced and Healthy", WAIT, || {
        ["shop", "billing"].iter().all(|a| {
            let app = admin.get(&format!("/api/applications/{a}")).json();
            app["status"]["sync"]["status"] == "Synced" && app["status"]["health"]["status"] == "Healthy"
        })
    });
    let pods: Api<Pod> = Api::namespaced(client.clone(), &shop_ns);
    let web_pods: Vec<String> = pods
        .list(&ListParams::default().labels("app=web"))
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(web_pods.len(), 2, "{web_pods:?}");
    let billing_pods: Api<Pod> = Api::namespaced(client.clone(), &billing_ns);
    let ledger = billing_pods.list(&ListParams::default()).await?.items;
    let ledger = ledger
        .first()
        .and_then(|p| p.metadata.name.clone())
        .expect("a ledger Pod");

    let mut dev = Http::new(&base);
    assert_eq!(dev.login("dev", "dev-password-1").status, 200);
    let mut viewer = Http::new(&base);
    assert_eq!(viewer.login("viewer", "viewer-password-1").status, 200);

    // Logs: the lines written to the simulated containers' log, read through the API server.
    let marker = format!("order accepted {ns}");
    PodLogs::under(&cluster.dir()).append(&[&marker, "order shipped"])?;
    let deployment_logs =
        format!("/api/applications/shop/logs?group=apps&kind=Deployment&resourceName=web&namespace={shop_ns}");
    let answer = viewer.get(&format!("{deployment_logs}&container=sidecar&tailLines=2"));
    assert_eq!(answer.status, 200, "{}", answer.body);
    let lines = log_lines(&answer.body);
    assert_eq!(lines.len(), 4, "two lines of each web Pod's sidecar: {lines:?}");
    for line in &lines {
        assert_eq!(line["container"], "sidecar");
        assert!(web_pods.iter().any(|p| line["pod"] == p.as_str()), "{line}");
        assert!(!line["timestamp"].as_str().unwrap_or("").is_empty(), "{line}");
    }
    assert!(lines.iter().any(|l| l["content"] == marker.as_str()), "{lines:?}");
    let pod = &web_pods[0];
    let last = log_lines(
        &dev.get(&format!(
            "/api/applications/shop/logs?pod={pod}&container=web&tailLines=1"
        ))
        .body,
    );
    assert_eq!(last.len(), 1);
    assert_eq!(last[0]["content"], "order shipped");
    let both = log_lines(
        &dev.get(&format!("/api/applications/shop/logs?pod={pod}&tailLines=1"))
            .body,
    );
    let containers: Vec<&str> = both.iter().filter_map(|l| l["container"].as_str()).collect();
    assert_eq!(containers, ["web", "sidecar"], "every container of the Pod");
    let previous = log_lines(
        &dev.get(&format!(
            "/api/applications/shop/logs?pod={pod}&container=web&previous=true"
        ))
        .body,
    );
    assert!(
        previous
            .iter()
            .any(|l| l["content"] == "simulated container before its restart")
            && !previous.iter().any(|l| l["content"] == marker.as_str()),
        "{previous:?}"
    );
    let missing = dev.get(&format!("/api/applications/shop/logs?pod={pod}&container=nope"));
    assert_eq!(missing.status, 400, "{}", missing.body);
    assert!(
        missing.body.contains("sidecar"),
        "names the containers there are: {}",
        missing.body
    );

    // Another team's Pod through one's own Application: 403; their Application: 404.
    let other = dev.get(&format!("/api/applications/shop/logs?pod={ledger}"));
    assert_eq!(other.status, 403, "{}", other.body);
    assert!(other.body.contains("not part of Application"), "{}", other.body);
    assert_eq!(dev.get("/api/applications/billing/logs").status, 404);
    let too_many = dev.get("/api/applications/shop/logs?tailLines=100000");
    assert_eq!(too_many.status, 400, "{}", too_many.body);

    // Followed: lines written after the answer started arrive on it.
    let follow_url = format!("{base}/api/applications/shop/logs?pod={pod}&container=web&tailLines=1&follow=true");
    let cookie = dev.cookie.clone().unwrap_or_default();
    let later = format!("payment captured {ns}");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let mut answer = agent.get(&follow_url).header("Cookie", &cookie).call().expect("follow");
        let lines = BufReader::new(answer.body_mut().as_reader()).lines();
        for line in lines.map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(30))?;
    assert!(first.contains("order shipped"), "the last line first: {first}");
    PodLogs::under(&cluster.dir()).append(&[&later])?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains(&later)) {
        let left = deadline.saturating_duration_since(Instant::now());
        seen.push(
            rx.recv_timeout(left)
                .map_err(|e| anyhow::anyhow!("{e}: only {seen:?}"))?,
        );
    }
    drop(rx);
    drop(reader);

    // Actions: offered per kind and state, run with the `action` role only.
    let target = |kind: &str, name: &str| {
        let group = if kind == "CronJob" { "batch" } else { "apps" };
        json!({"group": group, "kind": kind, "namespace": shop_ns, "name": name})
    };
    let offered = dev.get(&format!(
        "/api/applications/shop/actions?group=apps&kind=Deployment&namespace={shop_ns}&name=web"
    ));
    assert_eq!(offered.status, 200, "{}", offered.body);
    assert_eq!(offered.json()["items"], json!([{"name": "restart", "disabled": ""}]));
    let with = |mut t: Value, action: &str| {
        t["action"] = json!(action);
        t
    };
    let refused = viewer.post(
        "/api/applications/shop/actions",
        with(target("Deployment", "web"), "restart"),
    );
    assert_eq!(refused.status, 403, "{}", refused.body);
    let unknown = dev.post(
        "/api/applications/shop/actions",
        with(target("Deployment", "web"), "explode"),
    );
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    assert!(unknown.body.contains("restart"), "{}", unknown.body);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &shop_ns);
    let restarted = |d: &Deployment| {
        d.spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get("kubectl.kubernetes.io/restartedAt").cloned())
    };
    assert_eq!(restarted(&deployments.get("web").await?), None);
    let done = dev.post(
        "/api/applications/shop/actions",
        with(target("Deployment", "web"), "restart"),
    );
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        restarted(&deployments.get("web").await?).is_some(),
        "the pod template is annotated"
    );
    until("the Event naming the user", Duration::from_secs(30), || {
        dev.get("/api/applications/shop/events")
            .body
            .contains("dev ran restart on Deployment")
    });
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), &shop_ns);
    let suspended = |c: &CronJob| c.spec.suspend.unwrap_or(false);
    let resume = dev.post(
        "/api/applications/shop/actions",
        with(target("CronJob", "nightly"), "resume"),
    );
    assert_eq!(resume.status, 409, "not suspended: {}", resume.body);
    let suspend = dev.post(
        "/api/applications/shop/actions",
        with(target("CronJob", "nightly"), "suspend"),
    );
    assert_eq!(suspend.status, 200, "{}", suspend.body);
    assert!(suspended(&cronjobs.get("nightly").await?));
    let items = dev
        .get(&format!(
            "/api/applications/shop/actions?group=batch&kind=CronJob&namespace={shop_ns}&name=nightly"
        ))
        .json();
    assert_eq!(items["items"][0]["disabled"], "already suspended", "{items}");
    let resume = dev.post(
        "/api/applications/shop/actions",
        with(target("CronJob", "nightly"), "resume"),
    );
    assert_eq!(resume.status, 200, "{}", resume.body);
    assert!(!suspended(&cronjobs.get("nightly").await?));
    // Another team's object through one's own Application is not in its tree.
    let foreign =
        json!({"group": "apps", "kind": "Deployment", "namespace": billing_ns, "name": "ledger", "action": "restart"});
    assert_eq!(dev.post("/api/applications/shop/actions", foreign).status, 404);
    assert_eq!(
        dev.post(
            "/api/applications/billing/actions",
            with(target("Deployment", "ledger"), "restart")
        )
        .status,
        404
    );

    // The CLI logged in to the server: the developer's roles, the kubeconfig's outputs.
    let config = tempfile::tempdir()?;
    let cli = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"));
        cmd.args(args)
            .env("CAPSTAN_CONFIG_DIR", config.path())
            .env_remove("KUBECONFIG")
            .env_remove("CAPSTAN_SERVER")
            .env_remove("CAPSTAN_TOKEN")
            .env("HOME", config.path());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run capstan")
    };
    let out = cli(
        &["login", &base, "--username", "dev", "--password", "wrong-password"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("wrong user name or password"), "{}", text(&out));
    let out = cli(
        &["login", &base, "--username", "dev"],
        &[("CAPSTAN_PASSWORD", "dev-password-1")],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("as dev"), "{}", text(&out));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(config.path().join("sessions.json"))?
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the session is the user's only");
    let listed = text(&cli(&["app", "list"], &[]));
    assert!(listed.contains("shop") && !listed.contains("billing"), "{listed}");
    // The same outputs and exit codes as through the kubeconfig, for what both may read.
    for args in [
        &["app", "history", "shop"][..],
        &["app", "list", "-p", "team-a"],
        &["app", "list", "-p", "team-a", "-o", "wide"],
        &["app", "get", "shop"],
        &["app", "wait", "shop"],
        &["app", "diff", "shop"],
        &["appset", "list"],
        &["appset", "get", "extras"],
        &["appset", "get", "extras", "-o", "json"],
    ] {
        until(
            &format!("`capstan {}` to print the same in both modes", args.join(" ")),
            WAIT,
            || {
                let by_kube = capstan_in(&kc, &ns, args);
                let by_server = cli(args, &[]);
                by_kube.status.code() == by_server.status.code() && by_kube.stdout == by_server.stdout
            },
        );
    }
    let out = cli(&["app", "get", "billing"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("not found"), "{}", text(&out));
    let ns_flag = shop_ns.as_str();
    let out = cli(
        &[
            "app",
            "logs",
            "shop",
            "--kind",
            "Deployment",
            "--name",
            "web",
            "--resource-namespace",
            ns_flag,
            "-c",
            "web",
            "--tail",
            "1",
            "--prefix",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(printed.lines().count(), 2, "{printed}");
    assert!(
        printed
            .lines()
            .all(|l| l.starts_with("[web-") && l.ends_with(&format!("/web] {later}"))),
        "{printed}"
    );
    let out = cli(&["app", "logs", "shop", "--name", &ledger], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("not part of Application"), "{}", text(&out));
    let out = cli(
        &[
            "app",
            "actions",
            "list",
            "shop",
            "--kind",
            "Deployment",
            "--name",
            "web",
            "--resource-namespace",
            ns_flag,
        ],
        &[],
    );
    assert!(out.status.success() && text(&out).contains("restart"), "{}", text(&out));
    let out = cli(
        &[
            "app",
            "actions",
            "run",
            "shop",
            "restart",
            "--kind",
            "Deployment",
            "--name",
            "web",
            "--resource-namespace",
            ns_flag,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("dev ran restart on Deployment"), "{}", text(&out));
    let out = cli(&["app", "sync", "shop", "--wait", "--timeout", "120"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("Synced"), "{}", text(&out));
    let out = cli(&["context"], &[]);
    let current = text(&out);
    assert!(
        current
            .lines()
            .any(|l| l.starts_with('*') && l.contains(&base) && l.contains("dev")),
        "{current}"
    );
    let out = cli(&["logout"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let out = cli(&["app", "logs", "shop"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("capstan login"), "{}", text(&out));

    // A token: from a file, and for CI from the environment; once expired, exit code 2.
    let out = capstan_in(&kc, &ns, &["account", "generate-token", "dev", "--expires-in", "5s"]);
    assert!(out.status.success(), "{}", text(&out));
    let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let token_file = config.path().join("token");
    std::fs::write(&token_file, &token)?;
    let out = cli(&["login", &base, "--token-file", &token_file.to_string_lossy()], &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&cli(&["app", "list"], &[])).contains("shop"));
    let ci = [("CAPSTAN_SERVER", base.as_str()), ("CAPSTAN_TOKEN", token.as_str())];
    assert!(text(&cli(&["app", "list"], &ci)).contains("shop"));
    until("the token to expire", Duration::from_secs(30), || {
        cli(&["app", "list"], &[]).status.code() == Some(2)
    });
    let out = cli(&["app", "list"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("log in again"), "{}", text(&out));
    let out = cli(&["app", "list"], &ci);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    Ok(())
}

/// `capstan login` verifies the server's certificate: an HTTPS server whose certificate no trusted
/// CA signed is refused before anything is sent; `--certificate-authority` or
/// `--insecure-skip-tls-verify` (which warns) let the exchange happen — here with a file server
/// that is no Capstan, so it then fails on the answer, not on TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_verifies_the_server_certificate() -> anyhow::Result<()> {
    use capstan_testkit::{ChartServer, ChartServerOptions};
    let https = ChartServer::start(ChartServerOptions {
        tls: true,
        ..Default::default()
    })
    .await?;
    let url = https.url();
    assert!(url.starts_with("https://"), "{url}");
    let config = tempfile::tempdir()?;
    let ca = config.path().join("ca.pem");
    std::fs::write(&ca, https.ca_pem().unwrap_or_default())?;
    let login = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"));
        cmd.args(["login", &url, "--username", "dev", "--password", "dev-password-1"])
            .args(extra)
            .env("CAPSTAN_CONFIG_DIR", config.path())
            .env_remove("KUBECONFIG");
        cmd.output().expect("run capstan")
    };
    let out = login(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).to_lowercase().contains("certificate"), "{}", text(&out));
    assert_eq!(https.total_requests(), 0, "nothing was sent to the unverified server");
    for extra in [
        vec!["--certificate-authority", ca.to_str().unwrap_or_default()],
        vec!["--insecure-skip-tls-verify"],
    ] {
        let out = login(&extra);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let said = text(&out);
        let error = said.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
        assert!(
            !error.to_lowercase().contains("certificate"),
            "TLS passed with {extra:?}: {said}"
        );
        assert!(
            said.contains("HTTP 4"),
            "the answer of a server that is no Capstan: {said}"
        );
        if extra == ["--insecure-skip-tls-verify"] {
            assert!(said.contains("warning: the certificate of"), "{said}");
        }
    }
    assert!(!config.path().join("sessions.json").exists(), "no login was kept");
    Ok(())
}

/// A Job whose Pod fails (kwok's `capstan.dev/simulate: fail`) once, so the real Job controller
/// marks it `Failed`, and one that succeeds.
const JOBS: &str = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: migrate}\nspec:\n  backoffLimit: 0\n  template:\n    metadata: {annotations: {capstan.dev/simulate: fail}}\n    spec: {restartPolicy: Never, containers: [{name: migrate, image: busybox}]}\n---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: seed}\nspec:\n  template:\n    spec: {restartPolicy: Never, containers: [{name: seed, image: busybox}]}\n";

/// The object `kubectl get -o json` prints, or `None` when it does not exist.
fn get_json(kc: &str, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend(args);
    all.extend(["-o", "json"]);
    let out = kubectl(kc, &all);
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

fn condition(job: &Value, kind: &str) -> bool {
    job["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

/// `retry` of a failed Job of Git: offered only when it failed, refused to a read-only user; the
/// controller deletes it with its Pods and creates it again from Git (a new uid, the old Pods gone),
/// the operation and an Event naming the user.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_job_is_retried_by_the_controller() -> anyhow::Result<()> {
    let cluster = TestCluster::shared().await?;
    let git = GitServer::start().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let cache = tempfile::tempdir()?;
    let (_controller, base, _) = common::controller_with_server(&kc, cache.path(), &["-n", &ns])?;
    for (user, pass) in [("dev", "dev-password-1"), ("viewer", "viewer-password-1")] {
        let out = capstan_in(&kc, &ns, &["account", "set-password", user, "--password", pass]);
        assert!(out.status.success(), "{}", text(&out));
    }
    common::create_policy(
        &kc,
        &ns,
        "default: none\ngrants:\n  - {role: action, projects: [team-a], users: [dev]}\n  - {role: read-only, projects: [team-a], users: [viewer]}\n",
    );
    git.create_repo("jobs")?;
    git.commit("jobs", "main", &[("batch/all.yaml", Some(JOBS))], "two jobs")?;
    let dest = format!("batch-{ns}");
    let file = cache.path().join("apps.yaml");
    std::fs::write(
        &file,
        [
            project(&ns, "team-a"),
            application(&ns, "batch", "team-a", &git.git_url("jobs"), &dest),
        ]
        .join("---\n"),
    )?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));

    let job = |name: &str| get_json(&kc, &["job", name, "-n", &dest, "--show-managed-fields"]);
    until("Job migrate Failed and Job seed Complete", WAIT, || {
        job("migrate").is_some_and(|j| condition(&j, "Failed"))
            && job("seed").is_some_and(|j| condition(&j, "Complete"))
    });
    let old = job("migrate").expect("Job migrate");
    let old_uid = old["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    assert!(!old_uid.is_empty());
    let pods_of = |uid: &str| {
        get_json(
            &kc,
            &[
                "pods",
                "-n",
                &dest,
                "-l",
                &format!("batch.kubernetes.io/controller-uid={uid}"),
            ],
        )
        .and_then(|l| l["items"].as_array().map(|i| i.len()))
        .unwrap_or(usize::MAX)
    };
    assert!(pods_of(&old_uid) >= 1, "the failed Job's Pod is there");
    let seed_uid = job("seed").map(|j| j["metadata"]["uid"].clone()).unwrap_or_default();

    let mut dev = Http::new(&base);
    until("the server to be ready", Duration::from_secs(30), || {
        dev.get("/readyz").status == 200
    });
    assert_eq!(dev.login("dev", "dev-password-1").status, 200);
    let mut viewer = Http::new(&base);
    assert_eq!(viewer.login("viewer", "viewer-password-1").status, 200);
    until("the Application synced", WAIT, || {
        let app = dev.get("/api/applications/batch").json();
        app["status"]["sync"]["status"] == "Synced" && app["status"]["operationState"]["phase"] == "Succeeded"
    });
    let listing = |http: &mut Http, name: &str| {
        http.get(&format!(
            "/api/applications/batch/actions?group=batch&kind=Job&namespace={dest}&name={name}"
        ))
        .json()["items"]
            .clone()
    };
    assert_eq!(listing(&mut dev, "migrate"), json!([{"name": "retry", "disabled": ""}]));
    assert_eq!(
        listing(&mut viewer, "seed"),
        json!([{"name": "retry", "disabled": "has not failed (no condition Failed=True)"}])
    );
    let retry =
        |name: &str| json!({"group": "batch", "kind": "Job", "namespace": dest, "name": name, "action": "retry"});
    let not_failed = dev.post("/api/applications/batch/actions", retry("seed"));
    assert_eq!(not_failed.status, 409, "{}", not_failed.body);
    assert!(not_failed.body.contains("has not failed"), "{}", not_failed.body);
    let refused = viewer.post("/api/applications/batch/actions", retry("migrate"));
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(
        job("migrate").and_then(|j| j["metadata"]["uid"].as_str().map(str::to_string)),
        Some(old_uid.clone()),
        "nothing was done for the refused requests"
    );

    let done = dev.post("/api/applications/batch/actions", retry("migrate"));
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        done.json()["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("dev ran retry on Job")),
        "{}",
        done.body
    );
    // The controller ran a sync of that Job only, as the user, and recreated it.
    let mut operation = Value::Null;
    until("the retry's operation to succeed", WAIT, || {
        let app = dev.get("/api/applications/batch").json();
        operation = app["status"]["operationState"].clone();
        operation["operation"]["initiatedBy"] == "dev" && operation["phase"] == "Succeeded"
    });
    assert_eq!(
        operation["operation"]["sync"]["resources"],
        json!([format!("batch/Job/{dest}/migrate")]),
        "{operation}"
    );
    let results = operation["resources"].as_array().cloned().unwrap_or_default();
    assert_eq!(results.len(), 1, "the Job only: {operation}");
    assert_eq!(results[0]["name"], "migrate");
    assert_eq!(results[0]["message"], "deleted and recreated", "{operation}");
    let new = job("migrate").expect("Job migrate again");
    let new_uid = new["metadata"]["uid"].as_str().unwrap_or_default();
    assert!(
        !new_uid.is_empty() && new_uid != old_uid,
        "a new Job: {new_uid} vs {old_uid}"
    );
    // Created from Git: its template as Git has it, tracked by the Application, applied by Capstan.
    assert_eq!(
        new["spec"]["template"]["metadata"]["annotations"]["capstan.dev/simulate"],
        "fail"
    );
    assert!(
        new["metadata"]["managedFields"]
            .as_array()
            .is_some_and(|m| m.iter().any(|f| f["manager"] == "capstan" && f["operation"] == "Apply")),
        "{new}"
    );
    assert_eq!(pods_of(&old_uid), 0, "the old Job's Pods are gone");
    assert_eq!(
        job("seed").map(|j| j["metadata"]["uid"].clone()),
        Some(seed_uid.clone()),
        "the other Job is left alone"
    );
    until("the Event naming the user", Duration::from_secs(30), || {
        dev.get("/api/applications/batch/events")
            .body
            .contains("dev ran retry on Job")
    });
    // The new Job runs (and, simulated, fails again): it may be retried again then.
    until("the new Job to fail too", WAIT, || {
        job("migrate").is_some_and(|j| j["metadata"]["uid"] == new_uid && condition(&j, "Failed"))
    });
    assert_eq!(listing(&mut dev, "migrate"), json!([{"name": "retry", "disabled": ""}]));

    // Delete-and-recreate is the retry's only: a sync request with Force=true is refused by the
    // server (a `sync` role would otherwise recreate anything), and the controller recreates nothing
    // but named Jobs of the Application, whoever wrote the request (here a kubeconfig).
    let forced = dev.post(
        "/api/applications/batch/sync",
        json!({"syncOptions": ["Force=true"], "resources": [format!("batch/Job/{dest}/seed")]}),
    );
    assert_eq!(forced.status, 400, "{}", forced.body);
    assert!(forced.body.contains("retry"), "{}", forced.body);
    let out = capstan_in(
        &kc,
        &ns,
        &[
            "app",
            "sync",
            "batch",
            "--sync-option",
            "Force=true",
            "--wait",
            "--timeout",
            "60",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("Force=true refused: it recreates only the objects the request names"),
        "{}",
        text(&out)
    );
    let out = capstan_in(
        &kc,
        &ns,
        &[
            "app",
            "sync",
            "batch",
            "--sync-option",
            "Force=true",
            "--resource",
            &format!("/Namespace//{dest}"),
            "--wait",
            "--timeout",
            "60",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("is not a Job"), "{}", text(&out));
    assert_eq!(
        job("seed").map(|j| j["metadata"]["uid"].clone()),
        Some(seed_uid),
        "nothing recreated by the refused requests"
    );
    Ok(())
}
