//! `capstan app …` through Capstan's HTTP server, for a user logged in with `capstan login`: the
//! same commands, outputs and exit codes as through the kubeconfig, with the server's project
//! roles deciding what the user may read and do. The Application objects come from the API
//! (`GET /api/applications/{name}`), so the tables and `-o yaml|json` are printed by the same code;
//! `--wait` follows the server's live stream of the Application. Also the commands that only
//! exist through the server: `logs` and `actions`.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use capstan_api::Application;
use capstan_api::operation::Operation;
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

use super::*;
use crate::remote::client::encode;
use crate::remote::{Remote, RemoteError};

/// Applications fetched at once for `app list`.
const AT_ONCE: usize = 8;
/// The largest server-sent event or log line kept.
const EVENT_LIMIT: usize = 64 * 1024 * 1024;

/// Run `command` through `remote`.
pub(super) async fn run(remote: &Remote, command: AppCommand) -> anyhow::Result<ExitCode> {
    match command {
        AppCommand::List { output, filter } => list(remote, output, &filter).await,
        AppCommand::Get {
            name,
            output,
            refresh,
            hard_refresh,
        } => {
            if refresh || hard_refresh {
                refresh_and_wait(remote, &name, hard_refresh).await?;
            }
            let app = get(remote, &name).await?;
            let windows = match output {
                Output::Table | Output::Wide => {
                    let project = capstan_api::project::project_name(&app.spec.project);
                    // A project the caller may not read, or the implicit `default`: no windows shown.
                    match remote
                        .get::<capstan_api::AppProject>(&format!("/api/projects/{}", encode(project)))
                        .await
                    {
                        Ok(found) => {
                            show::window_lines(&app, project, &found.spec, capstan_controller::gates::system_now())
                        }
                        Err(_) => Vec::new(),
                    }
                }
                _ => Vec::new(),
            };
            print_app(&app, output, &windows)?;
            Ok(ExitCode::SUCCESS)
        }
        AppCommand::Diff { name, revision } => match diff(remote, &name, revision).await {
            Ok(true) => Ok(ExitCode::from(1)),
            Ok(false) => Ok(ExitCode::SUCCESS),
            Err(err) => {
                eprintln!("error: {err:#}");
                Ok(ExitCode::from(2))
            }
        },
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
            for r in &resources {
                if capstan_kube::ObjectKey::parse(r).is_none() {
                    bail!("invalid --resource {r:?}: use GROUP/KIND/NAMESPACE/NAME");
                }
            }
            let body = json!({
                "prune": prune || allow_deletions, "dryRun": dry_run, "revision": revision.unwrap_or_default(),
                "resources": resources, "syncOptions": sync_options, "allowDeletions": allow_deletions,
            });
            request(remote, &name, "sync", &body, wait, timeout).await
        }
        AppCommand::History { name } => {
            let app = get(remote, &name).await?;
            print_history(&app);
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
                return Ok(revert_rollback(remote, &name, id, reason).await);
            }
            request(
                remote,
                &name,
                "rollback",
                &json!({"id": id, "prune": prune}),
                wait,
                timeout,
            )
            .await
        }
        AppCommand::Wait {
            name,
            health,
            sync,
            operation,
            timeout,
        } => {
            let spec = WaitFor::for_command(health, sync, operation);
            let app = wait(remote, &name, &spec, timeout).await?;
            outln!("{}", summary_line(&app));
            Ok(ExitCode::SUCCESS)
        }
        AppCommand::Delete {
            name,
            cascade,
            wait,
            yes,
        } => {
            let app = get(remote, &name).await?;
            if !yes {
                confirm_delete(&app, cascade)?;
            }
            let path = format!("{}?cascade={cascade}", app_path(&name));
            let _: Value = remote
                .delete(&path)
                .await
                .map_err(|e| not_found_as_kube_says(e, &name))?;
            if wait {
                wait_gone(&name, || async {
                    match remote.get::<Value>(&app_path(&name)).await {
                        Ok(_) => Ok(true),
                        Err(e) if e.status() == Some(404) => Ok(false),
                        Err(e) => Err(e.into()),
                    }
                })
                .await?;
            }
            print_deleted(&name, cascade);
            Ok(ExitCode::SUCCESS)
        }
        AppCommand::Logs(args) => logs(remote, args).await,
        AppCommand::Actions { command } => actions(remote, command).await,
    }
}

fn app_path(name: &str) -> String {
    format!("/api/applications/{}", encode(name))
}

async fn get(remote: &Remote, name: &str) -> anyhow::Result<Application> {
    remote
        .get(&app_path(name))
        .await
        .map_err(|e| not_found_as_kube_says(e, name))
}

/// A 404 worded as the kubeconfig path words it.
fn not_found_as_kube_says(err: RemoteError, name: &str) -> anyhow::Error {
    if err.status() == Some(404) {
        anyhow!("Application {name:?} not found")
    } else {
        err.into()
    }
}

async fn list(remote: &Remote, output: Output, filter: &ListFilter) -> anyhow::Result<ExitCode> {
    // The server filters by one project, labels and cluster; the rest (several projects, the
    // repository) is matched here on the whole objects, as the kubeconfig path does.
    let mut query = vec!["limit=1000".to_string()];
    if let [project] = filter.projects.as_slice() {
        query.push(format!("project={}", encode(project)));
    }
    if let Some(selector) = &filter.selector {
        query.push(format!("label={}", encode(selector)));
    }
    let mut names = Vec::new();
    let mut next = String::new();
    loop {
        let mut q = query.clone();
        if !next.is_empty() {
            q.push(format!("continue={}", encode(&next)));
        }
        let page: Value = remote.get(&format!("/api/applications?{}", q.join("&"))).await?;
        names.extend(
            page["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i["name"].as_str().map(String::from)),
        );
        next = page["metadata"]["continue"].as_str().unwrap_or_default().to_string();
        if next.is_empty() {
            break;
        }
    }
    let apps: Vec<Application> = futures::stream::iter(names)
        .map(|n| async move { get_opt(remote, &n).await })
        .buffered(AT_ONCE)
        .try_collect::<Vec<_>>()
        .await?
        .into_iter()
        .flatten()
        .filter(|a| filter.matches(a))
        .collect();
    print_list(&apps, output)
}

/// The Application, or none when it is gone (deleted between a list and its read).
async fn get_opt(remote: &Remote, name: &str) -> anyhow::Result<Option<Application>> {
    match remote.get(&app_path(name)).await {
        Ok(app) => Ok(Some(app)),
        Err(e) if e.status() == Some(404) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

async fn refresh_and_wait(remote: &Remote, name: &str, hard: bool) -> anyhow::Result<()> {
    let before = get(remote, name).await?.status.and_then(|s| s.reconciled_at);
    let _: Value = remote
        .post(&format!("{}/refresh", app_path(name)), &json!({"hard": hard}))
        .await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let app = get(remote, name).await?;
        let consumed = !app.annotations().contains_key(capstan_api::labels::REFRESH_ANNOTATION);
        if consumed && app.status.and_then(|s| s.reconciled_at) != before {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("the controller did not pick up the refresh of {name} within 60 s")
}

async fn diff(remote: &Remote, name: &str, revision: Option<String>) -> anyhow::Result<bool> {
    if revision.is_some() {
        bail!("--revision is not available through the server: the server compares the target revision");
    }
    let answer: Value = remote
        .get(&format!("{}/diff", app_path(name)))
        .await
        .map_err(|e| not_found_as_kube_says(e, name))?;
    let colour = crate::output::color(crate::output::Stream::Stdout);
    let mut any = false;
    // Every object the server lists is out of sync (changed, missing, or requiring pruning), as
    // the kubeconfig path prints them.
    for object in answer["objects"].as_array().into_iter().flatten() {
        any = true;
        print_diff(object["diff"].as_str().unwrap_or_default(), colour);
    }
    Ok(any)
}

/// `POST …/sync` or `…/rollback`, then with `wait` follow the operation it requested.
async fn request(
    remote: &Remote,
    name: &str,
    what: &str,
    body: &Value,
    wait_done: bool,
    timeout: u64,
) -> anyhow::Result<ExitCode> {
    let app = get(remote, name).await?;
    let answer: Value = remote
        .post(&format!("{}/{what}", app_path(name)), body)
        .await
        .map_err(|e| anyhow!("cannot {what} {name}: {e}"))?;
    if !wait_done {
        outln!("{what} of {name} requested");
        return Ok(ExitCode::SUCCESS);
    }
    let op: Operation =
        serde_json::from_value(answer["requested"].clone()).context("the server's answer names no operation")?;
    let spec = wait_spec(&app, &op);
    let app = wait(remote, name, &spec, timeout).await?;
    report_operation(&app, what);
    Ok(ExitCode::SUCCESS)
}

/// `rollback --revert` through the server: the same output and exit codes as through the
/// kubeconfig (the commit on stdout; 1 when refused, 2 when something fails).
async fn revert_rollback(remote: &Remote, name: &str, id: i64, reason: Option<String>) -> ExitCode {
    let body = json!({"id": id, "revert": true, "reason": reason.unwrap_or_default()});
    match remote
        .post::<Value>(&format!("{}/rollback", app_path(name)), &body)
        .await
    {
        Ok(answer) => {
            outln!("{}", answer["commit"].as_str().unwrap_or_default());
            let short: Vec<&str> = answer["reverted"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|s| s.get(..12).unwrap_or(s))
                .collect();
            eprintln!(
                "rolled {name} back to history {id}: reverted {} on {}; automated sync (if on) follows",
                short.join(", "),
                answer["branch"].as_str().unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(RemoteError::Refused {
            status: 409 | 422,
            message,
        }) => {
            eprintln!("refused: {message}");
            ExitCode::from(1)
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
    }
}

/// Wait as [`wait_on`] does, following the server's stream of the Application.
async fn wait(remote: &Remote, name: &str, spec: &WaitFor, timeout: u64) -> anyhow::Result<Application> {
    let app = get(remote, name).await?;
    let answer = remote
        .stream(&format!("/api/stream/applications/{}", encode(name)))
        .await?;
    let updates = futures::stream::unfold((answer, Vec::<u8>::new()), |(mut answer, mut buf)| async move {
        loop {
            if let Some(end) = find(&buf, b"\n\n") {
                let event: Vec<u8> = buf.drain(..end + 2).collect();
                if let Some(update) = sse_update(&String::from_utf8_lossy(&event)) {
                    return Some((update, (answer, buf)));
                }
                continue;
            }
            match answer.chunk().await {
                Ok(Some(bytes)) if buf.len() + bytes.len() <= EVENT_LIMIT => buf.extend_from_slice(&bytes),
                Ok(Some(_)) => return Some((Update::Failed("an event too large".into()), (answer, Vec::new()))),
                // The server ended the stream (its shutdown, an expired login): nothing more comes.
                Ok(None) | Err(_) => return None,
            }
        }
    });
    wait_on(app, updates, name, spec, Duration::from_secs(timeout)).await
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// One server-sent event as an [`Update`] (keep-alive comments are none).
fn sse_update(event: &str) -> Option<Update> {
    let mut kind = "message";
    let mut data = String::new();
    for line in event.lines() {
        if let Some(k) = line.strip_prefix("event:") {
            kind = k.trim();
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push_str(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    match kind {
        "application" => serde_json::from_str::<Application>(&data)
            .ok()
            .map(|a| Update::Applied(Box::new(a))),
        "deleted" => Some(Update::Deleted),
        _ => None,
    }
}

/// `capstan app logs`.
async fn logs(remote: &Remote, args: LogsArgs) -> anyhow::Result<ExitCode> {
    let mut q = Vec::new();
    let mut add = |k: &str, v: &str| q.push(format!("{k}={}", encode(v)));
    match (&args.kind, &args.resource) {
        (Some(kind), Some(resource)) => {
            add("kind", kind);
            add("group", args.group.as_deref().unwrap_or(default_group(kind)));
            add("resourceName", resource);
        }
        (Some(_), None) => bail!("--kind needs --name: the resource whose Pods' logs to show"),
        (None, Some(pod)) => add("pod", pod),
        (None, None) => {}
    }
    if let Some(ns) = &args.resource_namespace {
        add("namespace", ns);
    }
    if let Some(c) = &args.container {
        add("container", c);
    }
    if let Some(t) = args.tail {
        add("tailLines", &t.to_string());
    }
    if let Some(s) = args.since {
        add("sinceSeconds", &s.to_string());
    }
    if args.previous {
        add("previous", "true");
    }
    if args.follow {
        add("follow", "true");
    }
    let path = format!("{}/logs?{}", app_path(&args.name), q.join("&"));
    let mut answer = remote
        .stream(&path)
        .await
        .map_err(|e| not_found_as_kube_says(e, &args.name))?;
    let mut buf = Vec::new();
    let mut failed = false;
    loop {
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let raw: Vec<u8> = buf.drain(..=end).collect();
            let Ok(line) = serde_json::from_slice::<Value>(&raw) else {
                continue;
            };
            let prefix = format!(
                "{}/{}",
                line["pod"].as_str().unwrap_or_default(),
                line["container"].as_str().unwrap_or_default()
            );
            if let Some(err) = line["error"].as_str().filter(|e| !e.is_empty()) {
                failed = true;
                eprintln!("error: {prefix}: {err}");
                continue;
            }
            // A container writes what it likes: control characters (terminal escapes) are shown,
            // not obeyed, as `cat -v` would.
            let content: String = line["content"]
                .as_str()
                .unwrap_or_default()
                .chars()
                .map(|c| if c.is_control() && c != '\t' { '?' } else { c })
                .collect();
            let stamp = if args.timestamps {
                format!("{} ", line["timestamp"].as_str().unwrap_or_default())
            } else {
                String::new()
            };
            if args.prefix {
                outln!("[{prefix}] {stamp}{content}");
            } else {
                outln!("{stamp}{content}");
            }
        }
        match answer.chunk().await {
            Ok(Some(bytes)) if buf.len() + bytes.len() <= EVENT_LIMIT => buf.extend_from_slice(&bytes),
            Ok(Some(_)) => bail!("a log line over {EVENT_LIMIT} bytes"),
            Ok(None) => break,
            Err(err) => bail!("the log stream broke: {}", capstan_http::chain(&err)),
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// The API group a kind name most likely means.
fn default_group(kind: &str) -> &'static str {
    match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => "apps",
        "Job" | "CronJob" => "batch",
        _ => "",
    }
}

/// `capstan app actions list|run`.
async fn actions(remote: &Remote, command: ActionsCommand) -> anyhow::Result<ExitCode> {
    match command {
        ActionsCommand::List { name, object } => {
            let group = object
                .group
                .clone()
                .unwrap_or_else(|| default_group(&object.kind).into());
            let path = format!(
                "{}/actions?group={}&kind={}&namespace={}&name={}",
                app_path(&name),
                encode(&group),
                encode(&object.kind),
                encode(object.resource_namespace.as_deref().unwrap_or_default()),
                encode(&object.resource)
            );
            let answer: Value = remote.get(&path).await.map_err(|e| not_found_as_kube_says(e, &name))?;
            let mut rows = vec![vec!["ACTION".to_string(), "DISABLED".to_string()]];
            for item in answer["items"].as_array().into_iter().flatten() {
                rows.push(vec![
                    item["name"].as_str().unwrap_or_default().to_string(),
                    item["disabled"].as_str().unwrap_or_default().to_string(),
                ]);
            }
            print_table(&rows);
            Ok(ExitCode::SUCCESS)
        }
        ActionsCommand::Run { name, action, object } => {
            let group = object
                .group
                .clone()
                .unwrap_or_else(|| default_group(&object.kind).into());
            let body = json!({
                "group": group, "kind": object.kind, "namespace": object.resource_namespace.unwrap_or_default(),
                "name": object.resource, "action": action,
            });
            let answer: Value = remote
                .post(&format!("{}/actions", app_path(&name)), &body)
                .await
                .map_err(|e| not_found_as_kube_says(e, &name))?;
            outln!("{}", answer["message"].as_str().unwrap_or_default());
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_sent_events_become_updates() {
        let app = r#"{"apiVersion":"capstan.dev/v1alpha1","kind":"Application","metadata":{"name":"web"},"spec":{"destination":{}}}"#;
        assert!(matches!(
            sse_update(&format!("event: application\ndata: {app}\n\n")),
            Some(Update::Applied(a)) if a.name_any() == "web"
        ));
        assert!(matches!(
            sse_update("event: deleted\ndata: {\"name\":\"web\"}\n\n"),
            Some(Update::Deleted)
        ));
        assert!(sse_update(": keep-alive\n\n").is_none());
    }
}
