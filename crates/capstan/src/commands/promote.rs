//! `capstan promote SERVICE --from ENV --to ENV`: promotion between environments from the command
//! line, through the Kubernetes API and Git with the caller's own credentials (as `capstan app`
//! does); the rules and the commit are `capstan-promote`'s, the same the HTTP API applies.
//! `capstan promote history SERVICE` prints a pipeline's promotions. After `capstan login`, both
//! go through the server's API instead, with the user's `promote` role.

use crate::output::{out, outln};
use std::process::ExitCode;

use anyhow::Context;
use capstan_promote::{Outcome, PromoteRequest, Promoter};

use crate::commands::app::print_table;
use crate::commands::promotion_table::promotion_rows;
use crate::kube_client::KubeArgs;

/// `capstan promote`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct PromoteArgs {
    /// Path of the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, global = true, env = "KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    /// Context in the kubeconfig.
    #[arg(long, global = true)]
    context: Option<String>,
    /// Namespace of the pipelines and Applications.
    #[arg(long = "namespace", short = 'n', global = true, default_value = capstan_api::NAMESPACE,
          alias = "app-namespace", short_alias = 'N')]
    namespace: String,
    /// The PromotionPipeline (optional when exactly one exists).
    #[arg(long, global = true)]
    pipeline: Option<String>,
    /// The service to promote.
    #[arg(required = true)]
    service: Option<String>,
    /// The source environment.
    #[arg(long, required = true)]
    from: Option<String>,
    /// The target environment.
    #[arg(long, required = true)]
    to: Option<String>,
    /// Promote even though a check fails (the source not Synced and Healthy, a backwards promotion).
    #[arg(long, requires = "reason")]
    force: bool,
    /// Why the checks are overridden (recorded in the commit message and the history).
    #[arg(long)]
    reason: Option<String>,
    /// Show what would change (the fields, the target file's diff, the checks) and commit nothing.
    #[arg(long)]
    dry_run: bool,
    /// Without an AppProject named `default`, the `default` project denies everything (instead of
    /// allowing everything), as the controller started with the same flag does. Set
    /// CAPSTAN_DENY_IMPLICIT_DEFAULT_PROJECT=true once for every component.
    #[arg(long, global = true, env = "CAPSTAN_DENY_IMPLICIT_DEFAULT_PROJECT")]
    deny_implicit_default_project: bool,

    #[command(subcommand)]
    command: Option<PromoteCommand>,
}

#[derive(Debug, clap::Subcommand)]
enum PromoteCommand {
    /// The promotions made, newest first.
    History {
        /// Only this service's promotions.
        service: Option<String>,
    },
}

/// Run `capstan promote`.
pub async fn run(args: PromoteArgs) -> anyhow::Result<ExitCode> {
    if let Some(remote) = crate::remote::Remote::current()? {
        return remote_run(&remote, args).await;
    }
    let kube = KubeArgs {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    let client = kube.client().await?;
    if let Some(PromoteCommand::History { service }) = args.command {
        let pipeline = capstan_promote::find_pipeline(&client, &args.namespace, args.pipeline.as_deref()).await?;
        let rows = promotion_rows(capstan_promote::history::of(&pipeline, service.as_deref()), true);
        print_table(&rows);
        return Ok(ExitCode::SUCCESS);
    }
    let request = PromoteRequest {
        pipeline: args.pipeline,
        service: args.service.context("SERVICE is required")?,
        from: args.from.context("--from is required")?,
        to: args.to.context("--to is required")?,
        force: args.force,
        reason: args.reason.unwrap_or_default(),
        user: format!("cli:{}", super::login_name()),
        expected_source_revision: None,
    };
    let mut promoter = Promoter::new(client, args.namespace);
    promoter.deny_implicit_default = args.deny_implicit_default_project;
    if args.dry_run {
        let plan = promoter.plan(&request).await?;
        outln!(
            "{} (values at {}) → {}: {} at {}",
            plan.source_app,
            short(&plan.source_revision),
            plan.target_app,
            plan.target_path,
            short(&plan.target_revision)
        );
        match &plan.check_failure {
            None => outln!("checks: passed"),
            Some(failure) => outln!("checks: failed, a promotion needs --force --reason: {failure}"),
        }
        if plan.changes.is_empty() {
            outln!(
                "nothing to change: {} already has {}'s values",
                request.to,
                request.from
            );
        }
        for c in &plan.changes {
            outln!("  {}: {} → {}", c.field, c.old, c.new);
        }
        out!("{}", plan.diff());
        outln!("dry run: nothing committed");
        return Ok(ExitCode::SUCCESS);
    }
    match promoter.promote(&request).await? {
        Outcome::Unchanged { pipeline } => {
            outln!(
                "{} {} already has {}'s values (pipeline {pipeline}): nothing to commit",
                request.service,
                request.to,
                request.from
            );
        }
        Outcome::Promoted { pipeline, record } => {
            outln!(
                "promoted {} {} → {} in commit {} (pipeline {pipeline})",
                record.service,
                record.from,
                record.to,
                record.commit
            );
            for c in &record.changes {
                outln!("  {}: {} → {}", c.field, c.old, c.new);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `capstan promote` through Capstan's server (after `capstan login`): `POST /api/promotions`
/// (`/preview` for `--dry-run`) and `GET /api/promotions/{pipeline}/history`, with the user's
/// `promote` role; the same output as through the kubeconfig.
async fn remote_run(remote: &crate::remote::Remote, args: PromoteArgs) -> anyhow::Result<ExitCode> {
    use crate::remote::client::encode;
    use serde_json::{Value, json};
    if let Some(PromoteCommand::History { service }) = args.command {
        let pipeline = args
            .pipeline
            .context("--pipeline is needed through the server (it lists no pipelines)")?;
        let mut path = format!("/api/promotions/{}/history", encode(&pipeline));
        if let Some(s) = &service {
            path.push_str(&format!("?service={}", encode(s)));
        }
        let answer: Value = remote.get(&path).await?;
        let records: Vec<capstan_api::promotion::PromotionRecord> =
            serde_json::from_value(answer["items"].clone()).context("the server's history")?;
        print_table(&promotion_rows(records, true));
        return Ok(ExitCode::SUCCESS);
    }
    let service = args.service.context("SERVICE is required")?;
    let from = args.from.context("--from is required")?;
    let to = args.to.context("--to is required")?;
    let body = json!({
        "pipeline": args.pipeline, "service": service, "from": from, "to": to,
        "force": args.force, "reason": args.reason.unwrap_or_default(),
    });
    if args.dry_run {
        let plan: Value = remote.post("/api/promotions/preview", &body).await?;
        let text = |k: &str| plan[k].as_str().unwrap_or_default().to_string();
        outln!(
            "{} (values at {}) → {}: {} at {}",
            text("sourceApplication"),
            short(&text("sourceRevision")),
            text("targetApplication"),
            text("path"),
            short(&text("targetRevision"))
        );
        match plan["checkFailure"].as_str() {
            None => outln!("checks: passed"),
            Some(failure) => outln!("checks: failed, a promotion needs --force --reason: {failure}"),
        }
        let changes = plan["changes"].as_array().cloned().unwrap_or_default();
        if changes.is_empty() {
            outln!("nothing to change: {to} already has {from}'s values");
        }
        for c in &changes {
            let f = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            outln!("  {}: {} → {}", f("field"), f("old"), f("new"));
        }
        out!("{}", text("diff"));
        outln!("dry run: nothing committed");
        return Ok(ExitCode::SUCCESS);
    }
    let answer: Value = remote.post("/api/promotions", &body).await?;
    let pipeline = answer["pipeline"].as_str().unwrap_or_default();
    match answer["promotion"].as_object() {
        None => outln!("{service} {to} already has {from}'s values (pipeline {pipeline}): nothing to commit"),
        Some(_) => {
            let record: capstan_api::promotion::PromotionRecord =
                serde_json::from_value(answer["promotion"].clone()).context("the server's promotion")?;
            outln!(
                "promoted {} {} → {} in commit {} (pipeline {pipeline})",
                record.service,
                record.from,
                record.to,
                record.commit
            );
            for c in &record.changes {
                outln!("  {}: {} → {}", c.field, c.old, c.new);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The first 12 characters of a commit.
fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}
