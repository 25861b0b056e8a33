//! Benchmark 4: the time from a change to a tracked field until Capstan has reverted it.

use std::time::{Duration, Instant};

use anyhow::bail;
use capstan_api::status::{HealthCode, SyncCode};
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::json;

use crate::setup::*;

impl Bench {
    /// Benchmark 4: time from a change to a tracked field until Capstan has reverted it.
    pub(crate) async fn self_heal(&self, samples: usize) -> anyhow::Result<()> {
        self.git.create_repo("heal")?;
        let configmap = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: target}\ndata: {value: desired}\n";
        let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: target}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: target}}\n  template:\n    metadata: {labels: {app: target}}\n    spec: {containers: [{name: c, image: example/app:1}]}\n";
        self.git.commit(
            "heal",
            "main",
            &[("app/cm.yaml", Some(configmap)), ("app/deploy.yaml", Some(deployment))],
            "heal",
        )?;
        self.app(app_manifest(
            "heal",
            &self.git.git_url("heal"),
            "app",
            "heal-bench",
            true,
        ))
        .await?;
        self.wait("heal", Duration::from_secs(120), |s| {
            s.pointer("/sync/status") == Some(&json!(SyncCode::Synced))
                && s.pointer("/health/status") == Some(&json!(HealthCode::Healthy))
        })
        .await?;
        let kubectl = capstan_testkit_kubectl()?;
        let kubeconfig = self.kubeconfig();
        let gvk = |g: &str, v: &str, k: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), plural)
        };
        let cms: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            "heal-bench",
            &gvk("", "v1", "ConfigMap", "configmaps"),
        );
        let deploys: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            "heal-bench",
            &gvk("apps", "v1", "Deployment", "deployments"),
        );
        // Half the samples scale the Deployment, half patch the ConfigMap, both with kubectl; each is
        // timed from kubectl's start (so its own start-up counts) until Capstan has put Git back.
        let (mut scaled, mut patched, mut kubectl_own) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..samples {
            let scale = i % 2 == 0;
            let replicas = format!("--replicas={}", 3 + i % 3);
            let patch = json!({"data": {"value": format!("drift-{i}")}}).to_string();
            let drift: &[&str] = if scale {
                &["scale", "deployment/target", &replicas]
            } else {
                &["patch", "configmap/target", "--type=merge", "-p", &patch]
            };
            let args = [&["--kubeconfig", kubeconfig.as_str(), "-n", "heal-bench"], drift].concat();
            let started = Instant::now();
            run(&kubectl, &args)?;
            kubectl_own.push(started.elapsed());
            loop {
                let reverted = if scale {
                    deploys.get("target").await?.data.pointer("/spec/replicas") == Some(&json!(2))
                } else {
                    cms.get("target").await?.data.pointer("/data/value") == Some(&json!("desired"))
                };
                if reverted {
                    break;
                }
                if started.elapsed() > Duration::from_secs(30) {
                    bail!("drift {i} was not reverted within 30 s");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if scale { &mut scaled } else { &mut patched }.push(started.elapsed());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let mut all: Vec<Duration> = scaled.iter().chain(&patched).copied().collect();
        println!(
            "4. self-heal after `kubectl scale` of a Deployment / `kubectl patch` of a ConfigMap, {samples} samples from kubectl's start: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (scale p50 {:.0} ms, patch p50 {:.0} ms; kubectl's own run p50 {:.0} ms; targets p50 <= 1 s, p99 <= 3 s)",
            ms(percentile(&mut all, 0.5)),
            ms(percentile(&mut all, 0.99)),
            ms(percentile(&mut all, 1.0)),
            ms(percentile(&mut scaled, 0.5)),
            ms(percentile(&mut patched, 0.5)),
            ms(percentile(&mut kubectl_own, 0.5)),
        );
        Ok(())
    }
}
