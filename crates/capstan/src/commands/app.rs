//! `capstan app …`: Applications from the command line, through the Kubernetes API only. Reading
//! commands show status; `sync` and `rollback` write an operation request (annotation
//! `capstan.dev/operation`) that the controller executes; `diff` runs the read-only half of the
//! pipeline locally.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use capstan_api::Application;
use capstan_api::labels::{REFRESH_ANNOTATION, RESOURCES_FINALIZER};
use capstan_api::operation::{OPERATION_ANNOTATION, Operation, OperationPhase, RollbackOperation, SyncOperation};
use capstan_controller::pipeline::short;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::kube_client::{KubeArgs, describe};

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
    #[arg(long = "app-namespace", short = 'N', global = true, default_value = capstan_api::NAMESPACE)]
    namespace: String,
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

#[derive(Debug, clap::Subcommand)]
enum AppCommand {
    /// List Applications.
    List {
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Show an Application and its resources.
    Get {
        name: String,
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
        name: String,
        /// Compare with this revision instead of targetRevision.
        #[arg(long)]
        revision: Option<String>,
    },
    /// Sync an Application to Git.
    Sync {
        name: String,
        /// Delete tracked objects that are no longer in Git.
        #[arg(long)]
        prune: bool,
        /// Validate with the API server and report, without changing anything.
        #[arg(long)]
        dry_run: bool,
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
    /// Show the sync history.
    History { name: String },
    /// Roll back to a history entry (not allowed while automated sync is enabled).
    Rollback {
        name: String,
        id: i64,
        #[arg(long)]
        prune: bool,
        #[arg(long)]
        wait: bool,
        /// How long to wait with --wait: seconds, or 90s, 5m, 1h.
        #[arg(long, default_value = "300", value_parser = super::seconds)]
        timeout: u64,
    },
    /// Wait until an Application is Synced and/or Healthy (both when neither flag is given).
    Wait {
        name: String,
        #[arg(long)]
        health: bool,
        #[arg(long)]
        sync: bool,
        /// Also wait for a running operation to finish.
        #[arg(long)]
        operation: bool,
        /// How long to wait: seconds, or 90s, 5m, 1h.
        #[arg(long, default_value = "300", value_parser = super::seconds)]
        timeout: u64,
    },
    /// Delete an Application (with --cascade, the default, its objects too).
    Delete {
        name: String,
        /// Delete the Application's objects too.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        cascade: bool,
        /// Wait until it is gone.
        #[arg(long)]
        wait: bool,
    },
}

/// Run an `app` subcommand.
pub async fn run(args: AppArgs) -> anyhow::Result<ExitCode> {
    let kube = KubeArgs {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    let client = kube.client().await?;
    let api: Api<Application> = Api::namespaced(client.clone(), &args.namespace);
    match args.command {
        AppCommand::List { output } => list(&api, output).await,
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
            print_app(&app, output)?;
            Ok(ExitCode::SUCCESS)
        }
        AppCommand::Diff { name, revision } => Ok(diff(client, &api, &args.namespace, &name, revision).await),
        AppCommand::Sync {
            name,
            prune,
            dry_run,
            revision,
            resources,
            sync_options,
            wait,
            timeout,
        } => {
            let op = Operation {
                sync: Some(SyncOperation {
                    revision: revision.unwrap_or_default(),
                    prune,
                    dry_run,
                    resources,
                    sync_options,
                }),
                rollback: None,
                initiated_by: initiator(),
                id: capstan_api::operation::new_request_id(),
            };
            request(&api, &name, &op, wait, timeout).await
        }
        AppCommand::History { name } => {
            let app = get(&api, &name).await?;
            let history = app.status.map(|s| s.history).unwrap_or_default();
            let mut rows = vec![vec!["ID".into(), "DEPLOYED".into(), "REVISION".into(), "PATH".into()]];
            for h in history.iter().rev() {
                rows.push(vec![
                    h.id.to_string(),
                    h.deployed_at.clone(),
                    h.revision.clone(),
                    h.source.path.clone(),
                ]);
            }
            print_table(&rows);
            Ok(ExitCode::SUCCESS)
        }
        AppCommand::Rollback {
            name,
            id,
            prune,
            wait,
            timeout,
        } => {
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
            let (health, sync) = if !health && !sync { (true, true) } else { (health, sync) };
            let spec = WaitFor {
                operation: operation.then(String::new),
                sync,
                health,
                stop_when_only_pruning_left: false,
            };
            let app = wait_for(&api, &name, &spec, Duration::from_secs(timeout)).await?;
            println!("{}", summary_line(&app));
            Ok(ExitCode::SUCCESS)
        }
        AppCommand::Delete { name, cascade, wait } => delete(&api, &name, cascade, wait).await,
    }
}

fn initiator() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "cli".into());
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

async fn list(api: &Api<Application>, output: Output) -> anyhow::Result<ExitCode> {
    let apps = api
        .list(&Default::default())
        .await
        .map_err(|e| anyhow!("{}", describe(&e)))
        .context("listing Applications")?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&apps.items)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(&apps.items)?),
        Output::Table | Output::Wide => {
            let mut header = vec!["NAME", "CLUSTER", "NAMESPACE", "PROJECT", "SYNC", "HEALTH", "REVISION"];
            if output == Output::Wide {
                header.extend(["REPO", "PATH", "TARGET", "MESSAGE"]);
            }
            let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
            for app in &apps.items {
                let status = app.status.clone().unwrap_or_default();
                let d = &app.spec.destination;
                let mut row = vec![
                    app.name_any(),
                    if d.name.is_empty() {
                        d.server.clone()
                    } else {
                        d.name.clone()
                    },
                    d.namespace.clone(),
                    if app.spec.project.is_empty() {
                        "default".into()
                    } else {
                        app.spec.project.clone()
                    },
                    status
                        .sync
                        .as_ref()
                        .map(|s| s.status.clone())
                        .unwrap_or_else(|| "Unknown".into()),
                    status
                        .health
                        .as_ref()
                        .map(|h| h.status.clone())
                        .unwrap_or_else(|| "Unknown".into()),
                    status
                        .sync
                        .as_ref()
                        .map(|s| short(&s.revision).to_string())
                        .unwrap_or_default(),
                ];
                if output == Output::Wide {
                    row.extend([
                        app.spec.source.repo_url.clone(),
                        app.spec.source.path.clone(),
                        app.spec.source.target_revision.clone(),
                        status.conditions.first().map(|c| c.message.clone()).unwrap_or_default(),
                    ]);
                }
                rows.push(row);
            }
            print_table(&rows);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn print_table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map(|s| s.chars().count()).unwrap_or(0))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                if i + 1 == row.len() {
                    cell.clone()
                } else {
                    format!("{cell:<w$}", w = widths[i])
                }
            })
            .collect();
        println!("{}", line.join("   ").trim_end());
    }
}

fn summary_line(app: &Application) -> String {
    let status = app.status.clone().unwrap_or_default();
    format!(
        "{}: sync={} health={} revision={}",
        app.name_any(),
        status.sync.as_ref().map(|s| s.status.as_str()).unwrap_or("Unknown"),
        status.health.as_ref().map(|h| h.status.as_str()).unwrap_or("Unknown"),
        status.sync.as_ref().map(|s| short(&s.revision)).unwrap_or("")
    )
}

fn print_app(app: &Application, output: Output) -> anyhow::Result<()> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(app)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(app)?),
        Output::Table | Output::Wide => {
            let status = app.status.clone().unwrap_or_default();
            let spec = &app.spec;
            let policy = match spec.sync_policy.as_ref().and_then(|p| p.automated.as_ref()) {
                Some(a) => {
                    let mut flags = Vec::new();
                    if a.prune {
                        flags.push("Prune");
                    }
                    if a.self_heal {
                        flags.push("SelfHeal");
                    }
                    if flags.is_empty() {
                        "Automated".to_string()
                    } else {
                        format!("Automated ({})", flags.join(", "))
                    }
                }
                None => "Manual".into(),
            };
            let mut fields: Vec<(&str, String)> = Vec::new();
            let d = &spec.destination;
            fields.push((
                "Name",
                format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any()),
            ));
            fields.push((
                "Project",
                if spec.project.is_empty() {
                    "default".into()
                } else {
                    spec.project.clone()
                },
            ));
            fields.push((
                "Server",
                if d.server.is_empty() {
                    d.name.clone()
                } else {
                    d.server.clone()
                },
            ));
            fields.push(("Namespace", d.namespace.clone()));
            fields.push(("Repo", spec.source.repo_url.clone()));
            fields.push((
                "Target",
                if spec.source.target_revision.is_empty() {
                    "HEAD".into()
                } else {
                    spec.source.target_revision.clone()
                },
            ));
            fields.push(("Path", spec.source.path.clone()));
            fields.push(("Sync Policy", policy));
            let sync = status.sync.clone().unwrap_or_default();
            fields.push((
                "Sync Status",
                format!(
                    "{} ({})",
                    if sync.status.is_empty() {
                        "Unknown"
                    } else {
                        &sync.status
                    },
                    short(&sync.revision)
                ),
            ));
            let health = status.health.clone().unwrap_or_default();
            let health_text = if health.message.is_empty() {
                health.status.clone()
            } else {
                format!("{}: {}", health.status, health.message)
            };
            fields.push((
                "Health Status",
                if health_text.is_empty() {
                    "Unknown".into()
                } else {
                    health_text
                },
            ));
            if let Some(op) = &status.operation_state {
                fields.push(("Operation", format!("{}: {}", op.phase, op.message)));
            }
            for (k, v) in fields {
                println!("{:<15}{v}", format!("{k}:"));
            }
            for c in &status.conditions {
                println!("{:<15}{}: {}", "Condition:", c.type_, c.message);
            }
            if !status.resources.is_empty() {
                println!();
                let mut rows = vec![
                    ["GROUP", "KIND", "NAMESPACE", "NAME", "STATUS", "HEALTH", "MESSAGE"]
                        .map(String::from)
                        .to_vec(),
                ];
                for r in &status.resources {
                    let h = r.health.clone().unwrap_or_default();
                    let st = if r.requires_pruning {
                        format!("{} (requires pruning)", r.status)
                    } else {
                        r.status.clone()
                    };
                    rows.push(vec![
                        r.group.clone(),
                        r.kind.clone(),
                        r.namespace.clone(),
                        r.name.clone(),
                        st,
                        h.status,
                        h.message,
                    ]);
                }
                print_table(&rows);
            }
        }
    }
    Ok(())
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
    let body = serde_json::to_string(op)?;
    annotate(api, name, OPERATION_ANNOTATION, &body).await?;
    let what = if op.rollback.is_some() { "rollback" } else { "sync" };
    if !wait {
        println!("{what} of {name} requested");
        return Ok(ExitCode::SUCCESS);
    }
    let dry_run = op.sync.as_ref().is_some_and(|s| s.dry_run);
    // A sync without prune never makes an Application Synced while objects removed from Git are
    // left: unless automated sync will prune them, say so instead of waiting for the timeout.
    let automated_prune = app
        .spec
        .sync_policy
        .as_ref()
        .and_then(|p| p.automated.as_ref())
        .is_some_and(|a| a.prune);
    let spec = WaitFor {
        operation: Some(op.id.clone()),
        sync: !dry_run && op.rollback.is_none(),
        health: !dry_run,
        stop_when_only_pruning_left: op.sync.as_ref().is_some_and(|s| !s.prune) && !automated_prune,
    };
    let app = wait_for(api, name, &spec, Duration::from_secs(timeout)).await?;
    if let Some(os) = app.status.as_ref().and_then(|s| s.operation_state.as_ref()) {
        println!("{what} {}: {}", os.phase, os.message);
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
                r.status.clone(),
                r.message.clone(),
            ]);
        }
        if rows.len() > 1 {
            print_table(&rows);
        }
    }
    println!("{}", summary_line(&app));
    Ok(ExitCode::SUCCESS)
}

struct WaitFor {
    /// Wait for an operation to finish: the one with this request id, or (empty) any running one.
    operation: Option<String>,
    sync: bool,
    health: bool,
    /// Fail once the operation is done if the Application is OutOfSync only because of objects that
    /// require pruning (a sync without prune leaves them, so waiting for Synced would be in vain).
    stop_when_only_pruning_left: bool,
}

/// Wait until `spec` holds for Application `name`, following it with a watch (a large Application
/// read again and again would load the API server for nothing).
async fn wait_for(
    api: &Api<Application>,
    name: &str,
    spec: &WaitFor,
    timeout: Duration,
) -> anyhow::Result<Application> {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let finish_bar = || {
        if let Some(bar) = &bar {
            bar.finish_and_clear();
        }
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let mut app = get(api, name).await?;
    let mut operation_done = spec.operation.is_none();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher(api.clone(), config));
    let mut watch_error = None;
    loop {
        let status = app.status.clone().unwrap_or_default();
        let op = status.operation_state.clone();
        if !operation_done {
            let wanted = spec.operation.as_deref().unwrap_or("");
            let ours = op
                .as_ref()
                .is_some_and(|o| wanted.is_empty() || o.operation.as_ref().is_some_and(|x| x.id == wanted));
            // Waiting for any operation, a request not yet taken up comes first.
            let pending = wanted.is_empty() && app.pending_request().is_some();
            if let Some(o) = op.as_ref().filter(|_| ours && !pending) {
                if o.phase != OperationPhase::Running {
                    if o.phase != OperationPhase::Succeeded {
                        finish_bar();
                        let failed: Vec<String> = o
                            .resources
                            .iter()
                            .filter(|r| r.status == "SyncFailed")
                            .map(|r| format!("{}/{} {}: {}", r.kind, r.name, r.status, r.message))
                            .collect();
                        let detail = if failed.is_empty() {
                            String::new()
                        } else {
                            format!("\n  {}", failed.join("\n  "))
                        };
                        bail!(
                            "operation on {name} {}: {}{detail}",
                            o.phase.as_str().to_lowercase(),
                            o.message
                        );
                    }
                    operation_done = true;
                } else if let Some(bar) = &bar {
                    bar.set_message(format!("{name}: {}", o.message));
                }
            } else if wanted.is_empty() && !pending && op.as_ref().is_none_or(|o| o.phase != OperationPhase::Running) {
                operation_done = true;
            }
        }
        let sync_ok = !spec.sync || status.sync.as_ref().is_some_and(|s| s.status == "Synced");
        let health_ok = !spec.health || status.health.as_ref().is_some_and(|h| h.status == "Healthy");
        if operation_done && sync_ok && health_ok {
            finish_bar();
            return Ok(app);
        }
        if operation_done && !sync_ok && spec.stop_when_only_pruning_left {
            let out_of_sync: Vec<_> = status.resources.iter().filter(|r| r.status == "OutOfSync").collect();
            let compared_at_op =
                status.sync.as_ref().map(|s| s.revision.as_str()) == op.as_ref().map(|o| o.revision.as_str());
            if compared_at_op && !out_of_sync.is_empty() && out_of_sync.iter().all(|r| r.requires_pruning) {
                finish_bar();
                let names: Vec<String> = out_of_sync
                    .iter()
                    .map(|r| format!("{}/{}/{}", r.kind, r.namespace, r.name))
                    .collect();
                bail!(
                    "{name} stays OutOfSync: {} object(s) no longer in Git require pruning, and the sync did not prune (sync with --prune): {}",
                    names.len(),
                    names.join(", ")
                );
            }
        }
        if operation_done && let Some(bar) = &bar {
            bar.set_message(summary_line(&app));
        }
        // The next version of the Application from the watch (which retries failed requests).
        let next = loop {
            match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(Some(Ok(watcher::Event::Apply(a) | watcher::Event::InitApply(a)))) => break Some(a),
                Ok(Some(Ok(watcher::Event::Delete(_)))) => {
                    finish_bar();
                    bail!("Application {name} was deleted while waiting for it");
                }
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(e))) => {
                    tracing::debug!(err = %e, "watching the Application");
                    watch_error = Some(e.to_string());
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Ok(None) | Err(_) => break None,
            }
        };
        match next {
            Some(a) => app = a,
            None => {
                finish_bar();
                let op_text = op
                    .map(|o| format!(", operation {}: {}", o.phase, o.message))
                    .unwrap_or_default();
                let cond = status
                    .conditions
                    .first()
                    .map(|c| format!(", {}: {}", c.type_, c.message))
                    .unwrap_or_default();
                let watch = watch_error
                    .map(|e| format!(" (watching it failed: {e})"))
                    .unwrap_or_default();
                bail!(
                    "timed out after {} s waiting for {}{op_text}{cond}{watch}",
                    timeout.as_secs(),
                    summary_line(&app)
                );
            }
        }
    }
}

async fn diff(
    client: kube::Client,
    api: &Api<Application>,
    namespace: &str,
    name: &str,
    revision: Option<String>,
) -> ExitCode {
    match diff_inner(client, api, namespace, name, revision).await {
        Ok(true) => ExitCode::from(1),
        Ok(false) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

async fn diff_inner(
    client: kube::Client,
    api: &Api<Application>,
    namespace: &str,
    name: &str,
    revision: Option<String>,
) -> anyhow::Result<bool> {
    let app = get(api, name).await?;
    let cache = crate::commands::default_cache().join("cli");
    let pipeline = capstan_controller::Pipeline::new(client, cache, namespace, Duration::from_secs(60), Duration::ZERO);
    pipeline.clusters.load().await?;
    let resolved = pipeline.resolve(&app, revision.as_deref(), true).await?;
    let state = pipeline.compare(&app, resolved).await?;
    let colour = std::io::stdout().is_terminal();
    let mut any = false;
    for r in state
        .comparison
        .resources
        .iter()
        .filter(|r| !r.hook && r.sync == capstan_compare::SyncCode::OutOfSync)
    {
        any = true;
        let text = capstan_compare::render_diff(r);
        for line in text.lines() {
            if !colour {
                println!("{line}");
            } else if line.starts_with('+') {
                println!("\x1b[32m{line}\x1b[0m");
            } else if line.starts_with('-') {
                println!("\x1b[31m{line}\x1b[0m");
            } else if line.starts_with("@@") {
                println!("\x1b[36m{line}\x1b[0m");
            } else {
                println!("{line}");
            }
        }
    }
    Ok(any)
}

async fn delete(api: &Api<Application>, name: &str, cascade: bool, wait: bool) -> anyhow::Result<ExitCode> {
    let app = get(api, name).await?;
    let mut finalizers: Vec<String> = app.finalizers().to_vec();
    let has = finalizers.iter().any(|f| f == RESOURCES_FINALIZER);
    if cascade && !has {
        finalizers.push(RESOURCES_FINALIZER.into());
    } else if !cascade && has {
        finalizers.retain(|f| f != RESOURCES_FINALIZER);
    }
    if finalizers.as_slice() != app.finalizers() {
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
        let deadline = Instant::now() + Duration::from_secs(120);
        while api
            .get_opt(name)
            .await
            .map_err(|e| anyhow!("{}", describe(&e)))?
            .is_some()
        {
            if Instant::now() > deadline {
                bail!("{name} still exists after 120 s (is `capstan controller` running to remove its finalizer?)");
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    println!(
        "application {name} deleted{}",
        if cascade { " with its resources" } else { "" }
    );
    Ok(ExitCode::SUCCESS)
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
