//! Benchmark 3: N Applications of ~10 objects from one repository, created at once.

use std::time::{Duration, Instant};

use anyhow::bail;
use capstan_api::status::{HealthCode, SyncCode};
use capstan_testkit::git;
use futures::{StreamExt, stream};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::setup::*;

impl Bench {
    /// Benchmark 3: N Applications of ~10 objects from one repository, created at once.
    pub(crate) async fn fleet(&self, n: usize) -> anyhow::Result<()> {
        self.git.create_repo("fleet")?;
        let mut manifests = String::from(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx, ports: [{containerPort: 80}]}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {selector: {app: web}, ports: [{port: 80}]}\n",
        );
        for i in 0..8 {
            manifests.push_str(&format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: config-{i}}}\ndata: {{key: value-{i}}}\n"
            ));
        }
        self.git
            .commit("fleet", "main", &[("app/all.yaml", Some(&manifests))], "fleet")?;
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "fleet-repo", "namespace": "capstan", "labels": {"capstan.dev/secret-type": "repository"}},
            "stringData": {"url": self.git.http_url("fleet"), "username": git::USER, "password": git::PASSWORD},
        });
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(self.client.clone(), "capstan");
        secrets
            .create(&PostParams::default(), &serde_json::from_value(secret)?)
            .await?;

        let (git_before, packs_before) = self.git.http_requests();
        let started = Instant::now();
        let names: Vec<String> = (0..n).map(|i| format!("fleet-{i:03}")).collect();
        let results: Vec<anyhow::Result<()>> = stream::iter(names.clone())
            .map(|name| async move {
                self.app(app_manifest(&name, &self.git.http_url("fleet"), "app", &name, true))
                    .await
            })
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        // Followed through a watch: listing 500 large Applications twice a second would itself load
        // the API server being measured.
        let mut peak = 0;
        let mut done: std::collections::HashSet<String> = std::collections::HashSet::new();
        {
            use kube::runtime::{WatchStreamExt, watcher};
            let events = watcher(self.apps(), watcher::Config::default()).applied_objects();
            let mut events = std::pin::pin!(events);
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            while done.len() < n {
                tokio::select! {
                    event = events.next() => {
                        let Some(Ok(a)) = event else { continue };
                        let name = a.metadata.name.clone().unwrap_or_default();
                        if !name.starts_with("fleet-") {
                            continue;
                        }
                        if a.data.pointer("/status/sync/status") == Some(&json!(SyncCode::Synced))
                            && a.data.pointer("/status/health/status") == Some(&json!(HealthCode::Healthy))
                        {
                            done.insert(name);
                        } else {
                            done.remove(&name);
                        }
                    }
                    _ = tick.tick() => {
                        peak = peak.max(self.rss().1);
                        if started.elapsed() > Duration::from_secs(1200) {
                            bail!("only {} of {n} Applications Synced and Healthy after 20 minutes", done.len());
                        }
                    }
                }
            }
        }
        let elapsed = started.elapsed();
        let (git_after, packs_after) = self.git.http_requests();
        println!(
            "3. {n} Applications x 10 objects from one repository: all Synced and Healthy {:.1} s after creation (target <= 90 s); controller peak RSS {:.1} MiB (target <= 150 MiB); git ref listings during the initial wave {}, upload-pack requests {}",
            elapsed.as_secs_f64(),
            peak as f64 / 1024.0,
            git_after - git_before,
            packs_after - packs_before
        );

        // One poll cycle after a new commit: every Application finds it by polling alone.
        let sha = self.git.commit(
            "fleet",
            "main",
            &[(
                "app/extra.yaml",
                Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\ndata: {a: b}\n"),
            )],
            "poll",
        )?;
        let (git_before, packs_before) = self.git.http_requests();
        let started = Instant::now();
        let deadline = Duration::from_secs(POLL_SECONDS * 3);
        let mut behind = n;
        while started.elapsed() < deadline {
            let list = self.apps().list(&ListParams::default()).await?;
            behind = list
                .items
                .iter()
                .filter(|a| a.metadata.name.as_deref().is_some_and(|n| n.starts_with("fleet-")))
                .filter(|a| a.data.pointer("/status/sync/revision") != Some(&json!(sha)))
                .count();
            if behind == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let (git_after, packs_after) = self.git.http_requests();
        println!(
            "   one poll cycle ({POLL_SECONDS} s interval) after a new commit: {} of {n} Applications at the new revision after {:.1} s; {} git ref listings and {} upload-pack requests for the repository (target: 1 fetch)",
            n - behind,
            started.elapsed().as_secs_f64(),
            git_after - git_before,
            packs_after - packs_before
        );
        Ok(())
    }
}
