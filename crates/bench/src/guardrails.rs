//! Benchmarks 14 and 15: the guardrails' cost. 14: the policies' evaluation on a sync of N
//! ConfigMaps (five policies matching every ConfigMap, all passing), from the controller's own
//! `capstan_policy_evaluation_duration_seconds`, against the sync's duration (goal: under 10 %),
//! with the same sync without policies beside it. 15: `capstan plan` of a revision changing every
//! one of M Applications that follow one repository (goal: under 30 s at 200).

use std::time::{Duration, Instant};

use capstan_api::operation::OperationPhase;
use capstan_api::status::SyncCode;
use futures::{StreamExt, stream};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::setup::*;

/// Five policies on ConfigMaps, every one passing: a regex, a comprehension over the data, a
/// variable, a label check under a match condition, a size bound.
const POLICIES: &[(&str, &str)] = &[
    ("index-is-numeric", "object.data.index.matches('^[0-9]+$')"),
    ("no-empty-values", "object.data.all(k, size(object.data[k]) > 0)"),
    ("payload-bounded", "size(variables.payload) <= 1024"),
    ("names-prefixed", "object.metadata.name.startsWith('cm-')"),
    ("few-keys", "size(object.data) <= 16"),
];

fn policy(name: &str, expression: &str) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Policy",
        "metadata": {"name": name, "namespace": "capstan"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["CREATE", "UPDATE"]}]},
            "matchConditions": [{"name": "has-data", "expression": "has(object.data)"}],
            "variables": [{"name": "payload", "expression": "object.data.?payload.orValue('')"}],
            "validations": [{"expression": expression}],
        },
    })
}

/// `capstan_policy_evaluation_duration_seconds` sum and `capstan_policy_evaluations` from the
/// controller's `/metrics` at `url`.
async fn evaluation_metrics(url: &str) -> anyhow::Result<(f64, f64)> {
    let url = url.to_string();
    let text = tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        Ok(agent.get(&url).call()?.into_body().read_to_string()?)
    })
    .await??;
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((
        value("capstan_policy_evaluation_duration_seconds_sum"),
        value("capstan_policy_evaluations_total"),
    ))
}

impl Bench {
    /// Sync `name` once (requested) and return how long it took.
    async fn timed_sync(&self, name: &str, who: &str) -> anyhow::Result<Duration> {
        self.timed_sync_as(name, who).await
    }

    /// [`Bench::timed_sync`], for the other benchmark modules: waits until `name` is OutOfSync,
    /// requests a sync as `who`, and times it until that operation Succeeded.
    pub(crate) async fn timed_sync_as(&self, name: &str, who: &str) -> anyhow::Result<Duration> {
        self.wait(name, Duration::from_secs(120), |s| {
            s.pointer("/sync/status") == Some(&json!(SyncCode::OutOfSync))
        })
        .await?;
        let watch = self.watch(name).await?;
        let started = Instant::now();
        self.request_sync(name, who).await?;
        watch
            .until(name, Duration::from_secs(600), |s| {
                s.pointer("/operationState/operation/initiatedBy") == Some(&json!(who))
                    && s.pointer("/operationState/phase") == Some(&json!(OperationPhase::Succeeded))
            })
            .await?;
        Ok(started.elapsed())
    }

    /// Benchmark 14.
    pub(crate) async fn policy_cost(&self, n: usize) -> anyhow::Result<()> {
        let manifests: String = (0..n)
            .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i:05}}}\ndata: {{index: \"{i}\", payload: \"{}\"}}\n---\n", "x".repeat(64)))
            .collect();
        self.git.create_repo("guarded")?;
        self.git
            .commit("guarded", "main", &[("cms/all.yaml", Some(&manifests))], "configmaps")?;
        let repo = self.git.git_url("guarded");
        for (name, ns) in [("unguarded", "policy-unguarded"), ("guarded", "policy-guarded")] {
            let mut app = app_manifest(name, &repo, "cms", ns, false);
            app["spec"]["syncPolicy"] = json!({"syncOptions": ["CreateNamespace=true"]});
            self.app(app).await?;
        }
        let without = self.timed_sync("unguarded", "bench-unguarded").await?;
        let ar =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("capstan.dev", "v1alpha1", "Policy"), "policies");
        let policies: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), "capstan", &ar);
        for (name, expression) in POLICIES {
            policies
                .patch(
                    name,
                    &PatchParams::apply("bench").force(),
                    &Patch::Apply(policy(name, expression)),
                )
                .await?;
        }
        // The controller's policy cache has them once each is reported Ready.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let list = policies.list(&Default::default()).await?;
            let ready = list
                .items
                .iter()
                .filter(|p| p.data.pointer("/status/conditions/0/status") == Some(&json!("True")))
                .count();
            if ready == POLICIES.len() {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "only {ready} policies Ready after 60 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (seconds_before, judged_before) = evaluation_metrics(&self.metrics).await?;
        let with = self.timed_sync("guarded", "bench-guarded").await?;
        let (seconds_after, judged_after) = evaluation_metrics(&self.metrics).await?;
        let evaluation = seconds_after - seconds_before;
        // They judge every ConfigMap of the cluster: gone before the next benchmark.
        for (name, _) in POLICIES {
            policies.delete(name, &Default::default()).await?;
        }
        println!(
            "14. policies on a sync of {n} ConfigMaps: {} policies, {:.0} judgements in {:.0} ms, {:.1} % of the sync's {:.2} s (goal < 10 %); the same sync without policies {:.2} s",
            POLICIES.len(),
            judged_after - judged_before,
            evaluation * 1000.0,
            100.0 * evaluation / with.as_secs_f64(),
            with.as_secs_f64(),
            without.as_secs_f64()
        );
        Ok(())
    }

    /// Benchmark 15.
    pub(crate) async fn plan_time(&self, m: usize) -> anyhow::Result<()> {
        let files = |replicas: &str| -> Vec<(String, String)> {
            (0..m)
                .map(|i| {
                    (
                        format!("apps/app-{i:03}/all.yaml"),
                        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\ndata: {{replicas: \"{replicas}\"}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: web}}\nspec: {{ports: [{{port: 80}}]}}\n"),
                    )
                })
                .collect()
        };
        let commit = |branch: &str, replicas: &str| -> anyhow::Result<()> {
            let files = files(replicas);
            let refs: Vec<(&str, Option<&str>)> = files.iter().map(|(p, c)| (p.as_str(), Some(c.as_str()))).collect();
            self.git.commit("planned", branch, &refs, "apps")?;
            Ok(())
        };
        self.git.create_repo("planned")?;
        commit("main", "1")?;
        let repo = self.git.git_url("planned");
        let names: Vec<String> = (0..m).map(|i| format!("plan-{i:03}")).collect();
        let created: Vec<anyhow::Result<()>> = stream::iter(names.iter().enumerate())
            .map(|(i, name)| {
                let repo = repo.clone();
                async move {
                    self.app(app_manifest(name, &repo, &format!("apps/app-{i:03}"), name, true))
                        .await
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        let deadline = Instant::now() + Duration::from_secs(900);
        loop {
            let list = self.apps().list(&Default::default()).await?;
            let synced = list
                .items
                .iter()
                .filter(|a| a.metadata.name.as_deref().is_some_and(|n| n.starts_with("plan-")))
                .filter(|a| a.data.pointer("/status/sync/status") == Some(&json!(SyncCode::Synced)))
                .count();
            if synced == m {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "only {synced} of {m} Applications Synced after 15 minutes"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        commit("pr-1", "2")?;
        let started = Instant::now();
        let out = std::process::Command::new(&self.capstan)
            .args([
                "plan",
                "--kubeconfig",
                &self.kubeconfig(),
                "--repo",
                &repo,
                "--revision",
                "pr-1",
                "-o",
                "markdown",
            ])
            .output()?;
        let elapsed = started.elapsed();
        anyhow::ensure!(
            out.status.success(),
            "capstan plan: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let markdown = String::from_utf8_lossy(&out.stdout);
        let changed = markdown.lines().filter(|l| l.contains("| changed |")).count();
        println!(
            "15. capstan plan of a revision changing {m} Applications: {:.2} s (goal < 30 s), {changed} reported changed, Markdown {:.1} KB",
            elapsed.as_secs_f64(),
            markdown.len() as f64 / 1000.0
        );
        Ok(())
    }
}
