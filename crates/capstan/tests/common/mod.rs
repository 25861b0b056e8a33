//! Helpers shared by the tests that drive the `capstan` binary against real control planes.

#![allow(dead_code)]

pub mod apps;
pub mod http;
pub mod modes;
pub mod pod;
pub mod revert;
pub mod services;

use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// A `capstan controller` process, killed when dropped.
pub struct Controller(pub Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run the `capstan` binary with `KUBECONFIG` set to `kubeconfig` (and no `capstan login` of the
/// person running the tests: commands go through the kubeconfig).
pub fn capstan(kubeconfig: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env(
            "CAPSTAN_CONFIG_DIR",
            std::env::temp_dir().join("capstan-tests-no-login"),
        )
        .env_remove("CAPSTAN_SERVER")
        .env_remove("CAPSTAN_TOKEN")
        .output()
        .expect("run capstan")
}

/// [`capstan`] with `-n NAMESPACE` appended: a command of Capstan's in the test's own namespace
/// (for commands whose `-n` follows their subcommands too).
pub fn capstan_in(kubeconfig: &str, namespace: &str, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(["-n", namespace]);
    capstan(kubeconfig, &all)
}

/// Run the cached `kubectl` against `kubeconfig`.
pub fn kubectl(kubeconfig: &str, args: &[&str]) -> Output {
    let bin = capstan_playground::binaries::find("kubectl").expect("kubectl installed by scripts/setup.sh");
    Command::new(bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("run kubectl")
}

/// Create the RBAC policy ConfigMap `capstan-rbac` in Capstan's namespace `namespace` with `policy`
/// (YAML), failing the test if kubectl refuses.
pub fn create_policy(kubeconfig: &str, namespace: &str, policy: &str) {
    let out = kubectl(
        kubeconfig,
        &[
            "-n",
            namespace,
            "create",
            "configmap",
            "capstan-rbac",
            &format!("--from-literal=policy.yaml={policy}"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
}

/// Set `key` of the server's Secret `capstan-secret` in Capstan's namespace `namespace` to `value`,
/// failing the test if kubectl refuses.
pub fn set_secret_value(kubeconfig: &str, namespace: &str, key: &str, value: &str) {
    let patch = serde_json::json!({"stringData": {key: value}}).to_string();
    let out = kubectl(
        kubeconfig,
        &[
            "-n",
            namespace,
            "patch",
            "secret",
            "capstan-secret",
            "--type",
            "merge",
            "-p",
            &patch,
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
}

/// stdout and stderr of a finished command.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Poll `check` until it holds, failing the test after `timeout`; returns how long it took.
pub fn until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    started.elapsed()
}

/// The admin password `capstan install` printed (once) in `out`.
pub fn admin_password(out: &Output) -> String {
    let install = text(out);
    install
        .lines()
        .find(|l| l.starts_with("admin password"))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("install prints the admin password once: {install}"))
        .to_string()
}

/// A `capstan controller --listen 127.0.0.1:0 [EXTRA…]` process and the URLs it printed on stderr:
/// `(controller, base URL, metrics URL if --metrics-listen was given)`.
pub fn controller_with_server(
    kubeconfig: &str,
    cache: &std::path::Path,
    extra: &[&str],
) -> anyhow::Result<(Controller, String, Option<String>)> {
    let (controller, base, metrics, _) = controller_with_server_log(kubeconfig, cache, extra)?;
    Ok((controller, base, metrics))
}

/// A controller's stderr, kept line by line.
pub type KeptLog = std::sync::Arc<std::sync::Mutex<String>>;

/// [`controller_with_server`], also keeping everything the controller writes to stderr (its log).
pub fn controller_with_server_log(
    kubeconfig: &str,
    cache: &std::path::Path,
    extra: &[&str],
) -> anyhow::Result<(Controller, String, Option<String>, KeptLog)> {
    controller_listening(kubeconfig, cache, "127.0.0.1:0", extra)
}

/// [`controller_with_server_log`] with the server on `listen` (e.g. the port of a controller stopped
/// before, to restart it where its clients are).
pub fn controller_listening(
    kubeconfig: &str,
    cache: &std::path::Path,
    listen: &str,
    extra: &[&str],
) -> anyhow::Result<(Controller, String, Option<String>, KeptLog)> {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args([
            "controller",
            "--kubeconfig",
            kubeconfig,
            "--listen",
            listen,
            "--cache-dir",
        ])
        .arg(cache)
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().expect("stderr is piped");
    let controller = Controller(child);
    let mut lines = BufReader::new(stderr).lines();
    let wants_metrics = extra.contains(&"--metrics-listen");
    let (mut base, mut metrics) = (None, None);
    while base.is_none() || (wants_metrics && metrics.is_none()) {
        let line = lines
            .next()
            .ok_or_else(|| anyhow::anyhow!("the controller exited before saying where it listens"))??;
        if let Some(url) = line.strip_prefix("capstan server listening on ") {
            base = Some(url.trim().to_string());
        } else if let Some(url) = line.strip_prefix("capstan metrics on ") {
            metrics = Some(url.trim().to_string());
        }
    }
    // Keep draining stderr so the controller never blocks on a full pipe, and keep it.
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let kept = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
            kept.push_str(&line);
            kept.push('\n');
        }
    });
    Ok((controller, base.unwrap_or_default(), metrics, log))
}

/// `scripts/push-image.sh REF`, the playground's way of pushing an image; the digest it prints.
pub fn push_image(reference: &str) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/push-image.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(reference)
        .output()
        .expect("run scripts/push-image.sh");
    assert!(
        out.status.success(),
        "scripts/push-image.sh {reference}: {}",
        text(&out)
    );
    let digest = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        digest.starts_with("sha256:"),
        "the script prints the digest: {digest:?}"
    );
    digest
}
