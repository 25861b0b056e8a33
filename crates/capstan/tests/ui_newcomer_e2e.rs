//! What a new user reads first in the web UI, in real headless Chromium against
//! `capstan controller --listen` on a real control plane: the list's message column, a refused
//! rollback shown inside its dialog (and no rollback offered to the entry already deployed), the
//! generated Applications' health on the ApplicationSet page, `ErrorOccurred=False` not drawn as an
//! error, the clusters' labels on the Clusters page, and the list sorted on a column (kept in the
//! URL).

mod common;

use std::time::Duration;

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::webdriver::Browser;
use capstan_testkit::{GitServer, TestCluster};

use common::{capstan, capstan_in, kubectl, text, until};

const WAIT: Duration = Duration::from_secs(90);

const SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n";

/// The playground's metadata-only `in-cluster` Secret, in Capstan's namespace `ns`.
fn in_cluster_labels(ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cluster-in-cluster\n  namespace: {ns}\n  labels: {{capstan.dev/secret-type: cluster, env: staging}}\ntype: Opaque\nstringData: {{name: in-cluster, server: 'https://kubernetes.default.svc'}}\n"
    )
}

fn testid(id: &str) -> String {
    format!("[data-testid={id:?}]")
}

fn manifests(ns: &str, repo: &str) -> String {
    format!(
        r#"apiVersion: capstan.dev/v1alpha1
kind: Application
metadata: {{name: auto, namespace: {ns}}}
spec:
  source: {{repoURL: "{repo}", targetRevision: main, path: app}}
  destination: {{server: "https://kubernetes.default.svc", namespace: ui-newcomer-auto}}
  syncPolicy: {{automated: {{}}, syncOptions: [CreateNamespace=true]}}
---
apiVersion: capstan.dev/v1alpha1
kind: Application
metadata: {{name: broken, namespace: {ns}}}
spec:
  source: {{repoURL: "{repo}", targetRevision: main, path: broken}}
  destination: {{server: "https://kubernetes.default.svc", namespace: ui-newcomer-broken}}
---
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {{name: fleet, namespace: {ns}}}
spec:
  generators:
  - list: {{elements: [{{svc: one}}]}}
  template:
    metadata: {{name: "fleet-{{{{svc}}}}"}}
    spec:
      source: {{repoURL: "{repo}", targetRevision: main, path: app}}
      destination: {{server: "https://kubernetes.default.svc", namespace: "ui-newcomer-fleet-{{{{svc}}}}"}}
      syncPolicy: {{automated: {{}}, syncOptions: [CreateNamespace=true]}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_ui_tells_a_newcomer_what_is_wrong_where_they_look() -> anyhow::Result<()> {
    // The run's shared plane, Capstan in a namespace of this test's own.
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);
    let scratch = tempfile::tempdir()?;

    git.create_repo("ui")?;
    git.commit(
        "ui",
        "main",
        &[
            ("app/settings.yaml", Some(SETTINGS)),
            ("broken/bad.yaml", Some("kind: ConfigMap\nmetadata: [unclosed\n")),
        ],
        "v1",
    )?;
    let file = scratch.path().join("objects.yaml");
    std::fs::write(
        &file,
        format!("{}---\n{}", in_cluster_labels(&ns), manifests(&ns, &git.git_url("ui"))),
    )?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));

    let (_controller, server, _) = common::controller_with_server(&kc, &scratch.path().join("cache"), &["-n", &ns])?;
    let port = server.rsplit(':').next().unwrap_or_default().to_string();
    // localhost, not 127.0.0.1: the browser treats it as a secure context for the Secure cookie.
    let base = format!("http://localhost:{port}");

    // Two automated syncs: a history of two entries.
    let history = || {
        let out = kubectl(
            &kc,
            &[
                "-n",
                &ns,
                "get",
                "application",
                "auto",
                "-o",
                "jsonpath={.status.history[*].id}",
            ],
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    until("auto's first sync", WAIT, || history() == "0");
    git.commit(
        "ui",
        "main",
        &[("app/settings.yaml", Some(&SETTINGS.replace("blue", "green")))],
        "v2",
    )?;
    let refresh = capstan_in(&kc, &ns, &["app", "get", "auto", "--refresh"]);
    assert!(refresh.status.success(), "{}", text(&refresh));
    until("auto's second sync", WAIT, || history() == "0 1");

    let browser = Browser::start()?;
    browser.goto(&format!("{base}/login"))?;
    // Logged out: no navigation, no Log out.
    browser.wait_for(&testid("login-username"), WAIT)?;
    for bar in browser.find_all("#topbar")? {
        assert!(!bar.displayed()?, "the login page shows no top bar");
    }
    assert!(!browser.wait_for(&testid("logout"), WAIT)?.displayed()?);
    browser.wait_for(&testid("login-username"), WAIT)?.send_keys("admin")?;
    browser
        .wait_for(&testid("login-password"), WAIT)?
        .send_keys(&password)?;
    browser.click(&testid("login-submit"), WAIT)?;

    // The list says what is wrong with broken, in its row.
    let broken = format!("{}[data-app=\"broken\"] {}", testid("app-row"), testid("app-message"));
    let message = browser.wait_text(&broken, WAIT, |t| t.contains("ComparisonError"))?;
    assert!(message.contains("bad.yaml"), "{message}");
    // Cut cells show the whole text on hover.
    let cluster = format!("{}[data-app=\"broken\"] {}", testid("app-row"), testid("app-cluster"));
    assert_eq!(
        browser.wait_for(&cluster, WAIT)?.attr("title")?.as_deref(),
        Some("in-cluster")
    );
    let message_title = browser.wait_for(&broken, WAIT)?.attr("title")?.unwrap_or_default();
    assert!(message_title.contains("ComparisonError"), "{message_title}");
    let healthy = format!("{}[data-app=\"auto\"] {}", testid("app-row"), testid("app-message"));
    assert_eq!(browser.wait_for(&healthy, WAIT)?.text()?, "", "nothing wrong with auto");

    // Counts per status; a click filters on one.
    browser.wait_text(
        &format!("{} [data-count=\"sync-Synced\"]", testid("status-counts")),
        WAIT,
        |t| t.contains("Synced") && t.trim_end().ends_with('2'),
    )?;
    browser.click("[data-count=\"sync-Synced\"]", WAIT)?;
    until("only the Synced Applications listed", Duration::from_secs(10), || {
        browser.url().is_ok_and(|u| u.ends_with("?sync=Synced"))
            && browser
                .find_all(&format!("{}[data-app=\"broken\"]", testid("app-row")))
                .is_ok_and(|r| r.is_empty())
    });
    browser.goto(&format!("{base}/applications"))?;

    // Columns sort; the sort is kept in the URL like the filters.
    let first_row = || {
        browser
            .find_all(&testid("app-row"))
            .ok()
            .and_then(|rows| rows.into_iter().next())
            .and_then(|r| r.attr("data-app").ok().flatten())
            .unwrap_or_default()
    };
    until("sorted by name", Duration::from_secs(10), || first_row() == "auto");
    browser.click(&testid("sort-name"), WAIT)?;
    until("sorted by name, descending", Duration::from_secs(10), || {
        first_row() == "fleet-one" && browser.url().is_ok_and(|u| u.ends_with("?sort=-name"))
    });
    let header = browser.wait_for(&format!("th:has({})", testid("sort-name")), WAIT)?;
    assert_eq!(header.attr("aria-sort")?.as_deref(), Some("descending"));
    browser.click(&testid("sort-message"), WAIT)?;
    // broken is the only one with a message: last when ascending (empty first), first descending.
    until("sorted by message", Duration::from_secs(10), || {
        browser.url().is_ok_and(|u| u.ends_with("?sort=message")) && first_row() != "broken"
    });
    browser.click(&testid("sort-message"), WAIT)?;
    until("sorted by message, descending", Duration::from_secs(10), || {
        first_row() == "broken"
    });
    let url = browser.url()?;
    browser.goto(&url)?;
    browser.wait_for(&testid("app-row"), WAIT)?;
    until("the sort applies after a reload", Duration::from_secs(10), || {
        first_row() == "broken"
    });
    browser.goto(&format!("{base}/applications"))?;

    // Filters are kept in the URL: a reload shows the same list.
    browser.wait_for(&testid("app-search"), WAIT)?.send_keys("brok")?;
    until("the URL to carry the filter", Duration::from_secs(10), || {
        browser.url().is_ok_and(|u| u.ends_with("?search=brok"))
    });
    let url = browser.url()?;
    browser.goto(&url)?;
    browser.wait_for(&format!("{}[data-app=\"broken\"]", testid("app-row")), WAIT)?;
    let value = browser.execute(
        "return document.querySelector('[data-testid=\"app-search\"]').value",
        vec![],
    )?;
    assert_eq!(value, "brok", "the search box is filled from the URL");
    assert!(
        browser
            .find_all(&format!("{}[data-app=\"auto\"]", testid("app-row")))?
            .is_empty(),
        "the filter applies after the reload"
    );

    // Rollback of an automated Application: refused, and the reason is in the dialog.
    browser.goto(&format!("{base}/applications/auto"))?;
    browser.click(&testid("tab-history"), WAIT)?;
    let newest = format!("{}[data-id=\"1\"]", testid("history-row"));
    let oldest = format!("{}[data-id=\"0\"]", testid("history-row"));
    browser.wait_for(&newest, WAIT)?;
    assert!(
        browser
            .find_all(&format!("{newest} {}", testid("rollback-button")))?
            .is_empty(),
        "no rollback to the entry already deployed"
    );
    browser.wait_for(&format!("{newest} {}", testid("history-current")), WAIT)?;
    // Times read as how long ago, the exact time (to the second) on hover.
    let deployed = browser.wait_for(&format!("{newest} {}", testid("time")), WAIT)?;
    assert!(deployed.text()?.ends_with(" ago"), "{}", deployed.text()?);
    let exact = deployed.attr("title")?.unwrap_or_default();
    assert!(exact.len() == 20 && exact.ends_with('Z'), "{exact}");
    // Refresh says it is refreshing until the controller has compared again.
    browser.wait_for(&testid("refresh-button"), WAIT)?;
    browser.execute(
        "const b = document.querySelector('[data-testid=\"refresh-button\"]'); window.__refreshing = false;
         new MutationObserver(() => { if (b.disabled && b.textContent.includes('Refreshing')) window.__refreshing = true; })
           .observe(b, {attributes: true, childList: true, subtree: true, characterData: true});",
        vec![],
    )?;
    browser.click(&testid("refresh-button"), WAIT)?;
    browser.wait_text(&testid("refresh-button"), WAIT, |t| t == "Refresh")?;
    assert_eq!(
        browser.execute("return window.__refreshing", vec![])?,
        true,
        "Refresh showed it was busy"
    );
    let title = browser.execute("return document.title", vec![])?;
    assert_eq!(title, "auto · Capstan", "the tab says which Application");
    browser.click(&format!("{oldest} {}", testid("rollback-button")), WAIT)?;
    browser.wait_for("[role=\"dialog\"]", WAIT)?;
    let focused = browser.execute(
        "return document.querySelector('[role=\"dialog\"]').contains(document.activeElement)",
        vec![],
    )?;
    assert_eq!(focused, true, "the focus moves into the dialog");
    // Busy while the request is out: the button is disabled (seen by an observer set up before).
    browser.execute(
        "const b = document.querySelector('[data-testid=\"rollback-confirm\"]'); window.__busy = false;
         new MutationObserver(() => { if (b.disabled && b.textContent.includes('Working')) window.__busy = true; })
           .observe(b, {attributes: true, childList: true, subtree: true, characterData: true});",
        vec![],
    )?;
    browser.click(&testid("rollback-confirm"), WAIT)?;
    let error = browser.wait_text(&format!("[role=\"dialog\"] {}", testid("dialog-error")), WAIT, |t| {
        !t.is_empty()
    })?;
    assert!(error.contains("automated sync is enabled"), "{error}");
    assert_eq!(
        browser.execute("return window.__busy", vec![])?,
        true,
        "the button showed it was busy"
    );
    let button = browser.wait_for(&testid("rollback-confirm"), WAIT)?;
    assert_eq!(button.attr("disabled")?, None, "usable again once the answer is in");
    let still_open = browser.find_all("[role=\"dialog\"]")?;
    assert_eq!(still_open.len(), 1, "the dialog stays open with the reason");
    // Esc closes it.
    browser
        .wait_for("[role=\"dialog\"] button[data-cancel]", WAIT)?
        .send_keys("\u{E00C}")?;
    until("the dialog closed by Esc", Duration::from_secs(10), || {
        browser.find_all("[role=\"dialog\"]").is_ok_and(|d| d.is_empty())
    });

    // The ApplicationSet page: the generated Application's health, and ErrorOccurred=False is no error.
    until("fleet-one Healthy", WAIT, || {
        let out = kubectl(
            &kc,
            &[
                "-n",
                &ns,
                "get",
                "application",
                "fleet-one",
                "-o",
                "jsonpath={.status.health.status}",
            ],
        );
        String::from_utf8_lossy(&out.stdout) == "Healthy"
    });
    browser.goto(&format!("{base}/applicationsets/fleet"))?;
    let row = "table tbody tr";
    browser.wait_text(row, WAIT, |t| t.contains("fleet-one") && t.contains("Healthy"))?;
    let marks = browser.execute(
        "return [...document.querySelectorAll('[data-testid=\"condition-mark\"]')].map(m => [m.parentElement.textContent, m.dataset.bad])",
        vec![],
    )?;
    let error_occurred = marks
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m[0].as_str().is_some_and(|t| t.contains("ErrorOccurred")))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        error_occurred[1], "false",
        "ErrorOccurred=False is not an error: {marks}"
    );
    assert!(
        error_occurred[0]
            .as_str()
            .is_some_and(|t| t.contains("✔") && t.contains("ErrorOccurred=False")),
        "{marks}"
    );

    // The Clusters page shows in-cluster's labels.
    browser.click(&testid("nav-clusters"), WAIT)?;
    browser.wait_text(
        &format!("{}[data-cluster=\"in-cluster\"]", testid("cluster-row")),
        WAIT,
        |t| t.contains("env=staging"),
    )?;

    // A phone's width (390 px): the list's rows are cards, each cell named, and nothing scrolls
    // sideways.
    browser.cdp(
        "Emulation.setDeviceMetricsOverride",
        serde_json::json!({"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": true}),
    )?;
    browser.goto(&format!("{base}/applications"))?;
    browser.wait_text(&broken, WAIT, |t| t.contains("ComparisonError"))?;
    let layout = browser.execute(
        "const cell = document.querySelector('[data-app=\"broken\"] [data-testid=\"app-message\"]');
         return [document.documentElement.scrollWidth, window.innerWidth,
                 getComputedStyle(cell, '::before').content, cell.getBoundingClientRect().right];",
        vec![],
    )?;
    let width = layout[1].as_f64().unwrap_or(0.0);
    assert_eq!(width, 390.0, "{layout}");
    assert!(
        layout[0].as_f64().unwrap_or(f64::MAX) <= width,
        "no sideways scrolling: {layout}"
    );
    assert!(layout[2].as_str().is_some_and(|c| c.contains("Message")), "{layout}");
    assert!(layout[3].as_f64().unwrap_or(f64::MAX) <= width, "{layout}");
    browser.cdp("Emulation.clearDeviceMetricsOverride", serde_json::json!({}))?;
    Ok(())
}
