//! Helpers shared by the tests that drive the `capstan` binary against real control planes.

#![allow(dead_code)]

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

/// Run the `capstan` binary with `KUBECONFIG` set to `kubeconfig`.
pub fn capstan(kubeconfig: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run capstan")
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
