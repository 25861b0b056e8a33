//! `capstan promote SERVICE --from ENV --to ENV`: promotion between environments from the command
//! line, through the Kubernetes API and Git with the caller's own credentials (as `capstan app`
//! does); the rules and the commit are `capstan-promote`'s, the same the HTTP API applies.
//! `capstan promote history SERVICE` prints a pipeline's promotions.

use std::process::ExitCode;

use anyhow::Context;
use capstan_api::promotion::PromotionRecord;
use capstan_promote::{Outcome, PromoteRequest, Promoter};

use crate::commands::app::print_table;
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
    #[arg(long = "app-namespace", short = 'N', global = true, default_value = capstan_api::NAMESPACE)]
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
        user: format!("cli:{}", std::env::var("USER").unwrap_or_else(|_| "unknown".into())),
    };
    match Promoter::new(client, args.namespace).promote(&request).await? {
        Outcome::Unchanged { pipeline } => {
            println!(
                "{} {} already has {}'s values (pipeline {pipeline}): nothing to commit",
                request.service, request.to, request.from
            );
        }
        Outcome::Promoted { pipeline, record } => {
            println!(
                "promoted {} {} → {} in commit {} (pipeline {pipeline})",
                record.service, record.from, record.to, record.commit
            );
            for c in &record.changes {
                println!("  {}: {} → {}", c.field, c.old, c.new);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A table of promotions (with a SERVICE column when `with_service`), header first: time, service,
/// from, to, the changes, the commit, who, and whether (and why) the checks were overridden.
pub(crate) fn promotion_rows(records: Vec<PromotionRecord>, with_service: bool) -> Vec<Vec<String>> {
    let header = ["TIME", "SERVICE", "FROM", "TO", "CHANGES", "COMMIT", "USER", "FORCED"];
    let mut rows = vec![
        header
            .iter()
            .filter(|h| with_service || **h != "SERVICE")
            .map(|h| h.to_string())
            .collect(),
    ];
    for r in records {
        let changes: Vec<String> = r
            .changes
            .iter()
            .map(|c| format!("{} {} → {}", c.field, c.old, c.new))
            .collect();
        let forced = if r.forced {
            format!("yes: {}", r.reason)
        } else {
            "no".into()
        };
        let mut row = vec![r.time];
        if with_service {
            row.push(r.service);
        }
        row.extend([
            r.from,
            r.to,
            changes.join(", "),
            r.commit.chars().take(12).collect(),
            r.user,
            forced,
        ]);
        rows.push(row);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::promotion::FieldChange;

    #[test]
    fn promotion_rows_list_the_changes_and_why_forced() {
        let record = PromotionRecord {
            service: "payments".into(),
            from: "staging".into(),
            to: "production".into(),
            changes: vec![FieldChange {
                field: "imageTag".into(),
                old: "1.4.2".into(),
                new: "1.5.0".into(),
            }],
            commit: "0123456789abcdef".into(),
            user: "ops".into(),
            time: "2026-01-01T00:00:00Z".into(),
            forced: true,
            reason: "hotfix".into(),
            ..Default::default()
        };
        let rows = promotion_rows(vec![record.clone()], false);
        assert_eq!(rows[0], ["TIME", "FROM", "TO", "CHANGES", "COMMIT", "USER", "FORCED"]);
        assert_eq!(
            rows[1],
            [
                "2026-01-01T00:00:00Z",
                "staging",
                "production",
                "imageTag 1.4.2 → 1.5.0",
                "0123456789ab",
                "ops",
                "yes: hotfix"
            ]
        );
        assert_eq!(promotion_rows(vec![record], true)[1][1], "payments");
    }
}
