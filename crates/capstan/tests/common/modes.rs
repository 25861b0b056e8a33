//! The CLI's tests in both of its modes: through the kubeconfig (`-n NAMESPACE`), and logged in to
//! Capstan's server with an API token (`CAPSTAN_SERVER` + `CAPSTAN_TOKEN`, as CI jobs do), where
//! every command must print the same and exit with the same code. A test written once runs twice,
//! once per [`Mode`]; its assertions on outputs hold in both.

use std::process::{Command, Output};

use super::{capstan, text};

/// How the CLI reaches Capstan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// With a kubeconfig and `-n NAMESPACE`.
    Kubeconfig,
    /// Logged in to the server as the admin account, with an API token.
    Server,
}

impl Mode {
    /// A word naming the mode, for what the two runs of one test must not share on the shared
    /// control plane (destination namespaces).
    pub fn tag(self) -> &'static str {
        match self {
            Mode::Kubeconfig => "kube",
            Mode::Server => "server",
        }
    }
}

/// Runs `capstan` in one [`Mode`].
pub struct Cli {
    kubeconfig: String,
    namespace: String,
    mode: Mode,
    /// The server's URL and the admin's token (server mode).
    server: Option<(String, String)>,
}

impl Cli {
    /// The CLI in `mode` for Capstan in `namespace`, whose server (a controller's `--listen`) is at
    /// `base`. In server mode an API token for the admin account is made first, through the
    /// kubeconfig (`capstan account generate-token`).
    pub fn new(kubeconfig: &str, namespace: &str, mode: Mode, base: &str) -> Cli {
        let server = (mode == Mode::Server).then(|| {
            let out = capstan(kubeconfig, &["account", "generate-token", "admin", "-n", namespace]);
            assert!(out.status.success(), "{}", text(&out));
            let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (base.to_string(), token)
        });
        Cli {
            kubeconfig: kubeconfig.to_string(),
            namespace: namespace.to_string(),
            mode,
            server,
        }
    }

    /// Which mode this is.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// `capstan ARGS` in this mode, to be run or spawned: with the kubeconfig, `-n NAMESPACE` is
    /// appended; logged in, the server decides the namespace.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_capstan"));
        cmd.args(args).env(
            "CAPSTAN_CONFIG_DIR",
            std::env::temp_dir().join("capstan-tests-no-login"),
        );
        match &self.server {
            None => {
                cmd.args(["-n", &self.namespace])
                    .env("KUBECONFIG", &self.kubeconfig)
                    .env_remove("CAPSTAN_SERVER")
                    .env_remove("CAPSTAN_TOKEN");
            }
            Some((base, token)) => {
                cmd.env_remove("KUBECONFIG")
                    .env("CAPSTAN_SERVER", base)
                    .env("CAPSTAN_TOKEN", token);
            }
        }
        cmd
    }

    /// Run `capstan ARGS` in this mode (see [`Cli::command`]).
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run capstan")
    }
}

/// Run `args` in both modes until they print the same on stdout and exit alike (what they show can
/// change between the two runs, e.g. a probe's time), failing the test after 30 s; returns the
/// kubeconfig's output.
pub fn same_in_both(kube: &Cli, server: &Cli, args: &[&str]) -> Output {
    assert_eq!((kube.mode(), server.mode()), (Mode::Kubeconfig, Mode::Server));
    let started = std::time::Instant::now();
    loop {
        let (a, b) = (kube.run(args), server.run(args));
        if a.stdout == b.stdout && a.status.code() == b.status.code() {
            return a;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "capstan {args:?} differs between the modes:\n--- kubeconfig ({:?}):\n{}\n--- server ({:?}):\n{}",
            a.status.code(),
            text(&a),
            b.status.code(),
            text(&b)
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}
