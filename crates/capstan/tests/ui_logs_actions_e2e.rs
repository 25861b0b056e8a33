//! The logs panel and the Actions menu of the web UI, in real headless Chromium against
//! `capstan controller --listen` on the shared control plane: a Deployment synced on the kwok nodes,
//! whose simulated containers' log file the API server reads. A user with the `action` role opens
//! the Deployment's logs (every Pod's lines, prefixed with pod/container), follows them (a line
//! written after opening appears without a reload), sees the page fit a phone's width with the panel
//! open, runs Restart after a confirmation (the pod template is annotated, the Events tab names the
//! user); a read-only user sees the Logs button but no Actions.

mod common;

use std::time::Duration;

use capstan_playground::kwok::PodLogs;
use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::webdriver::Browser;
use capstan_testkit::{GitServer, TestCluster};

use common::{capstan, capstan_in, kubectl, text, until};

const WAIT: Duration = Duration::from_secs(120);

fn testid(id: &str) -> String {
    format!("[data-testid={id:?}]")
}

const WEB: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx}, {name: sidecar, image: envoy}]}\n";

fn application(ns: &str, repo: &str, dest: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: shop, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{repo}', targetRevision: main, path: shop}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: {dest}}}\n  syncPolicy: {{automated: {{prune: true}}, syncOptions: [CreateNamespace=true]}}\n"
    )
}

fn jsonpath(kc: &str, args: &[&str]) -> String {
    String::from_utf8_lossy(&kubectl(kc, args).stdout).into_owned()
}

fn login(browser: &Browser, base: &str, user: &str, password: &str) -> anyhow::Result<()> {
    browser.goto(&format!("{base}/login"))?;
    browser.wait_for(&testid("login-username"), WAIT)?.send_keys(user)?;
    browser.wait_for(&testid("login-password"), WAIT)?.send_keys(password)?;
    browser.click(&testid("login-submit"), WAIT)?;
    browser.wait_for(&testid("app-row"), WAIT)?;
    Ok(())
}

/// The Application page with the Deployment's resource panel open.
fn open_deployment(browser: &Browser, base: &str) -> anyhow::Result<()> {
    browser.goto(&format!("{base}/applications/shop"))?;
    browser.click(&testid("tab-tree"), WAIT)?;
    let deployment = format!("{}[data-kind=\"Deployment\"]", testid("tree-node"));
    browser.click(&deployment, WAIT)?;
    browser.wait_text(&testid("resource-panel"), WAIT, |t| t.contains("Deployment web"))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn logs_panel_follows_and_restart_runs_for_the_action_role_only() -> anyhow::Result<()> {
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    for (user, pass) in [("dev", "dev-password-1"), ("viewer", "viewer-password-1")] {
        let out = capstan_in(&kc, &ns, &["account", "set-password", user, "--password", pass]);
        assert!(out.status.success(), "{}", text(&out));
    }
    common::create_policy(
        &kc,
        &ns,
        "default: none\ngrants:\n  - {role: action, projects: ['*'], users: [dev]}\n  - {role: read-only, projects: ['*'], users: [viewer]}\n",
    );

    git.create_repo("shop")?;
    git.commit("shop", "main", &[("shop/web.yaml", Some(WEB))], "web")?;
    let scratch = tempfile::tempdir()?;
    let dest = format!("shop-{ns}");
    let file = scratch.path().join("app.yaml");
    std::fs::write(&file, application(&ns, &git.git_url("shop"), &dest))?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));

    let cache = scratch.path().join("cache");
    let (_controller, server, _) = common::controller_with_server(&kc, &cache, &["-n", &ns])?;
    let port = server.rsplit(':').next().unwrap_or_default().to_string();
    // localhost, not 127.0.0.1: the browser treats it as a secure context for the Secure cookie.
    let base = format!("http://localhost:{port}");
    until("shop Synced and Healthy with two ready Pods", WAIT, || {
        let st = jsonpath(
            &kc,
            &[
                "-n",
                &ns,
                "get",
                "application",
                "shop",
                "-o",
                "jsonpath={.status.sync.status}/{.status.health.status}",
            ],
        );
        let ready = jsonpath(
            &kc,
            &[
                "-n",
                &dest,
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.status.readyReplicas}",
            ],
        );
        st == "Synced/Healthy" && ready == "2"
    });

    // Lines written to the simulated containers' log before the panel opens.
    let logs = PodLogs::under(&cluster.dir());
    let before = format!("order accepted {ns}");
    logs.append(&[&before])?;

    let browser = Browser::start()?;
    login(&browser, &base, "dev", "dev-password-1")?;
    open_deployment(&browser, &base)?;
    browser.click(&testid("logs-button"), WAIT)?;
    browser.wait_for(&testid("logs-panel"), WAIT)?;
    let lines = testid("logs-lines");
    browser.wait_text(&lines, WAIT, |t| t.contains(&before))?;
    // Two Pods, two containers each: every line says whose it is.
    let prefixes = browser.execute(
        "return [...document.querySelectorAll('[data-testid=\"log-line\"]')]
           .filter((l) => l.textContent.includes(arguments[0]))
           .map((l) => l.querySelector('.prefix').textContent.trim());",
        vec![serde_json::json!(before)],
    )?;
    let prefixes: Vec<String> = serde_json::from_value(prefixes)?;
    assert_eq!(
        prefixes.len(),
        4,
        "the line of each container of each Pod: {prefixes:?}"
    );
    assert!(
        prefixes
            .iter()
            .all(|p| p.starts_with("web-") && (p.ends_with("/web") || p.ends_with("/sidecar"))),
        "{prefixes:?}"
    );
    // The container choice comes from the lines seen.
    let options = browser.execute(
        "return [...document.querySelectorAll('[data-testid=\"logs-container\"] option')].map((o) => o.textContent.trim());",
        vec![],
    )?;
    assert_eq!(options, serde_json::json!(["all", "sidecar", "web"]));

    // Followed: a line written after opening appears without a reload.
    browser.click(&testid("logs-follow"), WAIT)?;
    browser.wait_for(&format!("{}[data-state=\"streaming\"]", testid("logs-status")), WAIT)?;
    browser.wait_text(&lines, WAIT, |t| t.contains(&before))?;
    let after = format!("payment captured {ns}");
    logs.append(&[&after])?;
    let shown = browser.wait_text(&lines, Duration::from_secs(30), |t| t.contains(&after))?;
    assert!(shown.contains(&before), "the earlier lines stay: {shown}");
    browser.wait_for(&format!("{}[data-state=\"streaming\"]", testid("logs-status")), WAIT)?;

    // A phone's width (375 px) with the panel open: nothing scrolls sideways; the log lines scroll
    // inside their box.
    browser.cdp(
        "Emulation.setDeviceMetricsOverride",
        serde_json::json!({"width": 375, "height": 812, "deviceScaleFactor": 2, "mobile": true}),
    )?;
    let long = format!("{ns} {}", "x".repeat(400));
    logs.append(&[&long])?;
    browser.wait_text(&lines, Duration::from_secs(30), |t| t.contains(&long))?;
    let layout = browser.execute(
        "const box = document.querySelector('[data-testid=\"logs-lines\"]');
         const panel = document.querySelector('[data-testid=\"logs-panel\"]');
         return [document.documentElement.scrollWidth, window.innerWidth,
                 box.getBoundingClientRect().right, panel.getBoundingClientRect().right,
                 box.scrollWidth > box.clientWidth];",
        vec![],
    )?;
    let width = layout[1].as_f64().unwrap_or(0.0);
    assert_eq!(width, 375.0, "{layout}");
    for i in [0, 2, 3] {
        assert!(
            layout[i].as_f64().unwrap_or(f64::MAX) <= width,
            "no sideways scrolling: {layout}"
        );
    }
    assert_eq!(
        layout[4],
        serde_json::json!(true),
        "the long line scrolls in its box: {layout}"
    );

    // Followed lines keep the box at its newest line; once the person scrolls up, they do not pull
    // it down again.
    let filler: Vec<String> = (0..40).map(|i| format!("filler {i} {ns}")).collect();
    let filler: Vec<&str> = filler.iter().map(String::as_str).collect();
    logs.append(&filler)?;
    browser.wait_text(&lines, Duration::from_secs(30), |t| {
        t.contains(&format!("filler 39 {ns}"))
    })?;
    let scroll = "const b = document.querySelector('[data-testid=\"logs-lines\"]');
                  return [b.scrollTop, b.scrollHeight - b.clientHeight];";
    let at = browser.execute(scroll, vec![])?;
    let (top, max) = (at[0].as_f64().unwrap_or(-1.0), at[1].as_f64().unwrap_or(0.0));
    assert!(max > 0.0 && top >= max - 8.0, "at the newest line: {at}");
    browser.execute(
        "const b = document.querySelector('[data-testid=\"logs-lines\"]');
         b.scrollTop = 0; b.dispatchEvent(new Event('scroll'));",
        vec![],
    )?;
    let later = format!("refund issued {ns}");
    logs.append(&[&later])?;
    browser.wait_text(&lines, Duration::from_secs(30), |t| t.contains(&later))?;
    let at = browser.execute(scroll, vec![])?;
    assert_eq!(at[0].as_f64(), Some(0.0), "left where the person scrolled: {at}");
    browser.cdp("Emulation.clearDeviceMetricsOverride", serde_json::json!({}))?;

    // Closing the panel takes it away (and aborts its request).
    browser.click(&testid("logs-close"), WAIT)?;
    browser.wait_for(&testid("logs-button"), WAIT)?;
    assert!(browser.find_all(&testid("logs-panel"))?.is_empty());

    // Restart, after a confirmation: the pod template is annotated, the Events tab names the user.
    let restarted_at = || {
        jsonpath(
            &kc,
            &[
                "-n",
                &dest,
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.spec.template.metadata.annotations.kubectl\\.kubernetes\\.io/restartedAt}",
            ],
        )
    };
    assert_eq!(restarted_at(), "", "not restarted yet");
    browser.click(&testid("actions-button"), WAIT)?;
    browser.click(&format!("{}[data-action=\"restart\"]", testid("action-item")), WAIT)?;
    browser.wait_text("[role=\"dialog\"]", WAIT, |t| {
        t.contains("restart") && t.contains("Deployment") && t.contains("web")
    })?;
    browser.click(&testid("action-confirm"), WAIT)?;
    let message = browser.wait_text(&testid("action-message"), WAIT, |t| !t.trim().is_empty())?;
    assert!(message.contains("restart"), "{message}");
    assert!(!restarted_at().is_empty(), "the pod template is annotated");
    browser.click(&testid("tab-events"), WAIT)?;
    browser.wait_text("#tabpanel", WAIT, |t| {
        t.contains("ResourceActionRan") && t.contains("dev ran restart on Deployment")
    })?;

    // A read-only user: the Logs button, no Actions.
    browser.click(&testid("logout"), WAIT)?;
    browser.wait_for(&testid("login-username"), WAIT)?;
    login(&browser, &base, "viewer", "viewer-password-1")?;
    open_deployment(&browser, &base)?;
    browser.wait_for(&testid("logs-button"), WAIT)?;
    assert!(
        browser.find_all(&testid("actions-button"))?.is_empty(),
        "no Actions for a read-only user"
    );
    Ok(())
}
