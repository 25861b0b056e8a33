//! `capstan app …`: Applications from the command line, through the Kubernetes API, or through
//! Capstan's HTTP server after `capstan login` ([`remote`]: same outputs and exit codes, the
//! server's roles). Reading commands show status; `sync` and `rollback` write an operation request
//! (annotation `capstan.dev/operation`) that the controller executes; `diff` runs the read-only
//! half of the pipeline locally. `logs` and `actions` exist only through the server.

mod diff;
mod remote;
mod revert;
mod show;
mod wait;

use crate::output::{all_printable, out, outln};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use capstan_api::Application;
use capstan_api::labels::REFRESH_ANNOTATION;
use capstan_api::operation::{OPERATION_ANNOTATION, Operation, RollbackOperation, SyncOperation};
use capstan_controller::pipeline::short;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::kube_client::{KubeArgs, describe};
use diff::*;
pub(crate) use show::print_table;
use show::*;
use wait::*;

/// Flags shared by every `app` subcommand.
#[derive(Debug, clap::Args)]
pub struct AppArgs {
    /// Path of the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, global = true, env = "KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    /// Context in the kubeconfig.
    #[arg(long, global = true)]
    context: Option<String>,
    /// Namespace of the Applications.
    #[arg(long = "namespace", short = 'n', global = true, default_value = capstan_api::NAMESPACE,
          alias = "app-namespace", short_alias = 'N')]
    namespace: String,
    /// Without an AppProject named `default`, the `default` project denies everything (instead of
    /// allowing everything), as the controller started with the same flag does (`app diff`). Set
    /// CAPSTAN_DENY_IMPLICIT_DEFAULT_PROJECT=true once for every component.
    #[arg(long, global = true, env = "CAPSTAN_DENY_IMPLICIT_DEFAULT_PROJECT")]
    deny_implicit_default_project: bool,
    #[command(subcommand)]
    command: AppCommand,
}

/// Output format.
#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
enum Output {
    Table,
    Wide,
    Yaml,
    Json,
}

/// Which Applications `app list` shows (all of them when no flag is given; every flag given must
/// match).
#[derive(Debug, Default, clap::Args)]
struct ListFilter {
    /// Only Applications of this project (repeatable: any of them).
    #[arg(short, long = "project")]
    projects: Vec<String>,
    /// Only Applications whose labels match this selector, as kubectl takes it (`team=web`,
    /// `tier!=db`, `env in (staging,prod)`).
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// Only Applications with a source from this repository URL.
    #[arg(long)]
    repo: Option<String>,
    /// Only Applications deployed to this cluster, by name or server URL.
    #[arg(long)]
    cluster: Option<String>,
}

impl ListFilter {
    fn matches(&self, app: &Application) -> bool {
        let project = if app.spec.project.is_empty() {
            "default"
        } else {
            &app.spec.project
        };
        let d = &app.spec.destination;
        let cluster_is = |wanted: &str| {
            let wanted = wanted.trim_end_matches('/');
            let in_cluster = d.name == capstan_api::cluster::IN_CLUSTER_NAME
                || d.server.trim_end_matches('/') == capstan_api::cluster::IN_CLUSTER_SERVER;
            d.name == wanted
                || (!d.server.is_empty() && d.server.trim_end_matches('/') == wanted)
                || (in_cluster
                    && (wanted == capstan_api::cluster::IN_CLUSTER_NAME
                        || wanted == capstan_api::cluster::IN_CLUSTER_SERVER))
        };
        (self.projects.is_empty() || self.projects.iter().any(|p| p == project))
            && self.repo.as_ref().is_none_or(|repo| {
                // The same repository as a webhook decides; text that is no URL must match as written.
                let wanted = capstan_api::RepoUrl::parse(repo);
                app.spec
                    .sources()
                    .iter()
                    .any(|s| match (&wanted, capstan_api::RepoUrl::parse(&s.repo_url)) {
                        (Ok(wanted), Ok(url)) => url.same_repository(wanted),
                        _ => s.repo_url.trim_end_matches('/') == repo.trim_end_matches('/'),
                    })
            })
            && self.cluster.as_deref().is_none_or(cluster_is)
    }
}

#[derive(Debug, clap::Subcommand)]
enum AppCommand {
    /// List Applications.
    List {
        /// Output format: table (with a MESSAGE column saying what is wrong), wide, yaml or json.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
        #[command(flatten)]
        filter: ListFilter,
    },
    /// Show an Application and its resources.
    Get {
        /// Name of the Application.
        name: String,
        /// Output format: table, wide, yaml or json.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
        /// Ask the controller to compare with Git now, and wait for it.
        #[arg(long)]
        refresh: bool,
        /// Like --refresh, also rendering the manifests again instead of using the render cache.
        #[arg(long)]
        hard_refresh: bool,
    },
    /// Show how the live objects differ from Git (exit 1 when they do, 2 on error).
    Diff {
        /// Name of the Application.
        name: String,
        /// Compare with this revision instead of targetRevision.
        #[arg(long)]
        revision: Option<String>,
    },
    /// Sync an Application to Git.
    Sync {
        /// Name of the Application.
        name: String,
        /// Delete tracked objects that are no longer in Git.
        #[arg(long)]
        prune: bool,
        /// Validate with the API server and report, without changing anything.
        #[arg(long)]
        dry_run: bool,
        /// Confirm the deletions of a sync above the project's deletion budget (implies --prune).
        #[arg(long)]
        allow_deletions: bool,
        /// Sync to this revision instead of targetRevision.
        #[arg(long)]
        revision: Option<String>,
        /// Only these objects, as GROUP/KIND/NAMESPACE/NAME (repeatable).
        #[arg(long = "resource")]
        resources: Vec<String>,
        /// Extra sync options (repeatable), e.g. CreateNamespace=true.
        #[arg(long = "sync-option")]
        sync_options: Vec<String>,
        /// Wait for the sync to finish and the Application to be Synced and Healthy.
        #[arg(long)]
        wait: bool,
        /// How long to wait with --wait: seconds, or 90s, 5m, 1h.
        #[arg(long, default_value = "300", value_parser = super::seconds)]
        timeout: u64,
    },
    /// Show the sync history, then the promotions into or out of the Application (from the
    /// PromotionPipelines).
    History {
        /// Name of the Application.
        name: String,
    },
    /// Roll back to a history entry (without --revert, not allowed while automated sync is enabled).
    Rollback {
        /// Name of the Application.
        name: String,
        /// The history entry to go back to (see `capstan app history`).
        id: i64,
        /// Delete the objects that entry did not have.
        #[arg(long, conflicts_with = "revert")]
        prune: bool,
        /// Roll back by one Git revert commit on the Application's branch (allowed with automated
        /// sync); prints the commit, exits 1 when refused.
        #[arg(long, conflicts_with = "wait")]
        revert: bool,
        /// Why (with --revert: the commit message's body; at most 1000 characters).
        #[arg(long, requires = "revert")]
        reason: Option<String>,
        /// Wait for the rollback to finish and the Application to be Healthy.
        #[arg(long)]
        wait: bool,
        /// How long to wait with --wait: seconds, or 90s, 5m, 1h.
        #[arg(long, default_value = "300", value_parser = super::seconds)]
        timeout: u64,
    },
    /// Wait until an Application is Synced and/or Healthy (both when neither flag is given).
    Wait {
        /// Name of the Application.
        name: String,
        /// Wait until it is Healthy.
        #[arg(long)]
        health: bool,
        /// Wait until it is Synced.
        #[arg(long)]
        sync: bool,
        /// Also wait for a running operation to finish.
        #[arg(long)]
        operation: bool,
        /// How long to wait: seconds, or 90s, 5m, 1h.
        #[arg(long, default_value = "300", value_parser = super::seconds)]
        timeout: u64,
    },
    /// Show the container logs of the Application's Pods (through the server: `capstan login`).
    Logs(LogsArgs),
    /// Resource actions on the Application's objects: restart a Deployment, StatefulSet or
    /// DaemonSet, suspend or resume a CronJob, retry a failed Job (through the server: `capstan
    /// login`).
    Actions {
        #[command(subcommand)]
        command: ActionsCommand,
    },
    /// Delete an Application (with --cascade, the default, its objects too). Asks first, unless
    /// --yes; without a terminal to ask on, refuses unless --yes.
    Delete {
        /// Name of the Application.
        name: String,
        /// Delete the Application's objects too.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        cascade: bool,
        /// Wait until it is gone.
        #[arg(long)]
        wait: bool,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// Arguments of `capstan app logs`.
#[derive(Debug, clap::Args)]
struct LogsArgs {
    /// Name of the Application.
    name: String,
    /// Only the Pods of this resource of the Application (with --name), e.g. Deployment.
    #[arg(long)]
    kind: Option<String>,
    /// API group of --kind (default: apps for Deployment, StatefulSet, DaemonSet, ReplicaSet;
    /// batch for Job, CronJob).
    #[arg(long)]
    group: Option<String>,
    /// Name of the resource given by --kind, or without --kind the name of one Pod.
    #[arg(long = "name")]
    resource: Option<String>,
    /// Namespace of that Pod or resource.
    #[arg(long)]
    resource_namespace: Option<String>,
    /// Only this container (default: every container).
    #[arg(long, short = 'c')]
    container: Option<String>,
    /// Keep following the logs.
    #[arg(long, short = 'f')]
    follow: bool,
    /// The last lines of each container (default 1000, at most 10000).
    #[arg(long)]
    tail: Option<i64>,
    /// Only lines of this last while: seconds, or 90s, 5m, 1h.
    #[arg(long, value_parser = super::seconds)]
    since: Option<u64>,
    /// The previous (restarted) container's logs.
    #[arg(long, short = 'p')]
    previous: bool,
    /// Start each line with `[POD/CONTAINER]`.
    #[arg(long)]
    prefix: bool,
    /// Start each line with the time the container wrote it.
    #[arg(long)]
    timestamps: bool,
}

/// The object an action is about.
#[derive(Debug, clap::Args)]
struct ActionObject {
    /// Its kind (Deployment, StatefulSet, DaemonSet, CronJob, Job).
    #[arg(long)]
    kind: String,
    /// Its name.
    #[arg(long = "name")]
    resource: String,
    /// Its namespace.
    #[arg(long)]
    resource_namespace: Option<String>,
    /// Its API group (default: apps, or batch for a CronJob or a Job).
    #[arg(long)]
    group: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
enum ActionsCommand {
    /// The actions of one object of the Application, and why any cannot run now.
    List {
        /// Name of the Application.
        name: String,
        #[command(flatten)]
        object: ActionObject,
    },
    /// Run an action (needs the `action` role in the Application's project).
    Run {
        /// Name of the Application.
        name: String,
        /// The action: restart, suspend, resume or retry.
        action: String,
        #[command(flatten)]
        object: ActionObject,
    },
}

/// Why `logs` and `actions` need a login.
const THROUGH_SERVER: &str = "`capstan app logs` and `capstan app actions` go through Capstan's server, which checks your project role: log in first (`capstan login SERVER`)";

/// Run an `app` subcommand.
pub async fn run(args: AppArgs) -> anyhow::Result<ExitCode> {
    if let Some(server) = crate::remote::Remote::current()? {
        return remote::run(&server, args.command).await;
    }
    if matches!(args.command, AppCommand::Logs(_) | AppCommand::Actions { .. }) {
        bail!("{THROUGH_SERVER}");
    }
    let kube = KubeArgs {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    let client = kube.client().await?;
    let api: Api<Application> = Api::namespaced(client.clone(), &args.namespace);
    match args.command {
        AppCommand::List { output, filter } => list(&api, output, &filter).await,
        AppCommand::Get {
            name,
            output,
            refresh,
            hard_refresh,
        } => {
            if refresh || hard_refresh {
                refresh_and_wait(&api, &name, if hard_refresh { "hard" } else { "normal" }).await?;
            }
            let app = get(&api, &name).await?;
            let windows = match output {
                Output::Table | Output::Wide => {
                    let projects = capstan_controller::projects::Projects::new(client.clone(), &args.namespace);
                    match projects.get(&app.spec.project).await {
                        Ok(project) => show::window_lines(
                            &app,
                            &project.name,
                            &project.spec,
                            capstan_controller::gates::system_now(),
                        ),
                        Err(_) => Vec::new(),
                    }
                }
                _ => Vec::new(),
            };
            print_app(&app, output, &windows)?;
            Ok(ExitCode::SUCCESS)
        }
        AppCommand::Diff { name, revision } => {
            let deny = args.deny_implicit_default_project;
            Ok(diff(client, &api, &args.namespace, &name, revision, deny).await)
        }
        AppCommand::Sync {
            name,
            prune,
            dry_run,
            allow_deletions,
            revision,
            resources,
            sync_options,
            wait,
            timeout,
        } => {
            let op = Operation {
                sync: Some(SyncOperation {
                    revision: revision.unwrap_or_default(),
                    prune: prune || allow_deletions,
                    dry_run,
                    resources,
                    sync_options,
                    allow_deletions,
                }),
                rollback: None,
                initiated_by: initiator(),
                id: capstan_api::operation::new_request_id(),
            };
            request(&api, &name, &op, wait, timeout).await
        }
        AppCommand::History { name } => {
            let app = get(&api, &name).await?;
            print_history(&app);
            promotions(&client, &args.namespace, &name).await;
            Ok(ExitCode::SUCCESS)
        }
        AppCommand::Rollback {
            name,
            id,
            prune,
            revert,
            reason,
            wait,
            timeout,
        } => {
            if revert {
                return Ok(revert::run(client, &args.namespace, &name, id, reason).await);
            }
            let op = Operation {
                sync: None,
                rollback: Some(RollbackOperation { id, prune }),
                initiated_by: initiator(),
                id: capstan_api::operation::new_request_id(),
            };
            request(&api, &name, &op, wait, timeout).await
        }
        AppCommand::Wait {
            name,
            health,
            sync,
            operation,
            timeout,
        } => {
            let spec = WaitFor::for_command(health, sync, operation);
            let app = wait_for(&api, &name, &spec, Duration::from_secs(timeout)).await?;
            outln!("{}", summary_line(&app));
            Ok(ExitCode::SUCCESS)
        }
        AppCommand::Logs(_) | AppCommand::Actions { .. } => bail!("{THROUGH_SERVER}"),
        AppCommand::Delete {
            name,
            cascade,
            wait,
            yes,
        } => {
            let app = get(&api, &name).await?;
            if !yes {
                confirm_delete(&app, cascade)?;
            }
            delete(&api, &app, cascade, wait).await
        }
    }
}

/// `app history`'s table of sync history entries, newest first.
fn print_history(app: &Application) {
    let history = app.status.as_ref().map(|s| s.history.clone()).unwrap_or_default();
    let mut rows = vec![vec!["ID".into(), "DEPLOYED".into(), "REVISION".into(), "PATH".into()]];
    for h in history.iter().rev() {
        rows.push(vec![
            h.id.to_string(),
            h.deployed_at.clone(),
            h.revision.clone(),
            if h.sources.is_empty() {
                h.source.path.clone()
            } else {
                let each: Vec<&str> = h
                    .sources
                    .iter()
                    .map(|s| if s.is_chart() { &*s.chart } else { &*s.path })
                    .collect();
                each.join(",")
            },
        ]);
    }
    print_table(&rows);
}

/// The promotions into or out of `name` recorded in the namespace's PromotionPipelines, as a second
/// table under `PROMOTIONS` (nothing when there are none; a warning when the pipelines cannot be
/// read, the sync history being shown already).
async fn promotions(client: &kube::Client, namespace: &str, name: &str) {
    let pipelines = match capstan_promote::places::pipelines(client, namespace).await {
        Ok(pipelines) => pipelines,
        Err(err) => {
            eprintln!("warning: promotions not shown: {err}");
            return;
        }
    };
    let records = capstan_promote::places::records_of_all(&pipelines, name);
    if records.is_empty() {
        return;
    }
    outln!("\nPROMOTIONS");
    print_table(&crate::commands::promotion_table::promotion_rows(records, false));
}

fn initiator() -> String {
    let user = super::login_name();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("cli:{user}:{nanos}")
}

async fn get(api: &Api<Application>, name: &str) -> anyhow::Result<Application> {
    api.get_opt(name)
        .await
        .map_err(|e| anyhow!("{}", describe(&e)))
        .with_context(|| format!("reading Application {name}"))?
        .ok_or_else(|| anyhow!("Application {name:?} not found in namespace {}", api_namespace(api)))
}

fn api_namespace(api: &Api<Application>) -> String {
    api.namespace().unwrap_or(capstan_api::NAMESPACE).to_string()
}

/// Applications asked of the API server per request by `app list`: a fleet of 10,000 is read in
/// pages (`limit` and `continue`), so no single answer holds them all.
const LIST_PAGE: u32 = 500;

/// Every Application `filter` keeps, read page by page; `keep` turns each into what is printed, so
/// that a table holds its rows and not the Applications (with their resources and history).
async fn list_pages<T>(
    api: &Api<Application>,
    filter: &ListFilter,
    mut keep: impl FnMut(Application) -> T,
) -> anyhow::Result<Vec<T>> {
    let mut params = kube::api::ListParams::default().limit(LIST_PAGE);
    if let Some(selector) = &filter.selector {
        params = params.labels(selector);
    }
    let mut kept = Vec::new();
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|e| anyhow!("{}", describe(&e)))
            .context("listing Applications")?;
        kept.extend(page.items.into_iter().filter(|a| filter.matches(a)).map(&mut keep));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => params = params.continue_token(&next),
            None => return Ok(kept),
        }
    }
}

async fn list(api: &Api<Application>, output: Output, filter: &ListFilter) -> anyhow::Result<ExitCode> {
    match output {
        Output::Json => {
            let apps = list_pages(api, filter, |a| a).await?;
            outln!("{}", serde_json::to_string_pretty(&all_printable(&apps))?)
        }
        Output::Yaml => {
            let apps = list_pages(api, filter, |a| a).await?;
            out!("{}", serde_saphyr::to_string(&all_printable(&apps))?)
        }
        Output::Table | Output::Wide => {
            let mut rows = vec![list_header(output)];
            rows.extend(list_pages(api, filter, |app| list_row(&app, output)).await?);
            print_table(&rows);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `app list`'s output of Applications already read.
fn print_list(apps: &[Application], output: Output) -> anyhow::Result<ExitCode> {
    match output {
        Output::Json => outln!("{}", serde_json::to_string_pretty(&all_printable(apps))?),
        Output::Yaml => out!("{}", serde_saphyr::to_string(&all_printable(apps))?),
        Output::Table | Output::Wide => {
            let mut rows = vec![list_header(output)];
            rows.extend(apps.iter().map(|app| list_row(app, output)));
            print_table(&rows);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The header of `app list`'s table.
fn list_header(output: Output) -> Vec<String> {
    let mut header = vec!["NAME", "CLUSTER", "NAMESPACE", "PROJECT", "SYNC", "HEALTH", "REVISION"];
    if output == Output::Wide {
        header.extend(["REPO", "PATH", "TARGET"]);
    }
    header.push("MESSAGE");
    header.into_iter().map(String::from).collect()
}

/// One row of `app list`'s table.
fn list_row(app: &Application, output: Output) -> Vec<String> {
    let status = app.status.clone().unwrap_or_default();
    let d = &app.spec.destination;
    let mut row = vec![
        app.name_any(),
        // By name where there is one: `in-cluster` for the cluster Capstan runs in.
        if !d.name.is_empty() {
            d.name.clone()
        } else if d.server.trim_end_matches('/') == capstan_api::cluster::IN_CLUSTER_SERVER {
            capstan_api::cluster::IN_CLUSTER_NAME.into()
        } else {
            d.server.clone()
        },
        d.namespace.clone(),
        if app.spec.project.is_empty() {
            "default".into()
        } else {
            app.spec.project.clone()
        },
        status.sync.as_ref().map(|s| s.status).unwrap_or_default().to_string(),
        status.health.as_ref().map(|h| h.status).unwrap_or_default().to_string(),
        status
            .sync
            .as_ref()
            .map(|s| short(&s.revision).to_string())
            .unwrap_or_default(),
    ];
    if output == Output::Wide {
        // A multi-source Application's sources, joined.
        let sources = app.spec.sources();
        let joined = |f: fn(&capstan_api::application::ApplicationSource) -> &str| {
            sources.iter().map(f).collect::<Vec<_>>().join(",")
        };
        row.extend([
            joined(|s| &s.repo_url),
            joined(|s| if s.is_chart() { &s.chart } else { &s.path }),
            joined(|s| &s.target_revision),
        ]);
    }
    // Whole with -o wide, cut to a line's worth otherwise.
    let message = app.status_message();
    row.push(if output == Output::Wide {
        message
    } else {
        trimmed(&message, MESSAGE_WIDTH)
    });
    row
}

/// How much of the message `app list` shows without `-o wide`.
const MESSAGE_WIDTH: usize = 80;

/// `text` cut to `width` characters, with `…` when it was longer.
fn trimmed(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

async fn annotate(api: &Api<Application>, name: &str, key: &str, value: &str) -> anyhow::Result<()> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
    )
    .await
    .map_err(|e| anyhow!("{}", describe(&e)))
    .with_context(|| format!("updating Application {name}"))?;
    Ok(())
}

async fn refresh_and_wait(api: &Api<Application>, name: &str, kind: &str) -> anyhow::Result<()> {
    let before = get(api, name).await?.status.and_then(|s| s.reconciled_at);
    annotate(api, name, REFRESH_ANNOTATION, kind).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let app = get(api, name).await?;
        let consumed = !app.annotations().contains_key(REFRESH_ANNOTATION);
        // The controller removes the request, then records the comparison time.
        if consumed && app.status.and_then(|s| s.reconciled_at) != before {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("the controller did not pick up the refresh of {name} within 60 s: is `capstan controller` running?")
}

async fn request(
    api: &Api<Application>,
    name: &str,
    op: &Operation,
    wait: bool,
    timeout: u64,
) -> anyhow::Result<ExitCode> {
    let app = get(api, name).await?;
    refuse_early(&app, op)?;
    refuse_held(api, &app).await?;
    let body = serde_json::to_string(op)?;
    annotate(api, name, OPERATION_ANNOTATION, &body).await?;
    let what = if op.rollback.is_some() { "rollback" } else { "sync" };
    if !wait {
        outln!("{what} of {name} requested");
        return Ok(ExitCode::SUCCESS);
    }
    let spec = wait_spec(&app, op);
    let app = wait_for(api, name, &spec, Duration::from_secs(timeout)).await?;
    report_operation(&app, what);
    Ok(ExitCode::SUCCESS)
}

/// What `--wait` waits for after requesting `op` on `app`.
fn wait_spec(app: &Application, op: &Operation) -> WaitFor {
    let dry_run = op.sync.as_ref().is_some_and(|s| s.dry_run);
    // A sync without prune never makes an Application Synced while objects removed from Git are
    // left: unless automated sync will prune them, say so instead of waiting for the timeout.
    let automated_prune = app
        .spec
        .sync_policy
        .as_ref()
        .and_then(|p| p.automated.as_ref())
        .is_some_and(|a| a.prune);
    WaitFor {
        operation: Some(op.id.clone()),
        sync: !dry_run && op.rollback.is_none(),
        health: !dry_run,
        stop_when_only_pruning_left: op.sync.as_ref().is_some_and(|s| !s.prune) && !automated_prune,
    }
}

/// The finished operation's result per object, then the Application's state.
fn report_operation(app: &Application, what: &str) {
    if let Some(os) = app.status.as_ref().and_then(|s| s.operation_state.as_ref()) {
        outln!("{what} {}: {}", os.phase, os.message);
        let mut rows = vec![
            ["KIND", "NAMESPACE", "NAME", "PHASE", "WAVE", "RESULT", "MESSAGE"]
                .map(String::from)
                .to_vec(),
        ];
        for r in &os.resources {
            rows.push(vec![
                r.kind.clone(),
                r.namespace.clone(),
                r.name.clone(),
                r.sync_phase.clone(),
                r.sync_wave.to_string(),
                r.status.to_string(),
                r.message.clone(),
            ]);
        }
        if rows.len() > 1 {
            print_table(&rows);
        }
    }
    outln!("{}", summary_line(app));
}

/// Refuse `op` before it is written when it cannot run (as the HTTP server does): another
/// operation is running or requested, a rollback while automated sync is on or to an entry that is
/// not in the history, a sync of objects that are not `GROUP/KIND/NAMESPACE/NAME`. Otherwise the
/// request would be reported as requested and refused later, in an Event.
fn refuse_early(app: &Application, op: &Operation) -> anyhow::Result<()> {
    let name = app.name_any();
    if let Some(rollback) = &op.rollback {
        let history = app.status.as_ref().map(|s| s.history.as_slice()).unwrap_or_default();
        app.rollback_entry(history, rollback.id)
            .map_err(|refused| anyhow!("cannot roll back {name}: {refused}"))?;
    }
    if let Some(busy) = app.busy() {
        bail!("{busy} for Application {name}: wait for it (`capstan app wait {name} --operation`)");
    }
    for r in op.sync.iter().flat_map(|s| &s.resources) {
        if capstan_kube::ObjectKey::parse(r).is_none() {
            bail!("invalid --resource {r:?}: use GROUP/KIND/NAMESPACE/NAME");
        }
    }
    Ok(())
}

/// Refuse a sync or rollback that `app`'s dependencies or its project's sync windows do not let
/// start now (as the HTTP server does, with 409). There is no flag to force it: a window with
/// `manualSync: true` is how a project lets manual syncs through.
async fn refuse_held(api: &Api<Application>, app: &Application) -> anyhow::Result<()> {
    let namespace = api_namespace(api);
    let client = api.clone().into_client();
    let projects = capstan_controller::projects::Projects::new(client, &namespace);
    let Ok(capstan_controller::projects::Project { name: project, spec }) = projects.get(&app.spec.project).await
    else {
        // A missing project is reported by the comparison and refused by the sync.
        return Ok(());
    };
    let others = if app.spec.depends_on.is_empty() {
        Vec::new()
    } else {
        api.list(&Default::default())
            .await
            .map_err(|e| anyhow!("{}", describe(&e)))
            .context("listing Applications")?
            .items
    };
    let lookup = |n: &str| others.iter().find(|a| a.name_any() == n).cloned();
    let at = capstan_controller::gates::system_now();
    if let Some(why) = capstan_controller::gates::manual_refusal(app, &lookup, &project, &spec, at) {
        bail!("cannot sync {} now: {why}", app.name_any());
    }
    Ok(())
}

/// Ask on the terminal whether to delete `app`; refuse when there is no terminal to ask on (a
/// script must say `--yes`).
fn confirm_delete(app: &Application, cascade: bool) -> anyhow::Result<()> {
    use std::io::{BufRead, IsTerminal, Write};
    let name = app.name_any();
    let what = if cascade {
        let count = app.status.as_ref().map(|s| s.resources.len()).unwrap_or(0);
        format!("Application {name} and the {count} object(s) it manages")
    } else {
        format!("Application {name} (leaving its objects in place)")
    };
    if !std::io::stdin().is_terminal() {
        bail!("not deleting {what} without confirmation: stdin is not a terminal; pass --yes");
    }
    let mut stderr = std::io::stderr();
    write!(stderr, "Delete {what}? [y/N] ").context("asking for confirmation")?;
    stderr.flush().context("asking for confirmation")?;
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .context("reading the answer")?;
    if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        bail!("not deleted: {name}");
    }
    Ok(())
}

async fn delete(api: &Api<Application>, app: &Application, cascade: bool, wait: bool) -> anyhow::Result<ExitCode> {
    let name = app.name_any();
    let name = name.as_str();
    if let Some(finalizers) = app.finalizers_for_delete(cascade) {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await
        .map_err(|e| anyhow!("{}", describe(&e)))
        .with_context(|| format!("updating finalizers of {name}"))?;
    }
    api.delete(name, &DeleteParams::default())
        .await
        .map_err(|e| anyhow!("{}", describe(&e)))
        .with_context(|| format!("deleting {name}"))?;
    if wait {
        wait_gone(name, || async {
            Ok(api
                .get_opt(name)
                .await
                .map_err(|e| anyhow!("{}", describe(&e)))?
                .is_some())
        })
        .await?;
    }
    print_deleted(name, cascade);
    Ok(ExitCode::SUCCESS)
}

/// Wait until `exists` says the Application `name` is gone (the controller removes its finalizer
/// once its objects are deleted), at most 120 s.
async fn wait_gone<F, Fut>(name: &str, mut exists: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + Duration::from_secs(120);
    while exists().await? {
        if Instant::now() > deadline {
            bail!("{name} still exists after 120 s (is `capstan controller` running to remove its finalizer?)");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(())
}

/// What `app delete` prints once done.
fn print_deleted(name: &str, cascade: bool) {
    outln!(
        "application {name} deleted{}",
        if cascade { " with its resources" } else { "" }
    );
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{AppArgs, AppCommand};

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        app: AppArgs,
    }

    fn app(project: &str, repo: &str, destination: serde_json::Value) -> capstan_api::Application {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "namespace": "capstan"},
            "spec": {"project": project, "source": {"repoURL": repo, "path": "."}, "destination": destination},
        }))
        .expect("an Application")
    }

    #[test]
    fn list_filters_match_project_repo_and_cluster() {
        let filter =
            |args: &[&str]| match Cli::try_parse_from([&["app", "list"][..], args].concat()).map(|c| c.app.command) {
                Ok(AppCommand::List { filter, .. }) => filter,
                other => panic!("parsed as {other:?}"),
            };
        let local = app(
            "",
            "https://git.test/r.git",
            serde_json::json!({"server": "https://kubernetes.default.svc"}),
        );
        let remote = app("team", "https://git.test/s.git/", serde_json::json!({"name": "prod"}));
        assert!(filter(&[]).matches(&local) && filter(&[]).matches(&remote));
        assert!(filter(&["-p", "default"]).matches(&local));
        assert!(!filter(&["--project", "team"]).matches(&local));
        assert!(filter(&["-p", "default", "-p", "team"]).matches(&remote));
        assert!(filter(&["--repo", "https://git.test/s.git"]).matches(&remote));
        assert!(!filter(&["--repo", "https://git.test/s.git"]).matches(&local));
        assert!(filter(&["--cluster", "in-cluster"]).matches(&local));
        assert!(filter(&["--cluster", "https://kubernetes.default.svc/"]).matches(&local));
        assert!(!filter(&["--cluster", "in-cluster"]).matches(&remote));
        assert!(filter(&["--cluster", "prod", "-p", "team"]).matches(&remote));
        assert_eq!(filter(&["-l", "team=web"]).selector.as_deref(), Some("team=web"));
    }

    #[test]
    fn long_messages_are_cut_with_an_ellipsis() {
        assert_eq!(super::trimmed("short", 10), "short");
        assert_eq!(super::trimmed("0123456789abc", 10), "012345678…");
        assert_eq!(super::trimmed("0123456789abc", 10).chars().count(), 10);
    }

    #[test]
    fn timeouts_take_seconds_or_a_unit() {
        let timeout = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.app.command) {
            Ok(AppCommand::Sync { timeout, .. } | AppCommand::Wait { timeout, .. }) => Ok(timeout),
            Ok(other) => panic!("parsed as {other:?}"),
            Err(err) => Err(err.to_string()),
        };
        assert_eq!(timeout(&["app", "sync", "a", "--wait", "--timeout", "90"]), Ok(90));
        assert_eq!(timeout(&["app", "wait", "a", "--timeout", "2m"]), Ok(120));
        assert_eq!(timeout(&["app", "wait", "a"]), Ok(300));
        let err = timeout(&["app", "wait", "a", "--timeout", "2d"]).expect_err("days are refused");
        assert!(
            err.contains("--timeout") && err.contains("\"2d\" is not a duration"),
            "{err}"
        );
    }
}
