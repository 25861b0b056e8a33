//! The Policies page, in real headless Chromium against `capstan controller --listen` on a real
//! control plane: reached from the navigation, it shows a policy that does not compile by its name,
//! marked not ready, with the compile error the controller wrote on its status; at a phone's width
//! nothing scrolls sideways.

mod common;

use std::time::Duration;

use capstan_testkit::TestCluster;
use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::webdriver::Browser;

use common::{capstan, kubectl, text, until};

const WAIT: Duration = Duration::from_secs(90);

fn testid(id: &str) -> String {
    format!("[data-testid={id:?}]")
}

/// A policy whose only validation does not compile.
fn broken_policy(ns: &str) -> String {
    format!(
        r#"apiVersion: capstan.dev/v1alpha1
kind: Policy
metadata: {{name: replica-limit, namespace: {ns}}}
spec:
  matchConstraints:
    resourceRules: [{{apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}}]
  validations: [{{expression: "object.spec.replicas <=", message: at most 5 replicas}}]
  validationActions: [Deny]
  projects: [team-a]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_policies_page_shows_a_policy_and_its_compile_error() -> anyhow::Result<()> {
    // The run's shared plane, Capstan in a namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);
    let scratch = tempfile::tempdir()?;
    let file = scratch.path().join("policy.yaml");
    std::fs::write(&file, broken_policy(&ns))?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));
    let (_controller, server, _) = common::controller_with_server(&kc, &scratch.path().join("cache"), &["-n", &ns])?;
    let port = server.rsplit(':').next().unwrap_or_default().to_string();
    // localhost, not 127.0.0.1: the browser treats it as a secure context for the Secure cookie.
    let base = format!("http://localhost:{port}");
    // The controller compiles the policy and writes why it is not ready.
    until("the policy's Ready condition", WAIT, || {
        let out = kubectl(
            &kc,
            &[
                "-n",
                &ns,
                "get",
                "policy",
                "replica-limit",
                "-o",
                "jsonpath={.status.conditions[0].status}",
            ],
        );
        String::from_utf8_lossy(&out.stdout) == "False"
    });

    let browser = Browser::start()?;
    browser.goto(&format!("{base}/login"))?;
    browser.wait_for(&testid("login-username"), WAIT)?.send_keys("admin")?;
    browser
        .wait_for(&testid("login-password"), WAIT)?
        .send_keys(&password)?;
    browser.click(&testid("login-submit"), WAIT)?;
    // The top bar shows once logged in.
    let nav = format!("#topbar:not([hidden]) {}", testid("nav-policies"));
    browser.wait_for(&nav, WAIT)?;
    browser.click(&nav, WAIT)?;

    let policy = format!("{}[data-policy=\"replica-limit\"]", testid("policy"));
    browser.wait_text(&format!("{policy} {}", testid("policy-name")), WAIT, |t| {
        t == "replica-limit"
    })?;
    let ready = browser.wait_text(&format!("{policy} {}", testid("policy-ready")), WAIT, |t| {
        t.contains("Not ready")
    })?;
    assert!(ready.contains('✖'), "a symbol, not colour alone: {ready}");
    let error = browser.wait_text(&format!("{policy} {}", testid("policy-error")), WAIT, |t| !t.is_empty())?;
    assert!(
        error.contains("spec.validations[0].expression") && error.contains("does not compile"),
        "{error}"
    );
    let whole = browser.wait_text(&policy, WAIT, |t| t.contains("team-a"))?;
    assert!(whole.contains("Deny") && whole.contains("every cluster"), "{whole}");
    assert_eq!(browser.execute("return document.title;", vec![])?, "Policies · Capstan");

    // A phone's width (390 px): the error wraps, nothing scrolls sideways.
    browser.cdp(
        "Emulation.setDeviceMetricsOverride",
        serde_json::json!({"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": true}),
    )?;
    browser.goto(&format!("{base}/policies"))?;
    browser.wait_for(&format!("{policy} {}", testid("policy-error")), WAIT)?;
    let layout = browser.execute(
        "const error = document.querySelector('[data-testid=\"policy-error\"]');
         return [document.documentElement.scrollWidth, window.innerWidth, error.getBoundingClientRect().right];",
        vec![],
    )?;
    let width = layout[1].as_f64().unwrap_or(0.0);
    assert_eq!(width, 390.0, "{layout}");
    assert!(
        layout[0].as_f64().unwrap_or(f64::MAX) <= width,
        "no sideways scrolling: {layout}"
    );
    assert!(layout[2].as_f64().unwrap_or(f64::MAX) <= width, "{layout}");
    browser.cdp("Emulation.clearDeviceMetricsOverride", serde_json::json!({}))?;
    Ok(())
}
