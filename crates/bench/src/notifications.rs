//! Benchmark 16: notifications do not slow syncs down. Applications of one ConfigMap each are synced
//! one after the other, first with no channel, then with a NotificationChannel whose destination
//! answers each request only after 30 s (the controller gives up after 10 s and retries); the median
//! and the slowest sync of each round are compared, and the destination's requests during the second
//! round are counted (the positive signal that the channel was being delivered to meanwhile).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::setup::*;

/// How long the slow destination takes to answer.
const ANSWER_AFTER: Duration = Duration::from_secs(30);

/// A destination answering every request after [`ANSWER_AFTER`]; its port and request count.
async fn slow_destination() -> anyhow::Result<(u16, Arc<AtomicUsize>)> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let port = listener.local_addr()?.port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                tokio::time::sleep(ANSWER_AFTER).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
                    .await;
            });
        }
    });
    Ok((port, hits))
}

impl Bench {
    /// Sync each of `names` in turn at the new revision; the durations.
    async fn sync_round(&self, names: &[String], round: &str) -> anyhow::Result<Vec<Duration>> {
        let mut took = Vec::new();
        for name in names {
            took.push(self.timed_sync_as(name, &format!("bench-{round}-{name}")).await?);
        }
        Ok(took)
    }

    /// Benchmark 16.
    pub(crate) async fn notifications(&self, n: usize) -> anyhow::Result<()> {
        let files = |value: &str| -> Vec<(String, String)> {
            (0..n)
                .map(|i| {
                    (
                        format!("apps/n-{i:02}/cm.yaml"),
                        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\ndata: {{value: \"{value}\"}}\n"),
                    )
                })
                .collect()
        };
        let commit = |value: &str| -> anyhow::Result<()> {
            let files = files(value);
            let refs: Vec<(&str, Option<&str>)> = files.iter().map(|(p, c)| (p.as_str(), Some(c.as_str()))).collect();
            self.git.commit("notified", "main", &refs, value)?;
            Ok(())
        };
        self.git.create_repo("notified")?;
        commit("one")?;
        let repo = self.git.git_url("notified");
        let names: Vec<String> = (0..n).map(|i| format!("notified-{i:02}")).collect();
        for (i, name) in names.iter().enumerate() {
            let mut app = app_manifest(name, &repo, &format!("apps/n-{i:02}"), name, false);
            app["spec"]["syncPolicy"] = json!({"syncOptions": ["CreateNamespace=true"]});
            self.app(app).await?;
        }
        let mut without = self.sync_round(&names, "quiet").await?;

        let (port, hits) = slow_destination().await?;
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(self.client.clone(), "capstan");
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "slow-hook", "namespace": "capstan"},
                            "stringData": {"url": format!("http://127.0.0.1:{port}/hook")}});
        secrets
            .patch("slow-hook", &PatchParams::apply("bench").force(), &Patch::Apply(secret))
            .await?;
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("capstan.dev", "v1alpha1", "NotificationChannel"),
            "notificationchannels",
        );
        let channels: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), "capstan", &ar);
        let channel = json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "NotificationChannel",
                             "metadata": {"name": "slow-hook", "namespace": "capstan"},
                             "spec": {"type": "webhook", "secretRef": {"name": "slow-hook"},
                                      "triggers": ["SyncSucceeded", "Deployed"]}});
        channels
            .patch(
                "slow-hook",
                &PatchParams::apply("bench").force(),
                &Patch::Apply(channel),
            )
            .await?;
        // The channel has looked at every Application (its record is on each) before the round.
        for name in &names {
            self.until_annotated(name, "slow-hook").await?;
        }
        commit("two")?;
        let mut with = self.sync_round(&names, "notified").await?;
        let asked = hits.load(Ordering::Relaxed);
        channels.delete("slow-hook", &Default::default()).await?;
        secrets.delete("slow-hook", &Default::default()).await?;
        let median = |s: &mut [Duration]| percentile(s, 0.5).as_secs_f64();
        let max = |s: &[Duration]| s.iter().max().copied().unwrap_or_default().as_secs_f64();
        println!(
            "16. syncs while a notification channel's destination answers after {} s: median {:.2} s, slowest {:.2} s over {n} syncs; without a channel median {:.2} s, slowest {:.2} s; the destination was asked {asked} times meanwhile",
            ANSWER_AFTER.as_secs(),
            median(&mut with),
            max(&with),
            median(&mut without),
            max(&without),
        );
        Ok(())
    }

    /// Wait until Application `name` carries the notification record of `channel`.
    async fn until_annotated(&self, name: &str, channel: &str) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let app = self.apps().get(name).await?;
            let record = app
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(capstan_api::notification::NOTIFIED_ANNOTATION))
                .cloned()
                .unwrap_or_default();
            if record.contains(channel) {
                return Ok(());
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "{name} has no record of {channel}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
