//! `capstan appset …`: ApplicationSets from the command line. `list` and `get` show what the
//! ApplicationSet controller reports (conditions, generated Applications, rollout progress) through
//! the Kubernetes API, or through Capstan's server after `capstan login` (the same objects, printed
//! by the same code, only those the user may read); `generate` previews a manifest's Applications without a cluster (see
//! [`crate::commands::appset_generate`]).

use crate::output::{all_printable, out, outln, printable};
use std::process::ExitCode;

use anyhow::{Context, anyhow};
use capstan_api::ApplicationSet;
use capstan_api::applicationset::{ApplicationSetGenerator, ApplicationsSyncPolicy};
use capstan_api::status::{ApplicationSetConditionType, HealthCode, SyncCode};
use kube::ResourceExt;
use kube::api::Api;

use crate::commands::app::print_table;
use crate::commands::appset_generate::{self, GenerateArgs};
use crate::kube_client::{KubeArgs, describe};

/// `capstan appset` and its subcommands.
#[derive(Debug, clap::Args)]
pub struct AppsetArgs {
    #[command(subcommand)]
    command: AppsetCommand,
}

/// Output format.
#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
enum Output {
    Table,
    Yaml,
    Json,
}

/// Where the ApplicationSets are.
#[derive(Debug, clap::Args)]
struct Target {
    #[command(flatten)]
    kube: KubeArgs,
    /// Namespace of the ApplicationSets.
    #[arg(long = "namespace", short = 'n', default_value = capstan_api::NAMESPACE,
          alias = "appset-namespace", short_alias = 'N')]
    namespace: String,
}

#[derive(Debug, clap::Subcommand)]
enum AppsetCommand {
    /// List ApplicationSets with what they generated and how it stands.
    List {
        #[command(flatten)]
        target: Target,
        /// Output format: table, yaml or json.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Show an ApplicationSet: its conditions, generated Applications and rollout.
    Get {
        /// Name of the ApplicationSet.
        name: String,
        #[command(flatten)]
        target: Target,
        /// Output format: table, yaml or json.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Print the Applications a manifest would produce, without a cluster (for review).
    Generate(GenerateArgs),
}

/// Run an `appset` subcommand.
pub async fn run(args: AppsetArgs) -> anyhow::Result<ExitCode> {
    if let Some(remote) = crate::remote::Remote::current()? {
        match args.command {
            AppsetCommand::List { output, .. } => {
                let list: serde_json::Value = remote.get("/api/applicationsets").await?;
                let mut sets = Vec::new();
                for name in list["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i["name"].as_str())
                {
                    match remote
                        .get(&format!("/api/applicationsets/{}", crate::remote::client::encode(name)))
                        .await
                    {
                        Ok(set) => sets.push(set),
                        // Deleted between the list and the read.
                        Err(e) if e.status() == Some(404) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                print_list(&sets, output)?;
                return Ok(ExitCode::SUCCESS);
            }
            AppsetCommand::Get { name, output, .. } => {
                let set: ApplicationSet = remote
                    .get(&format!(
                        "/api/applicationsets/{}",
                        crate::remote::client::encode(&name)
                    ))
                    .await
                    .map_err(|e| match e.status() {
                        Some(404) => anyhow!("ApplicationSet {name:?} not found"),
                        _ => e.into(),
                    })?;
                print_set(&set, output)?;
                return Ok(ExitCode::SUCCESS);
            }
            AppsetCommand::Generate(args) => return appset_generate::run(args).await,
        }
    }
    match args.command {
        AppsetCommand::List { target, output } => {
            let api = api(&target).await?;
            let sets = api
                .list(&Default::default())
                .await
                .map_err(|e| anyhow!("{}", describe(&e)))
                .context("listing ApplicationSets")?;
            print_list(&sets.items, output)?;
            Ok(ExitCode::SUCCESS)
        }
        AppsetCommand::Get { name, target, output } => {
            let api = api(&target).await?;
            let set = api
                .get_opt(&name)
                .await
                .map_err(|e| anyhow!("{}", describe(&e)))
                .with_context(|| format!("reading ApplicationSet {name}"))?
                .ok_or_else(|| anyhow!("ApplicationSet {name:?} not found in namespace {}", target.namespace))?;
            print_set(&set, output)?;
            Ok(ExitCode::SUCCESS)
        }
        AppsetCommand::Generate(args) => appset_generate::run(args).await,
    }
}

async fn api(target: &Target) -> anyhow::Result<Api<ApplicationSet>> {
    let client = target.kube.client().await?;
    Ok(Api::namespaced(client, &target.namespace))
}

fn condition(set: &ApplicationSet, type_: ApplicationSetConditionType) -> Option<(String, String, String)> {
    set.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// `UpToDate`, `Error`, or `Unknown` (not reconciled yet), and the message worth showing.
fn state(set: &ApplicationSet) -> (String, String) {
    match condition(set, ApplicationSetConditionType::ErrorOccurred) {
        Some((s, reason, message)) if s == "True" => (format!("Error ({reason})"), message),
        Some(_) => match condition(set, ApplicationSetConditionType::ResourcesUpToDate) {
            Some((s, _, message)) if s == "True" => ("UpToDate".into(), message),
            Some((_, reason, message)) => (reason, message),
            None => ("Unknown".into(), String::new()),
        },
        None => (
            "Unknown".into(),
            "not reconciled yet: is `capstan controller` running?".into(),
        ),
    }
}

fn rollout(set: &ApplicationSet) -> String {
    if !is_rolling(set) {
        return "-".into();
    }
    match condition(set, ApplicationSetConditionType::RolloutProgressing) {
        Some((_, reason, _)) => reason.trim_start_matches("Rollout").to_string(),
        None => "Unknown".into(),
    }
}

fn is_rolling(set: &ApplicationSet) -> bool {
    set.spec.strategy.as_ref().is_some_and(|s| s.type_ == "RollingSync")
}

fn print_list(sets: &[ApplicationSet], output: Output) -> anyhow::Result<()> {
    match output {
        Output::Json => outln!("{}", serde_json::to_string_pretty(&all_printable(sets))?),
        Output::Yaml => out!("{}", serde_saphyr::to_string(&all_printable(sets))?),
        Output::Table => {
            let mut rows = vec![
                [
                    "NAME",
                    "GENERATORS",
                    "APPS",
                    "SYNCED",
                    "HEALTHY",
                    "STATUS",
                    "ROLLOUT",
                    "MESSAGE",
                ]
                .map(String::from)
                .to_vec(),
            ];
            for set in sets {
                let resources = set.status.as_ref().map(|s| s.resources.as_slice()).unwrap_or_default();
                let (status, message) = state(set);
                let message = if status == "UpToDate" { String::new() } else { message };
                rows.push(vec![
                    set.name_any(),
                    generators(&set.spec.generators),
                    resources.len().to_string(),
                    resources
                        .iter()
                        .filter(|r| r.status == Some(SyncCode::Synced))
                        .count()
                        .to_string(),
                    resources
                        .iter()
                        .filter(|r| r.health == Some(HealthCode::Healthy))
                        .count()
                        .to_string(),
                    status,
                    rollout(set),
                    message,
                ]);
            }
            print_table(&rows);
        }
    }
    Ok(())
}

/// `list, clusters` — the kinds of the top-level generators.
fn generators(gens: &[ApplicationSetGenerator]) -> String {
    gens.iter()
        .map(|g| {
            let kind = if g.list.is_some() {
                "list"
            } else if g.clusters.is_some() {
                "clusters"
            } else if let Some(git) = &g.git {
                if git.files.is_empty() {
                    "git-directories"
                } else {
                    "git-files"
                }
            } else if g.matrix.is_some() {
                "matrix"
            } else if g.merge.is_some() {
                "merge"
            } else {
                "?"
            };
            kind.to_string()
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn print_set(set: &ApplicationSet, output: Output) -> anyhow::Result<()> {
    match output {
        Output::Json => outln!("{}", serde_json::to_string_pretty(&printable(set))?),
        Output::Yaml => out!("{}", serde_saphyr::to_string(&printable(set))?),
        Output::Table => {
            let status = set.status.clone().unwrap_or_default();
            let policy = set.spec.sync_policy.clone().unwrap_or_default();
            let sync = match policy.applications_sync.unwrap_or(ApplicationsSyncPolicy::Sync) {
                ApplicationsSyncPolicy::CreateOnly => "create-only",
                ApplicationsSyncPolicy::CreateUpdate => "create-update",
                ApplicationsSyncPolicy::CreateDelete => "create-delete",
                ApplicationsSyncPolicy::Sync => "sync",
            };
            let strategy = match set.spec.strategy.as_ref() {
                Some(s) if s.type_ == "RollingSync" => format!(
                    "RollingSync ({} steps)",
                    s.rolling_sync.as_ref().map(|r| r.steps.len()).unwrap_or(0)
                ),
                _ => "AllAtOnce".into(),
            };
            let (state, message) = state(set);
            let mut fields: Vec<(&str, String)> = vec![
                (
                    "Name",
                    format!("{}/{}", set.namespace().unwrap_or_default(), set.name_any()),
                ),
                ("Generators", generators(&set.spec.generators)),
                ("Template", set.spec.template.metadata.name.clone()),
                (
                    "Sync Policy",
                    format!(
                        "{sync}{}",
                        if policy.preserve_resources_on_deletion {
                            ", preserve resources on deletion"
                        } else {
                            ""
                        }
                    ),
                ),
                ("Strategy", strategy),
                (
                    "Status",
                    if message.is_empty() {
                        state
                    } else {
                        format!("{state}: {message}")
                    },
                ),
            ];
            if let Some((_, reason, message)) = condition(set, ApplicationSetConditionType::RolloutProgressing) {
                fields.push(("Rollout", format!("{reason}: {message}")));
            }
            for (k, v) in fields {
                outln!("{:<13}{v}", format!("{k}:"));
            }
            for c in &status.conditions {
                let text = if c.message.is_empty() {
                    format!("{}={} ({})", c.type_, c.status, c.reason)
                } else {
                    format!("{}={} ({}): {}", c.type_, c.status, c.reason, c.message)
                };
                outln!("{:<13}{text}", "Condition:");
            }
            if !status.resources.is_empty() {
                outln!();
                let rolling = is_rolling(set);
                let mut header = vec!["APPLICATION", "SYNC", "HEALTH"];
                if rolling {
                    header.extend(["STEP", "ROLLOUT", "MESSAGE"]);
                }
                let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
                for r in &status.resources {
                    let mut row = vec![
                        r.name.clone(),
                        r.status.unwrap_or_default().to_string(),
                        r.health.unwrap_or_default().to_string(),
                    ];
                    if rolling {
                        let a = status.application_status.iter().find(|a| a.application == r.name);
                        row.extend([
                            a.map(|a| a.step.clone())
                                .filter(|s| !s.is_empty())
                                .unwrap_or_else(|| "-".into()),
                            a.map(|a| a.status.to_string()).unwrap_or_default(),
                            a.map(|a| a.message.clone()).unwrap_or_default(),
                        ]);
                    }
                    rows.push(row);
                }
                print_table(&rows);
            }
        }
    }
    Ok(())
}
