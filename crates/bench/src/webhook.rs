//! Benchmark 7: a signed push webhook for a change to one directory of a repository that N
//! Applications use: the answer, the time until the affected Application syncs, and how many moved.

use std::time::{Duration, Instant};

use anyhow::bail;
use capstan_api::operation::OperationPhase;
use capstan_api::status::SyncCode;
use futures::{StreamExt, stream};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::setup::*;

impl Bench {
    /// Benchmark 7: N Applications from one repository (one directory each, annotated with
    /// `capstan.dev/manifest-generate-paths: .`, automated sync); a signed GitHub push webhook for a
    /// change to one directory. Measures the webhook's answer, the time until the affected Application's
    /// sync starts and until it is Synced at the new revision, and how many Applications moved.
    pub(crate) async fn webhook(&self, n: usize) -> anyhow::Result<()> {
        const SECRET: &str = "bench-webhook-secret";
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(self.client.clone(), "capstan");
        secrets
            .patch(
                "capstan-secret",
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"webhook.github.secret": SECRET}})),
            )
            .await?;
        self.git.create_repo("hooks")?;
        let files: Vec<(String, String)> = (0..n)
            .map(|i| {
                (
                    format!("apps/hook-{i:03}/config.yaml"),
                    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: config}}\ndata: {{version: '1', app: '{i}'}}\n"),
                )
            })
            .collect();
        let refs: Vec<(&str, Option<&str>)> = files.iter().map(|(p, c)| (p.as_str(), Some(c.as_str()))).collect();
        self.git.commit("hooks", "main", &refs, "initial")?;
        let repo = self.git.git_url("hooks");
        let started = Instant::now();
        let names: Vec<String> = (0..n).map(|i| format!("hook-{i:03}")).collect();
        let results: Vec<anyhow::Result<()>> = stream::iter(names.clone())
            .map(|name| {
                let mut manifest = app_manifest(&name, &repo, &format!("apps/{name}"), &name, true);
                manifest["metadata"]["annotations"] = json!({"capstan.dev/manifest-generate-paths": "."});
                async move { self.app(manifest).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        loop {
            let list = self.apps().list(&ListParams::default()).await?;
            let done = list
                .items
                .iter()
                .filter(|a| a.metadata.name.as_deref().is_some_and(|n| n.starts_with("hook-")))
                .filter(|a| a.data.pointer("/status/sync/status") == Some(&json!(SyncCode::Synced)))
                .count();
            if done == n {
                break;
            }
            if started.elapsed() > Duration::from_secs(1200) {
                bail!("only {done} of {n} webhook Applications Synced after 20 minutes");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // Let the creation burst settle, so the measurement sees the webhook and not leftovers.
        tokio::time::sleep(Duration::from_secs(3)).await;

        let target = format!("hook-{:03}", n / 2);
        let sha = self.git.commit(
            "hooks",
            "main",
            &[(
                &format!("apps/{target}/config.yaml"),
                Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata: {version: '2'}\n"),
            )],
            "change one app",
        )?;
        let revisions_before = self.revisions("hook-").await?;
        let body = json!({
            "ref": "refs/heads/main",
            "after": sha,
            "repository": {"clone_url": repo, "default_branch": "main"},
            "commits": [{"id": sha, "modified": [format!("apps/{target}/config.yaml")]}],
        })
        .to_string();
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET.as_bytes());
        let signature: String = ring::hmac::sign(&key, body.as_bytes())
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let sent = Instant::now();
        let mut response = agent
            .post(format!("{}/api/webhook", self.server))
            .header("X-GitHub-Event", "push")
            .header("X-Hub-Signature-256", format!("sha256={signature}"))
            .header("Content-Type", "application/json")
            .send(body)?;
        let answered = sent.elapsed();
        let status = response.status().as_u16();
        let answer = response.body_mut().read_to_string()?;
        if status != 200 {
            bail!("the webhook was refused: {status} {answer}");
        }
        let mut sync_started = None;
        let synced = loop {
            let s = self.status(&target).await?;
            if sync_started.is_none() && s.pointer("/operationState/revision") == Some(&json!(sha)) {
                sync_started = Some(sent.elapsed());
            }
            if s.pointer("/sync/revision") == Some(&json!(sha))
                && s.pointer("/sync/status") == Some(&json!(SyncCode::Synced))
                && s.pointer("/operationState/phase") == Some(&json!(OperationPhase::Succeeded))
            {
                break sent.elapsed();
            }
            if sent.elapsed() > Duration::from_secs(120) {
                bail!("{target} did not sync the pushed commit within 120 s: {s}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let revisions_after = self.revisions("hook-").await?;
        let moved = revisions_after
            .iter()
            .filter(|(name, rev)| revisions_before.get(*name) != Some(rev))
            .count();
        println!(
            "7. push webhook for a repository with {n} Applications: answered in {:.0} ms ({answer}); {target}'s sync started {:.0} ms after the webhook (target <= 1 s), Synced at the new revision after {:.0} ms; Applications whose status moved to the new revision: {moved}",
            answered.as_secs_f64() * 1000.0,
            sync_started.unwrap_or(synced).as_secs_f64() * 1000.0,
            synced.as_secs_f64() * 1000.0,
        );
        Ok(())
    }

    /// `name → status.sync.revision` of the Applications whose name starts with `prefix`.
    pub(crate) async fn revisions(&self, prefix: &str) -> anyhow::Result<std::collections::HashMap<String, Value>> {
        let list = self.apps().list(&ListParams::default()).await?;
        Ok(list
            .items
            .into_iter()
            .filter(|a| a.metadata.name.as_deref().is_some_and(|n| n.starts_with(prefix)))
            .map(|a| {
                let rev = a.data.pointer("/status/sync/revision").cloned().unwrap_or(Value::Null);
                (a.metadata.name.unwrap_or_default(), rev)
            })
            .collect())
    }
}
