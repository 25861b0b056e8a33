//! The web UI end to end in real headless Chromium (through chromedriver), against
//! `capstan controller --listen` on a real control plane: log in, open an application, see its
//! resource tree, sync it and watch it become Healthy, see a diff, roll back from the history — and a
//! read-only user sees no Sync button and gets 403 from the API when trying anyway. Markup in a value
//! from Git (`<img src=x onerror=...>` in a ConfigMap) is shown in the diff as text and never runs.
//!
//! With `CAPSTAN_SCREENSHOTS=DIR` the main pages are saved there as PNG (that is how
//! `docs/images/` is made).

mod common;

use std::path::PathBuf;
use std::time::Duration;

use capstan_testkit::webdriver::Browser;
use capstan_testkit::{GitServer, TestCluster};
use serde_json::json;

use common::{capstan, kubectl, text, until};

const WAIT: Duration = Duration::from_secs(90);

/// Markup in a value from Git: the UI must show it as text, never as an element (it would set
/// `window.__xss` if it ran).
const XSS: &str = "<img src=x onerror=\"window.__xss=1\">";

fn manifests(color: &str, note: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: guestbook-settings}}\ndata: {{color: {color}, note: '{note}'}}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: guestbook-ui}}\nspec:\n  selector: {{app: guestbook-ui}}\n  ports: [{{port: 80}}]\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: guestbook-ui}}\nspec:\n  replicas: 2\n  selector: {{matchLabels: {{app: guestbook-ui}}}}\n  template:\n    metadata: {{labels: {{app: guestbook-ui}}}}\n    spec: {{containers: [{{name: ui, image: guestbook:v1}}]}}\n"
    )
}

fn testid(id: &str) -> String {
    format!("[data-testid={id:?}]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_person_logs_in_syncs_and_rolls_back_in_the_browser() -> anyhow::Result<()> {
    let shots: Option<PathBuf> = std::env::var_os("CAPSTAN_SCREENSHOTS").map(PathBuf::from);
    let scratch = tempfile::tempdir()?;
    let shot_dir = shots.clone().unwrap_or_else(|| scratch.path().to_path_buf());
    std::fs::create_dir_all(&shot_dir)?;

    // The run's shared plane, Capstan in a namespace of this test's own; the destination namespace
    // `guestbook` is this test's alone (the screenshots show it).
    let cluster = TestCluster::shared().await?;
    let git = GitServer::start().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = capstan_testkit::capstan::unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);
    assert!(
        capstan(
            &kc,
            &[
                "account",
                "set-password",
                "viewer",
                "--password",
                "viewer-password",
                "-n",
                &ns
            ]
        )
        .status
        .success()
    );
    let policy = "grants:\n  - {role: read-only, projects: ['*'], users: [viewer]}\n";
    common::create_policy(&kc, &ns, policy);

    git.create_repo("examples")?;
    let v1 = git.commit(
        "examples",
        "main",
        &[("guestbook/all.yaml", Some(&manifests("blue", "plain")))],
        "v1",
    )?;
    let apps = scratch.path().join("apps.yaml");
    std::fs::write(
        &apps,
        format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: guestbook, namespace: {ns}, labels: {{team: web}}}}\nspec:\n  source: {{repoURL: '{}', targetRevision: main, path: guestbook}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: guestbook}}\n  syncPolicy: {{syncOptions: [CreateNamespace=true]}}\n",
            git.git_url("examples")
        ),
    )?;
    let out = kubectl(&kc, &["apply", "-f", &apps.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));

    let cache = tempfile::tempdir()?;
    let (_controller, server, _) = common::controller_with_server(&kc, cache.path(), &["-n", &ns])?;
    let addr = server.trim_start_matches("http://").to_string();
    // localhost, not 127.0.0.1: the browser treats it as a secure context for the Secure cookie.
    let port = addr.rsplit(':').next().unwrap_or_default();
    let base = format!("http://localhost:{port}");

    let browser = Browser::start()?;
    browser.goto(&format!("{base}/applications"))?;
    // Not logged in: the UI sends us to the login page.
    browser.wait_for(&testid("login-username"), WAIT)?.send_keys("admin")?;
    browser
        .wait_for(&testid("login-password"), WAIT)?
        .send_keys("not-the-password")?;
    browser.click(&testid("login-submit"), WAIT)?;
    browser.wait_text(&testid("login-error"), WAIT, |t| !t.trim().is_empty())?;
    browser.screenshot(&shot_dir.join("login.png"))?;
    browser.goto(&format!("{base}/login"))?;
    browser.wait_for(&testid("login-username"), WAIT)?.send_keys("admin")?;
    browser
        .wait_for(&testid("login-password"), WAIT)?
        .send_keys(&password)?;
    browser.click(&testid("login-submit"), WAIT)?;

    // The list, live: OutOfSync before the first sync.
    let row = format!("{}[data-app=\"guestbook\"]", testid("app-row"));
    browser.wait_for(&row, WAIT)?;
    browser.wait_text(&format!("{row} {}", testid("app-sync-badge")), WAIT, |t| {
        t.contains("OutOfSync")
    })?;
    browser.screenshot(&shot_dir.join("applications.png"))?;

    // The application page: its tree, then a sync until Synced and Healthy.
    browser.click(&format!("{row} {}", testid("app-link")), WAIT)?;
    browser.wait_text(&testid("app-title"), WAIT, |t| t.contains("guestbook"))?;
    browser.click(&testid("tab-tree"), WAIT)?;
    browser.wait_for(&format!("{}[data-kind=\"Deployment\"]", testid("tree-node")), WAIT)?;
    browser.click(&testid("sync-button"), WAIT)?;
    browser.click(&testid("sync-submit"), WAIT)?;
    browser.wait_text(&testid("app-health-badge"), WAIT, |t| t.contains("Healthy"))?;
    browser.wait_text(&testid("app-sync-badge"), WAIT, |t| {
        t.contains("Synced") && !t.contains("OutOfSync")
    })?;
    // Live: the Deployment's Pods appear in the tree without reloading.
    browser.wait_for(&format!("{}[data-kind=\"Pod\"]", testid("tree-node")), WAIT)?;
    browser.screenshot(&shot_dir.join("application-tree.png"))?;
    browser.click(&format!("{}[data-kind=\"Deployment\"]", testid("tree-node")), WAIT)?;
    browser.wait_text(&testid("resource-panel"), WAIT, |t| {
        t.contains("guestbook-ui") && t.contains("replicas")
    })?;

    browser.wait_text(&testid("operation-phase"), WAIT, |t| t.contains("Succeeded"))?;
    // A new commit: refresh shows the diff; sync it.
    let v2 = git.commit(
        "examples",
        "main",
        &[("guestbook/all.yaml", Some(&manifests("green", XSS)))],
        "v2",
    )?;
    browser.goto(&format!("{base}/applications/guestbook"))?;
    browser.click(&testid("refresh-button"), WAIT)?;
    browser.wait_text(&testid("app-sync-badge"), WAIT, |t| t.contains("OutOfSync"))?;
    browser.click(&testid("tab-diff"), WAIT)?;
    browser.wait_text(&testid("diff-object"), WAIT, |t| t.contains("color: green"))?;
    // The markup from Git is shown as text: no element made of it, nothing run.
    browser.wait_text(&testid("diff-object"), WAIT, |t| {
        t.contains("note: ") && t.contains("<img src=x onerror=")
    })?;
    let injected = browser.execute(
        "return [document.querySelectorAll('main img, main [onerror]').length, window.__xss === undefined]",
        vec![],
    )?;
    assert_eq!(injected, json!([0, true]), "markup from Git became an element");
    browser.screenshot(&shot_dir.join("application-diff.png"))?;
    browser.click(&testid("sync-button"), WAIT)?;
    browser.click(&testid("sync-submit"), WAIT)?;
    until("the ConfigMap at green", WAIT, || {
        text(&kubectl(
            &kc,
            &[
                "-n",
                "guestbook",
                "get",
                "configmap",
                "guestbook-settings",
                "-o",
                "jsonpath={.data.color}",
            ],
        )) == "green"
    });

    // A new operation is refused while one runs: wait for the sync to end.
    browser.wait_text(&testid("operation-phase"), WAIT, |t| t.contains("Succeeded"))?;
    // History: roll back to the first sync.
    browser.click(&testid("tab-history"), WAIT)?;
    let first = format!("{}[data-id=\"0\"]", testid("history-row"));
    browser.wait_for(&format!("{}[data-id=\"1\"]", testid("history-row")), WAIT)?;
    let first_text = browser.wait_for(&first, WAIT)?.text()?;
    assert!(first_text.contains(&v1[..7]), "{first_text}");
    browser.screenshot(&shot_dir.join("application-history.png"))?;
    browser.click(&format!("{first} {}", testid("rollback-button")), WAIT)?;
    browser.click(&testid("rollback-confirm"), WAIT)?;
    until("the ConfigMap back at blue", WAIT, || {
        text(&kubectl(
            &kc,
            &[
                "-n",
                "guestbook",
                "get",
                "configmap",
                "guestbook-settings",
                "-o",
                "jsonpath={.data.color}",
            ],
        )) == "blue"
    });
    assert!(!v2.is_empty());

    // Clusters page.
    browser.click(&testid("nav-clusters"), WAIT)?;
    browser.wait_text(&testid("cluster-row"), WAIT, |t| t.contains("in-cluster"))?;

    // A read-only user: no Sync button, and the API refuses a sync with 403.
    browser.click(&testid("logout"), WAIT)?;
    browser.wait_for(&testid("login-username"), WAIT)?.send_keys("viewer")?;
    browser
        .wait_for(&testid("login-password"), WAIT)?
        .send_keys("viewer-password")?;
    browser.click(&testid("login-submit"), WAIT)?;
    browser.wait_for(&row, WAIT)?;
    browser.goto(&format!("{base}/applications/guestbook"))?;
    browser.wait_text(&testid("app-title"), WAIT, |t| t.contains("guestbook"))?;
    browser.wait_for(&testid("tab-tree"), WAIT)?;
    assert!(
        browser
            .find_all(&testid("sync-button"))?
            .iter()
            .all(|b| !b.displayed().unwrap_or(false)),
        "a read-only user sees no Sync button"
    );
    let status = browser.execute_async(
        "const done = arguments[arguments.length - 1];
         fetch('/api/userinfo').then(r => r.json()).then(me =>
           fetch('/api/applications/guestbook/sync', {method: 'POST', credentials: 'same-origin',
             headers: {'Content-Type': 'application/json', 'X-CSRF-Token': me.csrfToken}, body: '{}'}))
         .then(r => done(r.status), e => done(String(e)));",
        vec![],
    )?;
    assert_eq!(status, json!(403), "the API refuses a read-only user's sync");
    Ok(())
}
