//! The `capstan local` and `capstan install` commands, driven as a user would: through the binary
//! and the real kubectl. `capstan local up` starts the control planes under test, so these tests use
//! no shared one.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn capstan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .output()
        .expect("run capstan")
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    let bin = capstan_playground::binaries::find("kubectl").expect("kubectl installed by scripts/setup.sh");
    Command::new(bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("run kubectl")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn kubectl_until(kubeconfig: &Path, args: &[&str], want: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let out = kubectl(kubeconfig, args);
        let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if got == want {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl {args:?}: wanted {want:?}, last got {got:?} ({})",
            text(&out)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn pids(dir: &Path) -> Vec<i32> {
    capstan_playground::Playground::status(dir)
        .iter()
        .filter_map(|c| c.pid)
        .collect()
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

/// Stops the playground even when an assertion fails half-way.
struct Down<'a>(&'a Path);
impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = capstan_playground::Playground::down(self.0);
    }
}

#[test]
fn local_up_runs_workloads_install_works_and_down_stops_everything() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("pg");
    let dir_s = dir.to_string_lossy().to_string();
    let _down = Down(&dir);

    let up = capstan(&["local", "up", "--dir", &dir_s]);
    assert!(up.status.success(), "local up failed: {}", text(&up));
    let stdout = String::from_utf8_lossy(&up.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let kubeconfig = dir.join("kubeconfig");
    assert_eq!(
        Path::new(last),
        kubeconfig.canonicalize().expect("kubeconfig exists"),
        "last line is the kubeconfig"
    );

    // A second `up` finds it running and changes nothing.
    let before = pids(&dir);
    let again = capstan(&["local", "up", "--dir", &dir_s]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(pids(&dir), before, "up on a running playground must not restart it");

    let out = kubectl(&kubeconfig, &["create", "deployment", "web", "--image=x"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl(&kubeconfig, &["create", "job", "once", "--image=x"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl(
        &kubeconfig,
        &[
            "run",
            "doomed",
            "--image=x",
            "--restart=Never",
            "--annotations=capstan.dev/simulate=fail",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    kubectl_until(
        &kubeconfig,
        &["get", "deploy", "web", "-o", "jsonpath={.status.availableReplicas}"],
        "1",
        Duration::from_secs(30),
    );
    kubectl_until(
        &kubeconfig,
        &["get", "job", "once", "-o", "jsonpath={.status.succeeded}"],
        "1",
        Duration::from_secs(30),
    );
    kubectl_until(
        &kubeconfig,
        &["get", "pod", "doomed", "-o", "jsonpath={.status.phase}"],
        "Failed",
        Duration::from_secs(30),
    );

    // install: CRDs, namespace, RBAC; idempotent.
    let kc = kubeconfig.to_string_lossy().to_string();
    for _ in 0..2 {
        let out = capstan(&["install", "--kubeconfig", &kc]);
        assert!(out.status.success(), "install failed: {}", text(&out));
    }
    let out = kubectl(&kubeconfig, &["get", "applications.capstan.dev", "-A"]);
    assert!(
        out.status.success(),
        "kubectl get applications after install: {}",
        text(&out)
    );
    let out = kubectl(&kubeconfig, &["get", "namespace", "capstan", "-o", "name"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "namespace/capstan");
    let app = r#"{"apiVersion":"capstan.dev/v1alpha1","kind":"Application","metadata":{"name":"demo","namespace":"capstan"},
        "spec":{"source":{"repoURL":"git://127.0.0.1/demo.git","path":"."},"destination":{"server":"https://kubernetes.default.svc","namespace":"default"}}}"#;
    let file = tmp.path().join("app.json");
    std::fs::write(&file, app).expect("write app");
    let out = kubectl(&kubeconfig, &["apply", "-f", &file.to_string_lossy()]);
    assert!(
        out.status.success(),
        "an Application is accepted by the CRD: {}",
        text(&out)
    );

    let status = capstan(&["local", "status", "--dir", &dir_s]);
    assert!(status.status.success(), "{}", text(&status));
    assert_eq!(text(&status).matches("running").count(), 5, "{}", text(&status));

    let running = pids(&dir);
    assert_eq!(running.len(), 5);
    let down = capstan(&["local", "down", "--dir", &dir_s]);
    assert!(down.status.success(), "{}", text(&down));
    for pid in running {
        assert!(!alive(pid), "process {pid} survived `local down`");
    }
    let twice = capstan(&["local", "down", "--dir", &dir_s]);
    assert!(twice.status.success(), "down twice: {}", text(&twice));
    let status = capstan(&["local", "status", "--dir", &dir_s]);
    assert!(
        !status.status.success(),
        "status of a stopped playground exits non-zero"
    );
}

#[test]
fn up_picks_other_ports_when_its_previous_ones_are_taken() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("pg");
    let dir_s = dir.to_string_lossy().to_string();
    let _down = Down(&dir);
    let up = capstan(&["local", "up", "--dir", &dir_s]);
    assert!(up.status.success(), "{}", text(&up));
    let first = capstan_playground::Playground::server_of(&dir).expect("server recorded");
    assert!(capstan(&["local", "down", "--dir", &dir_s]).status.success());

    // Occupy the API server port the playground used before.
    let port: u16 = first.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
    let _squatter = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind old port");
    let up = capstan(&["local", "up", "--dir", &dir_s]);
    assert!(up.status.success(), "up with a taken port: {}", text(&up));
    let second = capstan_playground::Playground::server_of(&dir).expect("server recorded");
    assert_ne!(first, second, "a taken port must be replaced");
    let out = kubectl(&dir.join("kubeconfig"), &["get", "ns", "default", "-o", "name"]);
    assert!(
        out.status.success(),
        "the restarted playground serves requests: {}",
        text(&out)
    );
}

#[test]
fn missing_binaries_and_unreachable_clusters_give_clear_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let empty_cache = tmp.path().join("cache");
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["local", "up", "--dir"])
        .arg(tmp.path().join("pg"))
        .env("CAPSTAN_CACHE", &empty_cache)
        .env("PATH", "/nonexistent")
        .output()
        .expect("run");
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    assert!(
        msg.contains("scripts/setup.sh") && msg.contains("etcd"),
        "must say what is missing and how to get it: {msg}"
    );
    assert!(!msg.contains("panicked"), "{msg}");

    // A kubeconfig pointing at a closed loopback port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let kubeconfig = tmp.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{closed}', insecure-skip-tls-verify: true}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n"
        ),
    )
    .expect("write kubeconfig");
    let out = capstan(&["install", "--kubeconfig", &kubeconfig.to_string_lossy()]);
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    assert!(
        msg.contains("cannot reach the Kubernetes API server") && msg.contains(&closed.to_string()),
        "{msg}"
    );
    assert!(!msg.contains("panicked") && !msg.contains("stack backtrace"), "{msg}");

    let out = capstan(&["install", "--kubeconfig", &tmp.path().join("missing").to_string_lossy()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("cannot read kubeconfig"), "{}", text(&out));
}
