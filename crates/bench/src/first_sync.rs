//! Benchmarks 1 and 2: the first sync of N ConfigMaps against `kubectl apply --server-side`, then a
//! re-sync with nothing changed.

use std::time::{Duration, Instant};

use capstan_api::operation::OperationPhase;
use capstan_api::status::SyncCode;
use serde_json::json;

use crate::setup::*;

impl Bench {
    /// Benchmarks 1 and 2: first sync of N ConfigMaps vs `kubectl apply --server-side`, then a
    /// re-sync with nothing changed.
    pub(crate) async fn first_sync_and_resync(&self, n: usize) -> anyhow::Result<()> {
        let manifests: String = (0..n)
            .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i:05}}}\ndata: {{index: \"{i}\", payload: \"{}\"}}\n---\n", "x".repeat(64)))
            .collect();
        // kubectl on the same manifests, into its own namespace.
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("configmaps.yaml");
        std::fs::write(&file, &manifests)?;
        let kubectl = capstan_testkit_kubectl()?;
        run(
            &kubectl,
            &[
                "--kubeconfig",
                &self.kubeconfig(),
                "create",
                "namespace",
                "kubectl-bench",
            ],
        )?;
        let started = Instant::now();
        run(
            &kubectl,
            &[
                "--kubeconfig",
                &self.kubeconfig(),
                "apply",
                "--server-side",
                "-n",
                "kubectl-bench",
                "-f",
                &file.to_string_lossy(),
            ],
        )?;
        let kubectl_time = started.elapsed();

        self.git.create_repo("configmaps")?;
        self.git.commit(
            "configmaps",
            "main",
            &[("cms/all.yaml", Some(&manifests))],
            "configmaps",
        )?;
        self.app(app_manifest(
            "configmaps",
            &self.git.git_url("configmaps"),
            "cms",
            "capstan-bench",
            false,
        ))
        .await?;
        self.wait("configmaps", Duration::from_secs(120), |s| {
            s.pointer("/sync/status") == Some(&json!(SyncCode::OutOfSync))
        })
        .await?;
        let writes_before = self.configmap_writes().await?;
        let watch = self.watch("configmaps").await?;
        let started = Instant::now();
        self.request_sync("configmaps", "bench-first").await?;
        watch
            .until("configmaps", Duration::from_secs(600), |s| {
                s.pointer("/operationState/operation/initiatedBy") == Some(&json!("bench-first"))
                    && s.pointer("/operationState/phase") == Some(&json!(OperationPhase::Succeeded))
            })
            .await?;
        let capstan_time = started.elapsed();
        let first_writes = self.configmap_writes().await? - writes_before;
        println!(
            "1. first sync of {n} ConfigMaps: capstan {:.2} s, kubectl apply --server-side {:.2} s, ratio {:.2} (target <= 0.5); {first_writes} ConfigMap write requests",
            capstan_time.as_secs_f64(),
            kubectl_time.as_secs_f64(),
            capstan_time.as_secs_f64() / kubectl_time.as_secs_f64()
        );

        self.wait("configmaps", Duration::from_secs(60), |s| {
            s.pointer("/sync/status") == Some(&json!(SyncCode::Synced))
        })
        .await?;
        // Measure the re-sync itself, not the tail of the first one: wait until the controller has
        // finished reacting to the 2,000 creations (the Application unchanged for 2 s).
        self.settle("configmaps", Duration::from_secs(2), Duration::from_secs(60))
            .await?;
        let writes_before = self.configmap_writes().await?;
        let watch = self.watch("configmaps").await?;
        let started = Instant::now();
        self.request_sync("configmaps", "bench-resync").await?;
        let requested = started.elapsed();
        watch
            .until("configmaps", Duration::from_secs(120), |s| {
                s.pointer("/operationState/operation/initiatedBy") == Some(&json!("bench-resync"))
                    && s.pointer("/operationState/phase") == Some(&json!(OperationPhase::Succeeded))
            })
            .await?;
        let resync_time = started.elapsed();
        let writes = self.configmap_writes().await? - writes_before;
        let size = serde_json::to_vec(&self.apps().get("configmaps").await?)?.len();
        println!(
            "2. re-sync of {n} unchanged ConfigMaps: {:.2} s from request to Succeeded (target <= 1 s; writing the request took {} ms), {writes} ConfigMap write requests (target 0); the Application is {} KB",
            resync_time.as_secs_f64(),
            requested.as_millis(),
            size / 1000
        );
        Ok(())
    }
}
