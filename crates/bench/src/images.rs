//! Benchmark 11: seed 004's image flow, against a real registry (Debian's docker-registry, images
//! pushed with the registry API) and a real Git server (push over http with basic auth). N services,
//! each with an `ImageUpdater` writing `imageTag` of its staging file and a staging Application
//! deploying it: one new image → commit → deployed, with a registry notification and with polling;
//! then a new tag for every service at once → how many commits, and the time until all run it.

use std::time::{Duration, Instant};

use anyhow::bail;
use capstan_testkit::git::{PASSWORD, USER};
use capstan_testkit::registry::{Registry, RegistryOptions, push_image};
use capstan_testkit::run_git;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::setup::*;

const NS: &str = "images-bench";
const WEBHOOK_SECRET: &str = "bench-registry-webhook";

fn staging(tag: &str) -> String {
    format!("# one file per service and environment\nimageTag: {tag}   # written by the image updater\n")
}

fn service(i: usize) -> String {
    format!("svc-{i:03}")
}

impl Bench {
    /// Benchmark 11 (see the module documentation).
    pub(crate) async fn images(&self, n: usize) -> anyhow::Result<()> {
        let registry = Registry::start(RegistryOptions::default()).await?;
        let host = registry.host();
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), "capstan");
        let repo_secret = |name: &str, data: Value| -> anyhow::Result<Secret> {
            Ok(serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": "capstan", "labels": {"capstan.dev/secret-type": "repository"}},
                "stringData": data,
            }))?)
        };
        secrets
            .create(
                &PostParams::default(),
                &repo_secret(
                    "bench-registry",
                    json!({"url": format!("oci://{host}"), "insecureOCIForceHttp": "true"}),
                )?,
            )
            .await?;
        secrets
            .patch(
                "capstan-secret",
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"webhook.registry.secret": WEBHOOK_SECRET}})),
            )
            .await?;

        // The repository: a chart deploying `imageTag`, and one staging file per service.
        self.git.create_repo("images")?;
        let mut files: Vec<(String, String)> = vec![
            ("chart/Chart.yaml".into(), "apiVersion: v2\nname: service\nversion: 0.1.0\n".into()),
            ("chart/values.yaml".into(), format!("repository: {host}/services\nimageTag: \"\"\n")),
            (
                "chart/templates/deployment.yaml".into(),
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: {{ .Release.Name }}}\nspec:\n  selector: {matchLabels: {app: {{ .Release.Name }}}}\n  template:\n    metadata: {labels: {app: {{ .Release.Name }}}}\n    spec: {containers: [{name: app, image: \"{{ .Values.repository }}/{{ .Release.Name }}:{{ .Values.imageTag }}\"}]}\n".into(),
            ),
        ];
        for i in 0..n {
            files.push((format!("services/{}/staging.yaml", service(i)), staging("1.0.0")));
        }
        let commit: Vec<(&str, Option<&str>)> = files.iter().map(|(p, t)| (p.as_str(), Some(t.as_str()))).collect();
        self.git.commit("images", "main", &commit, "services")?;
        let repo = self.git.http_url("images");
        secrets
            .create(
                &PostParams::default(),
                &repo_secret(
                    "bench-images-repo",
                    json!({"url": repo, "username": USER, "password": PASSWORD}),
                )?,
            )
            .await?;
        let open = std::sync::Arc::new(registry);
        push_all(&open, n, "1.0.0").await?;

        let updaters = self.updaters();
        for i in 0..n {
            let name = service(i);
            self.app(json!({
                "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
                "metadata": {"name": name, "namespace": "capstan"},
                "spec": {
                    "sources": [
                        {"repoURL": repo, "targetRevision": "main", "path": "chart",
                         "helm": {"valueFiles": [format!("$root/services/{name}/staging.yaml")]}},
                        {"repoURL": repo, "targetRevision": "main", "ref": "root"},
                    ],
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": NS},
                    "syncPolicy": {"automated": {"prune": true, "selfHeal": true}, "syncOptions": ["CreateNamespace=true"]},
                }
            }))
            .await?;
            let updater = json!({
                "apiVersion": "capstan.dev/v1alpha1", "kind": "ImageUpdater",
                "metadata": {"name": name, "namespace": "capstan"},
                "spec": {"image": format!("{host}/services/{name}"), "policy": {"semver": {"range": "^1"}},
                         "intervalSeconds": 600, "project": "default",
                         "write": {"repoURL": repo, "branch": "main", "path": format!("services/{name}/staging.yaml"), "key": "imageTag"}},
            });
            updaters
                .patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(updater))
                .await?;
        }
        self.until_deployed(&host, n, "1.0.0", Duration::from_secs(600)).await?;

        // One new image, with a registry notification.
        let bare = self.git.repo_path("images");
        let head = run_git(&bare, &["rev-parse", "main"])?;
        let one = service(0);
        push_one(&open, &one, "1.1.0").await?;
        let started = Instant::now();
        self.notify(&host, std::slice::from_ref(&one)).await?;
        let committed = wait_commit(&bare, &head, Duration::from_secs(120)).await?;
        let deployed = self.until_one(&host, &one, "1.1.0", Duration::from_secs(300)).await?;
        println!(
            "11. new image → commit in Git → staging Application running it, with a registry notification: commit {:.1} s, deployed {:.1} s after the notification",
            (committed - started).as_secs_f64(),
            (deployed - started).as_secs_f64(),
        );

        // One new image, by polling (the updater's interval set to 10 s).
        let poll = service(1.min(n - 1));
        updaters
            .patch(
                &poll,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"intervalSeconds": 10}})),
            )
            .await?;
        let head = run_git(&bare, &["rev-parse", "main"])?;
        let started = Instant::now();
        push_one(&open, &poll, "1.2.0").await?;
        let committed = wait_commit(&bare, &head, Duration::from_secs(120)).await?;
        let deployed = self.until_one(&host, &poll, "1.2.0", Duration::from_secs(300)).await?;
        println!(
            "    by polling (intervalSeconds 10, Git poll {POLL_SECONDS} s): commit {:.1} s, deployed {:.1} s after the push",
            (committed - started).as_secs_f64(),
            (deployed - started).as_secs_f64(),
        );

        // Every service gets a new tag at once, announced by one notification per push.
        let head = run_git(&bare, &["rev-parse", "main"])?;
        push_all(&open, n, "1.5.0").await?;
        let started = Instant::now();
        let names: Vec<String> = (0..n).map(service).collect();
        self.notify(&host, &names).await?;
        self.until_deployed(&host, n, "1.5.0", Duration::from_secs(900)).await?;
        let commits = run_git(&bare, &["rev-list", "--count", &format!("{}..main", head.trim())])?;
        println!(
            "    {n} services with a new tag at once: all deployed {:.1} s after the notifications, in {} commit(s) to the repository",
            started.elapsed().as_secs_f64(),
            commits.trim(),
        );
        Ok(())
    }

    fn updaters(&self) -> Api<capstan_api::image_updater::ImageUpdater> {
        Api::namespaced(self.client.clone(), "capstan")
    }

    /// Post one distribution notification naming `services` (one push event each).
    async fn notify(&self, host: &str, services: &[String]) -> anyhow::Result<()> {
        let events: Vec<Value> = services
            .iter()
            .map(|s| json!({"action": "push", "target": {"repository": format!("services/{s}")}, "request": {"host": host}}))
            .collect();
        let body = json!({ "events": events }).to_string();
        let url = format!("{}/api/webhook/registry", self.server);
        let status = tokio::task::spawn_blocking(move || -> anyhow::Result<u16> {
            let agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .new_agent();
            let answer = agent
                .post(&url)
                .header("Authorization", format!("Bearer {WEBHOOK_SECRET}"))
                .header("Content-Type", "application/json")
                .send(body.as_str())?;
            Ok(answer.status().as_u16())
        })
        .await??;
        if status != 200 {
            bail!("the registry notification was answered {status}");
        }
        Ok(())
    }

    /// When every `svc-NNN` Deployment runs `tag`.
    async fn until_deployed(&self, host: &str, n: usize, tag: &str, timeout: Duration) -> anyhow::Result<Instant> {
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), NS);
        let started = Instant::now();
        loop {
            let list = deployments.list(&ListParams::default()).await?;
            let running = list
                .items
                .iter()
                .filter(|d| {
                    let name = d.metadata.name.clone().unwrap_or_default();
                    d.spec.template.spec.as_ref().is_some_and(|s| {
                        s.containers.first().and_then(|c| c.image.clone())
                            == Some(format!("{host}/services/{name}:{tag}"))
                    })
                })
                .count();
            if running == n {
                return Ok(Instant::now());
            }
            if started.elapsed() > timeout {
                bail!("{running} of {n} services run {tag} after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// When the Deployment of `name` runs `tag`.
    async fn until_one(&self, host: &str, name: &str, tag: &str, timeout: Duration) -> anyhow::Result<Instant> {
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), NS);
        let started = Instant::now();
        loop {
            let image = deployments
                .get_opt(name)
                .await?
                .and_then(|d| d.spec.template.spec)
                .and_then(|s| s.containers.first().and_then(|c| c.image.clone()));
            if image == Some(format!("{host}/services/{name}:{tag}")) {
                return Ok(Instant::now());
            }
            if started.elapsed() > timeout {
                bail!("{name} does not run {tag} after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Push `tag` of every service's image (blocking registry calls, off the runtime).
async fn push_all(registry: &std::sync::Arc<Registry>, n: usize, tag: &str) -> anyhow::Result<()> {
    let (registry, tag) = (registry.clone(), tag.to_string());
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        for i in 0..n {
            push_image(&registry, &format!("services/{}", service(i)), &tag)?;
        }
        Ok(())
    })
    .await?
}

async fn push_one(registry: &std::sync::Arc<Registry>, name: &str, tag: &str) -> anyhow::Result<()> {
    let (registry, repo, tag) = (registry.clone(), format!("services/{name}"), tag.to_string());
    tokio::task::spawn_blocking(move || push_image(&registry, &repo, &tag).map(|_| ())).await?
}

/// When `main` of the bare repository moves past `head`.
async fn wait_commit(bare: &std::path::Path, head: &str, timeout: Duration) -> anyhow::Result<Instant> {
    let started = Instant::now();
    loop {
        if run_git(bare, &["rev-parse", "main"])?.trim() != head.trim() {
            return Ok(Instant::now());
        }
        if started.elapsed() > timeout {
            bail!("no commit within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
