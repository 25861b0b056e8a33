//! `capstan plan`: what a revision of a repository would change across every Application and
//! ApplicationSet that follows it, without applying anything (`capstan_plan`); or, offline, the
//! policies' verdicts on a directory of manifests. Exit status 1 when a policy denies or something
//! fails to render, 2 when the plan cannot be made. Logged in to a server (`capstan login`), a
//! repository's plan is the server's (`POST /api/plan`: only what the caller's projects may read).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::kube_client::KubeArgs;
use crate::output::out;
use crate::remote::{Remote, RemoteError};

/// How the plan is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    /// A summary table, then each Application's verdicts and diffs.
    Text,
    /// The plan as JSON (the answer of `POST /api/plan`).
    Json,
    /// Markdown for a pull-request comment: a summary table, collapsible details, size-bounded.
    Markdown,
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The kubeconfig of Capstan's cluster (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    context: Option<String>,
    /// Capstan's namespace.
    #[arg(long = "namespace", short = 'n', default_value = capstan_api::NAMESPACE)]
    namespace: String,
    /// The repository whose revision is planned.
    #[arg(long, required_unless_present = "manifests", conflicts_with = "manifests")]
    repo: Option<String>,
    /// The branch, tag or commit to plan.
    #[arg(long, requires = "repo")]
    revision: Option<String>,
    /// Only the Applications and ApplicationSets that follow this revision of the repository (the
    /// pull request's target branch).
    #[arg(long, requires = "repo")]
    base: Option<String>,
    /// Offline: the directory (or file) of manifests to judge by the policies, without a cluster.
    #[arg(long, requires = "policies")]
    manifests: Option<PathBuf>,
    /// Offline: files or directories of Policy manifests (repeatable).
    #[arg(long = "policies", requires = "manifests")]
    policies: Vec<PathBuf>,
    /// Offline: the destination cluster's labels, KEY=VALUE (repeatable or comma-separated).
    #[arg(long = "cluster-labels", requires = "manifests", value_delimiter = ',')]
    cluster_labels: Vec<String>,
    /// Offline: the destination cluster's name.
    #[arg(long, requires = "manifests", default_value = "offline")]
    cluster: String,
    /// Offline: the project.
    #[arg(long, requires = "manifests", default_value = "default")]
    project: String,
    /// Offline: the namespace of namespaced objects that name none.
    #[arg(long = "destination-namespace", requires = "manifests", default_value = "")]
    destination_namespace: String,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    output: PlanFormat,
    /// Refuse the implicit `default` project (as the controller's flag of the same name).
    #[arg(long, env = "CAPSTAN_DENY_IMPLICIT_DEFAULT_PROJECT")]
    deny_implicit_default_project: bool,
}

fn labels(pairs: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    pairs
        .iter()
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
            _ => Err(anyhow::anyhow!("--cluster-labels: {p:?} is not KEY=VALUE")),
        })
        .collect()
}

pub async fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let plan = match (&args.manifests, &args.repo) {
        (Some(manifests), _) => {
            let request = capstan_plan::offline::OfflineRequest {
                manifests: manifests.clone(),
                policies: args.policies.clone(),
                cluster_labels: labels(&args.cluster_labels)?,
                cluster: args.cluster.clone(),
                project: args.project.clone(),
                namespace: args.destination_namespace.clone(),
            };
            capstan_plan::offline::offline(&request).map_err(|e| e.to_string())
        }
        (None, Some(repo)) => {
            let Some(revision) = args.revision.clone() else {
                anyhow::bail!("--revision is required with --repo");
            };
            let request = capstan_plan::PlanRequest {
                repo: repo.clone(),
                revision,
                base: args.base.clone(),
            };
            if let Some(remote) = Remote::current()? {
                remote_plan(&remote, &request).await?
            } else {
                kube_plan(&args, &request).await?
            }
        }
        (None, None) => anyhow::bail!("give --repo and --revision, or --manifests and --policies"),
    };
    let plan = match plan {
        Ok(plan) => plan,
        Err(err) => {
            eprintln!("error: {err}");
            return Ok(ExitCode::from(2));
        }
    };
    let text = match args.output {
        PlanFormat::Text => capstan_plan::report::text(&plan),
        PlanFormat::Markdown => capstan_plan::report::markdown(&plan),
        PlanFormat::Json => format!("{}\n", serde_json::to_string_pretty(&plan)?),
    };
    out!("{text}");
    Ok(if plan.failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The plan made by the server (`POST /api/plan`), which reads only what the caller's projects
/// allow; an expired login is the caller's error (exit 2 as everywhere), a refusal the plan's.
async fn remote_plan(
    remote: &Remote,
    request: &capstan_plan::PlanRequest,
) -> anyhow::Result<Result<capstan_plan::Plan, String>> {
    let body = serde_json::json!({"repo": request.repo, "revision": request.revision, "base": request.base});
    match remote.post::<capstan_plan::Plan>("/api/plan", &body).await {
        Ok(plan) => Ok(Ok(plan)),
        Err(err @ RemoteError::Expired { .. }) => Err(err.into()),
        Err(err) => Ok(Err(err.to_string())),
    }
}

/// The plan made here with the kubeconfig's rights.
async fn kube_plan(
    args: &PlanArgs,
    request: &capstan_plan::PlanRequest,
) -> anyhow::Result<Result<capstan_plan::Plan, String>> {
    let client = KubeArgs {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    }
    .client()
    .await?;
    let cache = crate::commands::default_cache().join("cli");
    let pipeline =
        capstan_controller::Pipeline::new(client, cache, &args.namespace, Duration::from_secs(60), Duration::ZERO);
    pipeline
        .projects
        .deny_implicit_default(args.deny_implicit_default_project);
    pipeline.clusters.load().await?;
    Ok(capstan_plan::plan(&pipeline, request).await.map_err(|e| e.to_string()))
}
