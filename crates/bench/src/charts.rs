//! Benchmark 9: N Applications installing one chart version from one Helm repository (a real static
//! HTTP server, the chart made by `helm package`, the index by `helm repo index`): time until all are
//! Synced and Healthy, the index requests and archive downloads that cost, one poll cycle with nothing
//! new (conditional index requests only, no download), and a new chart version published: time until
//! every Application runs it.

use std::time::{Duration, Instant};

use anyhow::bail;
use capstan_api::status::{HealthCode, SyncCode};
use capstan_testkit::charts::{ChartServer, ChartServerOptions, index_repository, run_helm};
use futures::{StreamExt, stream};
use kube::api::ListParams;
use serde_json::{Value, json};

use crate::setup::*;

/// A chart of a Deployment, a Service and a ConfigMap naming its version.
fn package(dir: &std::path::Path, version: &str) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let chart = work.path().join("web");
    std::fs::create_dir_all(chart.join("templates"))?;
    std::fs::write(
        chart.join("Chart.yaml"),
        format!("apiVersion: v2\nname: web\nversion: {version}\n"),
    )?;
    std::fs::write(chart.join("values.yaml"), "replicas: 1\n")?;
    std::fs::write(
        chart.join("templates/all.yaml"),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: {{{{ .Values.replicas }}}}\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec: {{containers: [{{name: web, image: nginx}}]}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: web}}\nspec: {{selector: {{app: web}}, ports: [{{port: 80}}]}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: web-version}}\ndata: {{version: \"{version}\"}}\n"
        ),
    )?;
    let (chart_s, dir_s) = (chart.to_string_lossy(), dir.to_string_lossy());
    run_helm(work.path(), &["package", &chart_s, "--destination", &dir_s])?;
    Ok(())
}

fn chart_app(name: &str, repo: &str) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": "capstan"},
        "spec": {
            "source": {"repoURL": repo, "chart": "web", "targetRevision": "1.*"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": name},
            "syncPolicy": {"automated": {"prune": true, "selfHeal": true}, "syncOptions": ["CreateNamespace=true"]},
        }
    })
}

impl Bench {
    /// Benchmark 9 (see the module documentation).
    pub(crate) async fn charts(&self, n: usize) -> anyhow::Result<()> {
        let server = ChartServer::start(ChartServerOptions::default()).await?;
        package(server.dir(), "1.0.0")?;
        index_repository(server.dir(), None)?;
        let repo = server.url();
        let names: Vec<String> = (0..n).map(|i| format!("chart-{i:03}")).collect();
        let started = Instant::now();
        let results: Vec<anyhow::Result<()>> = stream::iter(names.clone())
            .map(|name| {
                let repo = repo.clone();
                async move { self.app(chart_app(&name, &repo)).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        self.until_all(&names, |a| {
            a.pointer("/status/sync/status") == Some(&json!(SyncCode::Synced))
                && a.pointer("/status/health/status") == Some(&json!(HealthCode::Healthy))
        })
        .await?;
        let elapsed = started.elapsed();
        println!(
            "9. {n} Applications installing one chart from one Helm repository: all Synced and Healthy {:.1} s after creation; index.yaml requests {}, archive downloads {}",
            elapsed.as_secs_f64(),
            server.requests("/index.yaml"),
            server.requests("/web-1.0.0.tgz"),
        );

        // One poll cycle with nothing new: every Application resolves again (each is requeued at the
        // poll interval), from one shared, conditionally revalidated index and the cached archive.
        let (index_before, not_modified_before, archive_before) = (
            server.requests("/index.yaml"),
            server.not_modified(),
            server.requests("/web-1.0.0.tgz"),
        );
        tokio::time::sleep(Duration::from_secs(POLL_SECONDS + POLL_SECONDS / 5)).await;
        println!(
            "   one poll cycle ({POLL_SECONDS} s) with nothing new: {} index.yaml requests ({} answered 304 Not Modified), {} archive downloads (target: 1 index request per poll, 0 downloads)",
            server.requests("/index.yaml") - index_before,
            server.not_modified() - not_modified_before,
            server.requests("/web-1.0.0.tgz") - archive_before,
        );

        // A new version matching `1.*` is published.
        package(server.dir(), "1.1.0")?;
        index_repository(server.dir(), None)?;
        let started = Instant::now();
        self.until_all(&names, |a| {
            a.pointer("/status/sync/revision") == Some(&json!("1.1.0"))
                && a.pointer("/status/sync/status") == Some(&json!(SyncCode::Synced))
        })
        .await?;
        println!(
            "   chart 1.1.0 published: all {n} Applications synced to it {:.1} s later (poll interval {POLL_SECONDS} s); archive downloads of 1.1.0: {}",
            started.elapsed().as_secs_f64(),
            server.requests("/web-1.1.0.tgz"),
        );
        Ok(())
    }

    /// Wait until every Application of `names` satisfies `done` (listing every 2 s), at most 20 min.
    async fn until_all(&self, names: &[String], done: impl Fn(&Value) -> bool) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            let list = self.apps().list(&ListParams::default()).await?;
            let ready = list
                .items
                .iter()
                .filter(|a| a.metadata.name.as_ref().is_some_and(|n| names.contains(n)))
                .filter(|a| done(&a.data))
                .count();
            if ready == names.len() {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(1200) {
                bail!("only {ready} of {} Applications ready after 20 minutes", names.len());
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}
