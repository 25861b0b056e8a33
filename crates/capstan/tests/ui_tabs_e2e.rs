//! Many tabs of the web UI at once, in real headless Chromium against `capstan controller --listen`
//! on a real control plane: eight Application pages open side by side each render and stay live
//! (one WebSocket per tab carries all its live updates, so no tab waits on another's connection to
//! close — browsers give an HTTP/1.1 host six connections), and a dropped connection is shown as
//! "reconnecting" and comes back by itself.

mod common;

use std::time::{Duration, Instant};

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::webdriver::Browser;
use capstan_testkit::{GitServer, TestCluster};

use common::{capstan, capstan_in, kubectl, text, until};

const WAIT: Duration = Duration::from_secs(90);
/// Eight Application pages, more than the six connections a browser gives one HTTP/1.1 host.
const TABS: usize = 8;
/// How long a tab may take to show its Application. Generous for two busy cores; what it rules out
/// is a tab waiting on other tabs' connections (before, the fourth tab stayed blank until others
/// closed).
const RENDERS_WITHIN: Duration = Duration::from_secs(5);

fn testid(id: &str) -> String {
    format!("[data-testid={id:?}]")
}

fn settings(color: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\ndata: {{color: {color}}}\n")
}

fn application(ns: &str, i: usize, repo: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: tab-{i}, namespace: {ns}}}\nspec:\n  source: {{repoURL: \"{repo}\", targetRevision: main, path: app}}\n  destination: {{server: \"https://kubernetes.default.svc\", namespace: ui-tab-{i}}}\n"
    )
}

fn revision(kc: &str, ns: &str, app: &str) -> String {
    let out = kubectl(
        kc,
        &[
            "-n",
            ns,
            "get",
            "application",
            app,
            "-o",
            "jsonpath={.status.sync.revision}",
        ],
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_application_tabs_each_render_and_stay_live() -> anyhow::Result<()> {
    // The run's shared plane, Capstan in a namespace of this test's own.
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);
    let scratch = tempfile::tempdir()?;

    git.create_repo("tabs")?;
    let v1 = git.commit("tabs", "main", &[("app/settings.yaml", Some(&settings("blue")))], "v1")?;
    let file = scratch.path().join("apps.yaml");
    let apps: Vec<String> = (0..TABS).map(|i| application(&ns, i, &git.git_url("tabs"))).collect();
    std::fs::write(&file, apps.join("---\n"))?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));

    let cache = scratch.path().join("cache");
    let (controller, server, _, _) = common::controller_with_server_log(&kc, &cache, &["-n", &ns])?;
    let listen = server.trim_start_matches("http://").to_string();
    let port = server.rsplit(':').next().unwrap_or_default().to_string();
    // localhost, not 127.0.0.1: the browser treats it as a secure context for the Secure cookie.
    let base = format!("http://localhost:{port}");
    for i in 0..TABS {
        until(&format!("tab-{i} compared at v1"), WAIT, || {
            revision(&kc, &ns, &format!("tab-{i}")) == v1
        });
    }

    let browser = Browser::start()?;
    browser.goto(&format!("{base}/login"))?;
    browser.wait_for(&testid("login-username"), WAIT)?.send_keys("admin")?;
    browser
        .wait_for(&testid("login-password"), WAIT)?
        .send_keys(&password)?;
    browser.click(&testid("login-submit"), WAIT)?;
    browser.wait_for(&testid("app-row"), WAIT)?;

    // Eight Application pages, each in its own tab, all kept open.
    let mut tabs = vec![browser.tab()?];
    let mut took = Vec::new();
    for i in 0..TABS {
        if i > 0 {
            let tab = browser.new_tab()?;
            browser.switch_to(&tab)?;
            tabs.push(tab);
        }
        let started = Instant::now();
        browser.goto(&format!("{base}/applications/tab-{i}"))?;
        browser.wait_text(&testid("app-revision"), RENDERS_WITHIN, |t| t.contains(&v1[..7]))?;
        browser.wait_for(
            &format!("{}[data-state=\"live\"]", testid("live-status")),
            RENDERS_WITHIN,
        )?;
        took.push(started.elapsed());
    }
    eprintln!("eight tabs: each rendered and live after {took:?}");
    for (i, t) in took.iter().enumerate() {
        assert!(*t < RENDERS_WITHIN, "tab {i} took {t:?}");
    }

    // Every tab is live at once: a new commit reaches each page without a reload.
    let v2 = git.commit("tabs", "main", &[("app/settings.yaml", Some(&settings("green")))], "v2")?;
    for i in 0..TABS {
        let out = capstan_in(&kc, &ns, &["app", "get", &format!("tab-{i}"), "--refresh"]);
        assert!(out.status.success(), "{}", text(&out));
    }
    for (i, tab) in tabs.iter().enumerate() {
        browser.switch_to(tab)?;
        browser
            .wait_text(&testid("app-revision"), WAIT, |t| t.contains(&v2[..7]))
            .map_err(|e| anyhow::anyhow!("tab {i}: {e}"))?;
    }

    // The server goes away: the page says its live updates are lost and it is reconnecting...
    drop(controller);
    let retrying = format!("{}[data-state=\"retrying\"]", testid("live-status"));
    let status = browser.wait_for(&retrying, WAIT)?;
    assert!(status.displayed()?, "the retrying state is visible");
    assert!(status.text()?.contains("reconnecting"), "{}", status.text()?);
    // ...and once it is back, the tab is live again on its own (no reload) and still updating.
    let (_controller, _, _, _) = common::controller_listening(&kc, &cache, &listen, &["-n", &ns])?;
    let live = format!("{}[data-state=\"live\"]", testid("live-status"));
    browser.wait_for(&live, WAIT)?;
    assert!(!browser.wait_for(&live, WAIT)?.displayed()?, "no banner while live");
    let v3 = git.commit("tabs", "main", &[("app/settings.yaml", Some(&settings("red")))], "v3")?;
    let last = format!("tab-{}", TABS - 1);
    until("the restarted controller answers", WAIT, || {
        capstan_in(&kc, &ns, &["app", "get", &last, "--refresh"])
            .status
            .success()
    });
    browser.wait_text(&testid("app-revision"), WAIT, |t| t.contains(&v3[..7]))?;
    Ok(())
}
