//! Benchmark 10: a Secret whose value comes from OpenBao (a real `bao server -dev`, token auth),
//! resolved by the controller when it applies: time from a value rotated in OpenBao to the new value
//! in the cluster's Secret, with a refresh request (as a rotation job would send) and with nothing
//! but the controller's own refresh interval.

use std::time::{Duration, Instant};

use anyhow::bail;
use capstan_api::status::SyncCode;
use capstan_testkit::openbao::OpenBao;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::setup::*;

const SECRET_MANIFEST: &str = "apiVersion: v1
kind: Secret
metadata:
  name: api
  annotations:
    capstan.dev/secret-store: bench-openbao
    capstan.dev/secret-data: |
      apiKey: secret/bench#apiKey
type: Opaque
";

impl Bench {
    /// Benchmark 10 (see the module documentation).
    pub(crate) async fn secrets(&self) -> anyhow::Result<()> {
        let bao = tokio::task::spawn_blocking(OpenBao::start).await??;
        bao.put_kv("secret/bench", &[("apiKey", "value-0")])?;
        let store: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "bench-openbao", "namespace": "capstan",
                         "labels": {"capstan.dev/secret-type": "secret-store"}},
            "stringData": {"address": bao.address(), "auth": "token", "token": bao.root_token()},
        }))?;
        Api::<Secret>::namespaced(self.client.clone(), "capstan")
            .create(&PostParams::default(), &store)
            .await?;
        self.git.create_repo("secrets")?;
        self.git.commit(
            "secrets",
            "main",
            &[("app/secret.yaml", Some(SECRET_MANIFEST))],
            "store secret",
        )?;
        let repo = self.git.git_url("secrets");
        self.app(app_manifest("secrets", &repo, "app", "bench-secrets", true))
            .await?;
        self.wait("secrets", Duration::from_secs(120), |s| {
            s.pointer("/sync/status") == Some(&json!(SyncCode::Synced))
        })
        .await?;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), "bench-secrets");
        wait_value(&secrets, "value-0", Duration::from_secs(60)).await?;

        // Rotated, then a refresh request.
        let mut with_refresh = Vec::new();
        for i in 1..=5 {
            let value = format!("value-r{i}");
            let started = Instant::now();
            bao.put_kv("secret/bench", &[("apiKey", &value)])?;
            self.apps()
                .patch(
                    "secrets",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {"capstan.dev/refresh": "normal"}}})),
                )
                .await?;
            wait_value(&secrets, &value, Duration::from_secs(60)).await?;
            with_refresh.push(started.elapsed());
        }
        // Rotated, nothing else: applied at the Application's next periodic pass, somewhere within
        // one refresh interval; three samples, each once the Application is quiet.
        let mut polled = Vec::new();
        for i in 1..=3 {
            self.settle("secrets", Duration::from_secs(3), Duration::from_secs(60))
                .await?;
            let value = format!("value-p{i}");
            let started = Instant::now();
            bao.put_kv("secret/bench", &[("apiKey", &value)])?;
            wait_value(&secrets, &value, Duration::from_secs(POLL_SECONDS * 3)).await?;
            polled.push(started.elapsed());
        }
        with_refresh.sort();
        polled.sort();
        println!(
            "10. a Secret value from OpenBao rotated: in the cluster {} ms after the rotation with a refresh request (median of 5; max {} ms); with only the refresh interval ({POLL_SECONDS} s) {:.1}–{:.1} s (3 samples)",
            with_refresh[2].as_millis(),
            with_refresh[4].as_millis(),
            polled[0].as_secs_f64(),
            polled[2].as_secs_f64(),
        );
        Ok(())
    }
}

/// Wait until the Secret `api` holds `value` under `apiKey` (polling every 50 ms).
async fn wait_value(secrets: &Api<Secret>, value: &str, timeout: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let current = secrets
            .get_opt("api")
            .await?
            .and_then(|s| s.data)
            .and_then(|d| d.get("apiKey").map(|v| v.0.clone()));
        if current.as_deref() == Some(value.as_bytes()) {
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!("the Secret did not get the rotated value within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
