//! A throwaway Gitea (built by `scripts/setup.sh` from the Go module proxy) on a free loopback port:
//! a SQLite database in a temporary directory, an admin account and an API token made at start,
//! repositories created and pushed to over HTTP, and the commit statuses read back. Stopped when
//! dropped. Gitea is told it may run as root (`GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT`, the test
//! machines run as root): it serves loopback only, from a throwaway directory.

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// The admin account every forge has.
pub const USER: &str = "capstan";
const PASSWORD: &str = "capstan-forge-password-1";

/// A running Gitea.
pub struct Forge {
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// An API token of [`USER`] (scope `write:repository`).
    pub token: String,
    dir: tempfile::TempDir,
    child: Child,
}

impl Drop for Forge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> std::path::PathBuf {
    capstan_playground::binaries::find("gitea").unwrap_or_else(|_| "gitea".into())
}

/// Gitea's locales and templates, which `scripts/setup.sh` copies beside its binary's directory
/// (it is built without `bindata`).
fn static_root() -> std::path::PathBuf {
    let bin = binary();
    bin.parent()
        .and_then(Path::parent)
        .map(|cache| cache.join("gitea/static"))
        .unwrap_or_default()
}

fn gitea(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(binary());
    cmd.args(args)
        .arg("--config")
        .arg(dir.join("app.ini"))
        .arg("--work-path")
        .arg(dir)
        .env("HOME", dir)
        .env("GITEA_WORK_DIR", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        // Only matters as root (the test machines); it serves loopback from a throwaway directory.
        .env("GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT", "true");
    cmd
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .new_agent()
}

impl Forge {
    /// Start a Gitea with an admin account and a token.
    pub async fn start() -> anyhow::Result<Forge> {
        let dir = tempfile::Builder::new().prefix("capstan-gitea-").tempdir()?;
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port();
        let d = dir.path();
        let config = format!(
            "APP_NAME = capstan-test\nRUN_MODE = prod\nWORK_PATH = {work}\n\n\
             [server]\nSTATIC_ROOT_PATH = {static_root}\nPROTOCOL = http\nHTTP_ADDR = 127.0.0.1\nHTTP_PORT = {port}\nROOT_URL = http://127.0.0.1:{port}/\n\
             DISABLE_SSH = true\nOFFLINE_MODE = true\nLFS_START_SERVER = false\nAPP_DATA_PATH = {work}/data\n\n\
             [database]\nDB_TYPE = sqlite3\nPATH = {work}/gitea.db\n\n\
             [repository]\nROOT = {work}/repos\nDEFAULT_BRANCH = main\n\n\
             [security]\nINSTALL_LOCK = true\nSECRET_KEY = capstan-test-secret-key\n\
             INTERNAL_TOKEN = eyJhbGciOiJIUzI1NiJ9.eyJuYmYiOjE3MDAwMDAwMDB9.capstan-test-internal-token\n\n\
             [service]\nDISABLE_REGISTRATION = true\n\n[oauth2]\nENABLED = false\n\n\
             [session]\nPROVIDER = memory\n\n[cache]\nADAPTER = memory\n\n[cron]\nENABLED = false\n\n\
             [mailer]\nENABLED = false\n\n[indexer]\nREPO_INDEXER_ENABLED = false\n\n\
             [log]\nMODE = file\nLEVEL = Warn\nROOT_PATH = {work}/log\n",
            work = d.display(),
            static_root = static_root().display()
        );
        std::fs::write(d.join("app.ini"), config)?;
        let out = gitea(d, &["migrate"]).output().context("running gitea migrate")?;
        if !out.status.success() {
            bail!(
                "gitea migrate: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let email = format!("{USER}@capstan.invalid");
        let out = gitea(
            d,
            &[
                "admin",
                "user",
                "create",
                "--username",
                USER,
                "--password",
                PASSWORD,
                "--email",
                &email,
                "--admin",
                "--must-change-password=false",
            ],
        )
        .output()
        .context("creating gitea's admin")?;
        if !out.status.success() {
            bail!(
                "gitea admin user create: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let log = std::fs::File::create(d.join("web.log"))?;
        let child = gitea(d, &["web"])
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting gitea web")?;
        let url = format!("http://127.0.0.1:{port}");
        let mut forge = Forge {
            url,
            token: String::new(),
            dir,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = agent().get(format!("{}/api/v1/version", forge.url)).call()
                && r.status() == 200
            {
                break;
            }
            if let Ok(Some(status)) = forge.child.try_wait() {
                bail!("gitea exited ({status}): {}", forge.log());
            }
            if Instant::now() > deadline {
                bail!("gitea did not answer within 60 s: {}", forge.log());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let answer = forge.call(
            "POST",
            &format!("/api/v1/users/{USER}/tokens"),
            Some(json!({"name": "capstan-test", "scopes": ["write:repository", "read:user"]})),
            true,
        )?;
        forge.token = answer["sha1"].as_str().context("the token's value")?.to_string();
        Ok(forge)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("web.log")).unwrap_or_default()
    }

    /// `METHOD path` with basic auth (`password`) or the token; the JSON answer (2xx only).
    pub fn call(&self, method: &str, path: &str, body: Option<Value>, password: bool) -> anyhow::Result<Value> {
        use base64::Engine;
        let auth = if password {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
            )
        } else {
            format!("token {}", self.token)
        };
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.url))
            .header("Authorization", auth)
            .header("Content-Type", "application/json")
            .body(body.map(|b| b.to_string()).unwrap_or_default())?;
        let mut answer = agent().run(req)?;
        let status = answer.status().as_u16();
        let text = answer.body_mut().read_to_string().unwrap_or_default();
        if !(200..300).contains(&status) {
            bail!("{method} {path}: HTTP {status}: {text}");
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Create a public repository of [`USER`]; its clone URL (anonymous reads).
    pub fn create_repo(&self, name: &str) -> anyhow::Result<String> {
        self.call(
            "POST",
            "/api/v1/user/repos",
            Some(json!({"name": name, "private": false, "default_branch": "main"})),
            true,
        )?;
        Ok(format!("{}/{USER}/{name}.git", self.url))
    }

    /// Commit `files` on `branch` of `repo` and push it over HTTP; the commit's id.
    pub fn commit(
        &self,
        repo: &str,
        branch: &str,
        files: &[(&str, Option<&str>)],
        message: &str,
    ) -> anyhow::Result<String> {
        let remote = format!(
            "http://{USER}:{PASSWORD}@{}/{USER}/{repo}.git",
            self.url.trim_start_matches("http://")
        );
        crate::git::commit_files(Path::new(&remote), branch, files, message)
    }

    /// The commit statuses of `sha` in `repo`, newest first.
    pub fn statuses(&self, repo: &str, sha: &str) -> anyhow::Result<Vec<Value>> {
        let answer = self.call(
            "GET",
            &format!("/api/v1/repos/{USER}/{repo}/commits/{sha}/statuses"),
            None,
            false,
        )?;
        Ok(answer.as_array().cloned().unwrap_or_default())
    }
}
