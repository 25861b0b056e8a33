//! OpenID Connect single sign-on end to end: a real provider (npm `oidc-provider`, run by Node on
//! loopback), `capstan controller --listen` on a real control plane, and headless Chromium going
//! through the provider's own login and consent pages and back.
//!
//! A user of a group granted `sync` lands back on the page the login started from and may sync; a
//! user of no group logs in but may read and sync nothing; an answer that does not belong to
//! the login in progress (wrong `state`) is refused with a message on the login page. The CLI logs
//! in the same way (`capstan login --sso`): the browser hands the code to its loopback listener, or
//! shows it to paste; a code redeemed with another verifier is refused.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use capstan_testkit::TestCluster;
use capstan_testkit::webdriver::Browser;
use serde_json::{Value, json};

use common::{capstan, kubectl, text, until};

const WAIT: Duration = Duration::from_secs(60);
const CLIENT_ID: &str = "capstan";
const CLIENT_SECRET: &str = "sso-test-secret";

fn testid(id: &str) -> String {
    format!("[data-testid={id:?}]")
}

/// The OpenID Connect provider process, killed when dropped.
struct Provider {
    child: Child,
    issuer: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Provider {
    fn start(redirect_uri: &str) -> anyhow::Result<Provider> {
        let modules = capstan_playground::binaries::cache_dir().join("oidc");
        anyhow::ensure!(
            modules.join("node_modules/oidc-provider/package.json").is_file(),
            "oidc-provider is not installed under {}: run scripts/setup.sh",
            modules.display()
        );
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc/provider.mjs");
        let mut child = Command::new("node")
            .arg(script)
            .arg(&modules)
            .args([CLIENT_ID, CLIENT_SECRET, redirect_uri])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut provider = Provider {
            child,
            issuer: String::new(),
        };
        let mut lines = BufReader::new(stdout).lines();
        let first = lines
            .next()
            .ok_or_else(|| anyhow::anyhow!("the provider exited before listening"))??;
        provider.issuer = first
            .strip_prefix("listening ")
            .ok_or_else(|| anyhow::anyhow!("unexpected first line from the provider: {first}"))?
            .to_string();
        std::thread::spawn(move || for _ in lines {});
        Ok(provider)
    }
}

/// `/api/userinfo` and the status of a sync request, as the logged-in page sees them.
fn whoami_and_try_sync(browser: &Browser) -> anyhow::Result<Value> {
    browser.execute_async(
        "const done = arguments[arguments.length - 1];
         fetch('/api/userinfo').then(r => r.json()).then(me =>
           fetch('/api/applications').then(r => r.json()).then(list =>
             fetch('/api/applications/guestbook/refresh', {method: 'POST', credentials: 'same-origin',
               headers: {'Content-Type': 'application/json', 'X-CSRF-Token': me.csrfToken}, body: '{}'})
             .then(r => done({me, apps: (list.items || list).map(a => a.name), refresh: r.status}))))
         .catch(e => done(String(e)));",
        vec![],
    )
}

/// Log in through the provider's development pages (any password) as `login`.
fn provider_login(browser: &Browser, login: &str) -> anyhow::Result<()> {
    browser.wait_for("input[name=login]", WAIT)?.send_keys(login)?;
    browser.wait_for("input[name=password]", WAIT)?.send_keys("any")?;
    browser.click("button[type=submit]", WAIT)?;
    // The consent page ("Continue").
    browser.wait_text("button[type=submit]", WAIT, |t| t.contains("Continue"))?;
    browser.click("button[type=submit]", WAIT)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn people_log_in_through_an_oidc_provider_and_get_their_groups_roles() -> anyhow::Result<()> {
    // The run's shared plane, Capstan in a namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = capstan_testkit::capstan::unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let policy = "grants:\n  - {role: sync, projects: ['*'], groups: [developers]}\n";
    common::create_policy(&kc, &ns, policy);
    let scratch = tempfile::tempdir()?;
    let app = scratch.path().join("app.yaml");
    std::fs::write(
        &app,
        format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: guestbook, namespace: {ns}}}\n\
             spec:\n  source: {{repoURL: 'file:///nonexistent/examples', targetRevision: main, path: guestbook}}\n  \
             destination: {{server: 'https://kubernetes.default.svc', namespace: sso-guestbook}}\n"
        ),
    )?;
    let out = kubectl(&kc, &["apply", "-f", &app.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));

    let cache = tempfile::tempdir()?;
    let (_controller, server, _) = common::controller_with_server(&kc, cache.path(), &["-n", &ns])?;
    let port = server.rsplit(':').next().unwrap_or_default().to_string();
    // localhost (a secure context for the Secure cookies) while the provider is on 127.0.0.1: the
    // two are different sites, as a real provider would be.
    let base = format!("http://localhost:{port}");
    let provider = Provider::start(&format!("{base}/auth/callback"))?;

    // Before configuration the login page offers no single sign-on and /auth/login is 404.
    let settings: Value = serde_json::from_str(
        &ureq::get(&format!("{server}/api/settings"))
            .call()?
            .body_mut()
            .read_to_string()?,
    )?;
    assert_eq!(settings["sso"], Value::Null);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let login = agent.get(&format!("{server}/auth/login")).call()?;
    assert_eq!(login.status(), 404);

    let config = format!(
        "name: Test IdP\nissuer: {}\nclientID: {CLIENT_ID}\nclientSecret: {CLIENT_SECRET}\nurl: {base}\n",
        provider.issuer
    );
    common::set_secret_value(&kc, &ns, "oidc.config", &config);
    until("the server to offer single sign-on", WAIT, || {
        ureq::get(&format!("{server}/api/settings"))
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|s| s["sso"]["name"] == "Test IdP")
    });

    // A developer: starts on an application's page, logs in at the provider, lands back there.
    let browser = Browser::start()?;
    browser.goto(&format!("{base}/applications/guestbook"))?;
    browser.wait_text(&testid("login-sso"), WAIT, |t| t.contains("Log in with Test IdP"))?;
    browser.click(&testid("login-sso"), WAIT)?;
    browser.wait_for("input[name=login]", WAIT)?;
    assert!(
        browser.url()?.starts_with(&provider.issuer),
        "at the provider: {}",
        browser.url()?
    );
    provider_login(&browser, "dev")?;
    browser.wait_text(&testid("app-title"), WAIT, |t| t.contains("guestbook"))?;
    assert_eq!(browser.url()?, format!("{base}/applications/guestbook"));
    let seen = whoami_and_try_sync(&browser)?;
    assert_eq!(seen["me"]["username"], "dev@example.test", "{seen}");
    assert_eq!(seen["me"]["groups"], json!(["developers"]), "{seen}");
    assert_eq!(seen["me"]["sso"], true, "{seen}");
    assert_eq!(seen["apps"], json!(["guestbook"]), "{seen}");
    assert!(seen["refresh"].as_u64().is_some_and(|s| s < 300), "{seen}");
    let user = browser.wait_for("#user", WAIT)?.text()?;
    assert!(user.contains("dev@example.test"), "{user}");

    // A second browser (no session anywhere): an answer for another login is refused.
    let stranger = Browser::start()?;
    stranger.goto(&format!("{base}/login"))?;
    stranger.click(&testid("login-sso"), WAIT)?;
    stranger.wait_for("input[name=login]", WAIT)?;
    stranger.goto(&format!("{base}/auth/callback?code=stolen&state=forged"))?;
    stranger.wait_text(&testid("login-error"), WAIT, |t| t.contains("Single sign-on failed"))?;
    let message = stranger.wait_for(&testid("login-error"), WAIT)?.text()?;
    assert!(message.contains("state"), "{message}");
    let me = stranger.execute_async(
        "const done = arguments[arguments.length - 1];
         fetch('/api/userinfo').then(r => done(r.status), e => done(String(e)));",
        vec![],
    )?;
    assert_eq!(me, json!(401), "no session after a refused callback");

    // A user of no group: logged in, but may see and sync nothing.
    stranger.goto(&format!("{base}/login"))?;
    stranger.click(&testid("login-sso"), WAIT)?;
    provider_login(&stranger, "eve")?;
    stranger.wait_for("#user", WAIT)?;
    until("the UI to show the user", WAIT, || {
        stranger
            .wait_for("#user", WAIT)
            .and_then(|e| e.text())
            .is_ok_and(|t| t.contains("eve@example.test"))
    });
    let seen = whoami_and_try_sync(&stranger)?;
    assert_eq!(seen["me"]["groups"], json!([]), "{seen}");
    assert_eq!(seen["apps"], json!([]), "{seen}");
    // Not even readable: the API answers as if it did not exist (a read-only user gets 403).
    assert_eq!(seen["refresh"], json!(404), "{seen}");

    // The CLI: `capstan login --sso`, the browser handing the code to its loopback listener.
    let config = tempfile::tempdir()?;
    let (mut cli, url, _) = cli_login(&base, config.path(), &["--sso"])?;
    assert!(url.contains("cli_challenge=") && url.contains("cli_port="), "{url}");
    let cli_browser = Browser::start()?;
    cli_browser.goto(&url)?;
    provider_login(&cli_browser, "dev")?;
    // Nothing is handed over before the person confirms a command-line login they started.
    cli_browser.wait_text("h1", WAIT, |t| {
        t.contains("Log in the command line as dev@example.test")
    })?;
    cli_browser.click("#confirm", WAIT)?;
    cli_browser.wait_text("body", WAIT, |t| t.contains("you may close this tab"))?;
    let status = cli.wait()?;
    assert!(status.success(), "capstan login --sso failed");
    let listed = cli_in(config.path(), &["app", "list"]);
    assert!(
        text(&listed).contains("guestbook"),
        "dev's roles through the CLI: {}",
        text(&listed)
    );

    // Without a browser: the code is shown and pasted; with another verifier it is refused.
    let pasted = tempfile::tempdir()?;
    let (mut cli, url, mut stdin) = cli_login(&base, pasted.path(), &["--sso", "--paste"])?;
    assert!(!url.contains("cli_port="), "{url}");
    let paste_browser = Browser::start()?;
    paste_browser.goto(&url)?;
    provider_login(&paste_browser, "dev")?;
    paste_browser.click("#confirm", WAIT)?;
    let page = paste_browser.wait_text("body", WAIT, |t| t.contains("Paste this code"))?;
    let code = page
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .trim()
        .to_string();
    let stolen = ureq::post(&format!("{server}/api/session/cli"))
        .config()
        .http_status_as_error(false)
        .build()
        .header("Content-Type", "application/json")
        .send(json!({"code": code, "verifier": "not-the-cli-s-verifier"}).to_string())?;
    assert_eq!(stolen.status(), 401, "a code is useless without the CLI's verifier");
    use std::io::Write;
    writeln!(stdin, "{code}")?;
    drop(stdin);
    assert!(cli.wait()?.success(), "capstan login --sso --paste failed");
    let me = cli_in(pasted.path(), &["context"]);
    assert!(text(&me).contains("dev@example.test"), "{}", text(&me));
    Ok(())
}

/// `capstan` with its logins in `config` and no kubeconfig.
fn cli_in(config: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .env("CAPSTAN_CONFIG_DIR", config)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run capstan")
}

/// Start `capstan login BASE EXTRA…` with its logins in `config`; the URL it prints for the
/// browser, and its stdin.
fn cli_login(
    base: &str,
    config: &std::path::Path,
    extra: &[&str],
) -> anyhow::Result<(Child, String, std::process::ChildStdin)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["login", base])
        .args(extra)
        .env("CAPSTAN_CONFIG_DIR", config)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stdin = child.stdin.take().expect("stdin is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines
            .next()
            .ok_or_else(|| anyhow::anyhow!("capstan login exited before printing a URL"))??;
        if let Some(url) = line.trim().strip_prefix("http") {
            break format!("http{url}");
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Ok((child, url, stdin))
}
