//! Benchmark 6: one ApplicationSet producing N Applications on two spoke clusters, and the time for
//! one changed generator file to reach its Application.

use std::time::{Duration, Instant};

use anyhow::bail;
use capstan_api::status::{HealthCode, SyncCode};
use capstan_testkit::TestCluster;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::json;

use crate::setup::*;

impl Bench {
    /// Benchmark 6: one ApplicationSet (git files generator, one file per service, each naming one of
    /// two spoke clusters) producing N Applications; time until all are Synced and Healthy, then the
    /// time for one changed file to reach its Application, and how many Applications that touched.
    pub(crate) async fn appset(&self, n: usize) -> anyhow::Result<()> {
        let (spoke_a, spoke_b) = tokio::try_join!(TestCluster::start(), TestCluster::start())?;
        let hub = self.kubeconfig();
        for (name, spoke) in [("spoke-a", &spoke_a), ("spoke-b", &spoke_b)] {
            let kc = spoke.kubeconfig().to_string_lossy().to_string();
            run(
                &self.capstan,
                &[
                    "cluster",
                    "add",
                    name,
                    "--kubeconfig",
                    &kc,
                    "--use-kubeconfig-credentials",
                    "--hub-kubeconfig",
                    &hub,
                ],
            )?;
        }
        self.git.create_repo("services")?;
        let app = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: b}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx}]}\n";
        let file = |i: usize, revision: &str| {
            let cluster = if i.is_multiple_of(2) { "spoke-a" } else { "spoke-b" };
            format!("service: svc-{i:03}\ncluster: {cluster}\ntargetRevision: {revision}\n")
        };
        let files: Vec<(String, String)> = (0..n)
            .map(|i| (format!("services/svc-{i:03}/config.yaml"), file(i, "main")))
            .collect();
        let mut entries: Vec<(&str, Option<&str>)> =
            files.iter().map(|(p, c)| (p.as_str(), Some(c.as_str()))).collect();
        entries.push(("app/all.yaml", Some(app)));
        let main = self.git.commit("services", "main", &entries, "services")?;
        let repo = self.git.git_url("services");
        let set = json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
            "metadata": {"name": "services", "namespace": "capstan"},
            "spec": {
                "generators": [{"git": {"repoURL": repo, "revision": "main", "files": [{"path": "services/*/config.yaml"}]}}],
                "template": {
                    "metadata": {"name": "{{service}}"},
                    "spec": {
                        "source": {"repoURL": repo, "targetRevision": "{{targetRevision}}", "path": "app"},
                        "destination": {"name": "{{cluster}}", "namespace": "{{service}}"},
                        "syncPolicy": {"automated": {"prune": true}, "syncOptions": ["CreateNamespace=true"]},
                    },
                },
            },
        });
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("capstan.dev", "v1alpha1", "ApplicationSet"),
            "applicationsets",
        );
        let sets: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), "capstan", &ar);
        let started = Instant::now();
        sets.patch("services", &PatchParams::apply("bench").force(), &Patch::Apply(set))
            .await?;
        let is_generated = |a: &DynamicObject| a.metadata.name.as_deref().is_some_and(|n| n.starts_with("svc-"));
        loop {
            let list = self.apps().list(&ListParams::default()).await?;
            let done = list
                .items
                .iter()
                .filter(|a| is_generated(a))
                .filter(|a| {
                    a.data.pointer("/status/sync/status") == Some(&json!(SyncCode::Synced))
                        && a.data.pointer("/status/health/status") == Some(&json!(HealthCode::Healthy))
                })
                .count();
            if done == n {
                break;
            }
            if started.elapsed() > Duration::from_secs(900) {
                bail!("only {done} of {n} generated Applications Synced and Healthy after 15 minutes");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let all_healthy = started.elapsed();

        // One file changes: only its Application's spec may change.
        let before: std::collections::HashMap<String, i64> = self
            .apps()
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|a| is_generated(a))
            .map(|a| {
                (
                    a.metadata.name.clone().unwrap_or_default(),
                    a.metadata.generation.unwrap_or(0),
                )
            })
            .collect();
        let changed = format!("services/svc-{:03}/config.yaml", n / 2);
        self.git.commit(
            "services",
            "main",
            &[(&changed, Some(&file(n / 2, &main)))],
            "pin one service",
        )?;
        let started = Instant::now();
        let refresh = json!({"metadata": {"annotations": {"capstan.dev/refresh": "normal"}}});
        sets.patch("services", &PatchParams::default(), &Patch::Merge(refresh))
            .await?;
        let target = format!("svc-{:03}", n / 2);
        loop {
            let app = self.apps().get(&target).await?;
            if app.data.pointer("/spec/source/targetRevision") == Some(&json!(main)) {
                break;
            }
            if started.elapsed() > Duration::from_secs(120) {
                bail!("{target} did not get the changed file within 2 minutes");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let propagated = started.elapsed();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let touched: Vec<String> = self
            .apps()
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|a| is_generated(a))
            .filter(|a| {
                let name = a.metadata.name.clone().unwrap_or_default();
                before.get(&name) != Some(&a.metadata.generation.unwrap_or(0))
            })
            .map(|a| a.metadata.name.clone().unwrap_or_default())
            .collect();
        println!(
            "6. 1 ApplicationSet x {n} generated Applications across 2 spokes: all Synced and Healthy {:.1} s after creation; one changed file reached its Application {:.2} s after the refresh; Applications whose spec changed: {} ({}) (target: only the affected one)",
            all_healthy.as_secs_f64(),
            propagated.as_secs_f64(),
            touched.len(),
            touched.join(", ")
        );
        drop((spoke_a, spoke_b));
        Ok(())
    }
}
