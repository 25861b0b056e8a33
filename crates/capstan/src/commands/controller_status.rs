//! `capstan controller status`: the controller's replicas as their Leases describe them — which
//! one leads, how many shards and Applications each owns, when each last renewed — and the
//! Applications no replica owns right now (shards moving, or no controller running).

use std::process::ExitCode;

use anyhow::Context;
use capstan_api::Application;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::commands::app::print_table;
use crate::kube_client::KubeArgs;
use crate::output::outln;

/// Arguments of `capstan controller status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    kube: KubeArgs,
    /// Namespace Capstan runs in.
    #[arg(long, short = 'n', default_value = capstan_api::NAMESPACE)]
    namespace: String,
    /// Output format: table or json.
    #[arg(short, long, value_enum, default_value = "table")]
    output: Output,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
enum Output {
    Table,
    Json,
}

/// Print the replicas.
pub async fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let client = args.kube.client().await?;
    let apps: Api<Application> = Api::namespaced(client.clone(), &args.namespace);
    // Names only: pages of metadata, not every Application's status.
    let mut keys = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = apps
            .list_metadata(&params)
            .await
            .with_context(|| format!("cannot list the Applications of namespace {}", args.namespace))?;
        keys.extend(
            page.items
                .iter()
                .map(|a| (a.namespace().unwrap_or_default(), a.name_any())),
        );
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let status = capstan_replicas::status::read(client, &args.namespace, &keys)
        .await
        .with_context(|| format!("cannot read the Leases of namespace {}", args.namespace))?;
    let now = Timestamp::now();
    match args.output {
        Output::Json => {
            let replicas: Vec<_> = status
                .replicas
                .iter()
                .map(|r| {
                    json!({
                        "replica": r.id,
                        "live": r.live,
                        "leader": r.leader,
                        "renewTime": r.renewed.map(|t| t.to_string()),
                        "shards": r.shards,
                        "applications": r.applications,
                    })
                })
                .collect();
            let doc = json!({"replicas": replicas, "unownedApplications": status.unowned, "applications": keys.len()});
            outln!("{}", serde_json::to_string_pretty(&doc)?);
        }
        Output::Table => {
            let mut rows = vec![
                ["REPLICA", "LIVE", "LEADER", "RENEWED", "SHARDS", "APPLICATIONS"]
                    .map(String::from)
                    .to_vec(),
            ];
            for r in &status.replicas {
                rows.push(vec![
                    r.id.clone(),
                    if r.live { "yes" } else { "no" }.into(),
                    if r.leader { "yes" } else { "" }.into(),
                    r.renewed
                        .map(|t| format!("{}s ago", now.duration_since(t).as_secs().max(0)))
                        .unwrap_or_else(|| "-".into()),
                    r.shards.len().to_string(),
                    r.applications.to_string(),
                ]);
            }
            if status.replicas.is_empty() {
                outln!("no controller replica has joined in namespace {}", args.namespace);
            } else {
                print_table(&rows);
            }
            if status.unowned > 0 {
                outln!(
                    "{} of {} Applications are in shards no replica holds (shards moving, or no controller running)",
                    status.unowned,
                    keys.len()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
