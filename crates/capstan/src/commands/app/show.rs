//! How `capstan app` prints Applications: the table of `list` and the details of `get`.

use crate::output::{out, outln, printable};
use capstan_api::Application;
use capstan_controller::pipeline::short;
use kube::ResourceExt;

use super::*;

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
        outln!("{}", line.join("   ").trim_end());
    }
}

pub(super) fn summary_line(app: &Application) -> String {
    let status = app.status.clone().unwrap_or_default();
    format!(
        "{}: sync={} health={} revision={}",
        app.name_any(),
        status.sync.as_ref().map(|s| s.status).unwrap_or_default(),
        status.health.as_ref().map(|h| h.status).unwrap_or_default(),
        status.sync.as_ref().map(|s| short(&s.revision)).unwrap_or_default()
    )
}

pub(super) fn print_app(app: &Application, output: Output, windows: &[(String, String)]) -> anyhow::Result<()> {
    match output {
        Output::Json => outln!("{}", serde_json::to_string_pretty(&printable(app))?),
        Output::Yaml => out!("{}", serde_saphyr::to_string(&printable(app))?),
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
            if spec.is_multi_source() {
                let revisions = status.sync.as_ref().map(|s| s.revisions.clone()).unwrap_or_default();
                for (i, source) in spec.sources.iter().enumerate() {
                    fields.push(("Source", source_line(i, source, revisions.get(i))));
                }
            } else {
                fields.push(("Repo", spec.source.repo_url.clone()));
                fields.push(("Target", target_of(&spec.source)));
                if spec.source.is_chart() {
                    fields.push(("Chart", spec.source.chart.clone()));
                } else {
                    fields.push(("Path", spec.source.path.clone()));
                }
            }
            fields.push(("Sync Policy", policy));
            let sync = status.sync.clone().unwrap_or_default();
            fields.push(("Sync Status", format!("{} ({})", sync.status, short(&sync.revision))));
            let health = status.health.clone().unwrap_or_default();
            let health_text = if health.message.is_empty() {
                health.status.to_string()
            } else {
                format!("{}: {}", health.status, health.message)
            };
            fields.push(("Health Status", health_text));
            if !spec.depends_on.is_empty() {
                let names: Vec<&str> = spec.depends_on.iter().map(|d| d.name.as_str()).collect();
                fields.push(("Depends On", names.join(", ")));
            }
            if let Some(op) = &status.operation_state {
                fields.push(("Operation", format!("{}: {}", op.phase, op.message)));
            }
            for (k, v) in fields {
                outln!("{:<15}{v}", format!("{k}:"));
            }
            for (k, v) in windows {
                outln!("{:<15}{v}", format!("{k}:"));
            }
            for c in &status.conditions {
                outln!("{:<15}{}: {}", "Condition:", c.type_, c.message);
            }
            if !status.resources.is_empty() {
                outln!();
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
                        r.status.to_string()
                    };
                    rows.push(vec![
                        r.group.clone(),
                        r.kind.clone(),
                        r.namespace.clone(),
                        r.name.clone(),
                        st,
                        h.status.to_string(),
                        h.message,
                    ]);
                }
                print_table(&rows);
            }
        }
    }
    Ok(())
}

/// What a source follows: its targetRevision, or `HEAD` (Git) / `latest` (chart) when unset.
fn target_of(source: &capstan_api::application::ApplicationSource) -> String {
    match (source.target_revision.is_empty(), source.is_chart()) {
        (false, _) => source.target_revision.clone(),
        (true, false) => "HEAD".into(),
        (true, true) => "latest".into(),
    }
}

/// One line per source of a multi-source Application: `N. REPO PATH|chart NAME [ref NAME] (TARGET) REVISION`.
fn source_line(i: usize, source: &capstan_api::application::ApplicationSource, revision: Option<&String>) -> String {
    let what = if source.is_chart() {
        format!("chart {}", source.chart)
    } else if source.path.is_empty() {
        ".".to_string()
    } else {
        source.path.clone()
    };
    let reference = if source.ref_name.is_empty() {
        String::new()
    } else {
        format!(" ref {}", source.ref_name)
    };
    let revision = revision.map(|r| format!(" {}", short(r))).unwrap_or_default();
    format!(
        "{}. {} {what}{reference} ({}){revision}",
        i + 1,
        source.repo_url,
        target_of(source)
    )
}

/// The lines `app get` shows about the sync windows of `app`'s project (`spec`, named `project`)
/// that apply to it at `at`: each active window, and whether and when automated and manual syncs
/// may run. Nothing when no window applies.
pub(super) fn window_lines(
    app: &Application,
    project: &str,
    spec: &capstan_api::AppProjectSpec,
    at: capstan_project::windows::DateTime<capstan_project::windows::Utc>,
) -> Vec<(String, String)> {
    use capstan_project::windows;
    let Some(state) = capstan_controller::gates::windows_at(app, project, spec, at) else {
        return Vec::new();
    };
    let d = &app.spec.destination;
    let name = app.name_any();
    let target = windows::Target {
        name: &name,
        namespace: &d.namespace,
        server: &d.server,
        cluster: &d.name,
    };
    let mut lines = Vec::new();
    for s in windows::states(&spec.sync_windows, at) {
        if !s.active || !windows::applies(&s.window, &target) {
            continue;
        }
        let until = s
            .next_change
            .map(|t| format!(" until {}", windows::format_instant(t)))
            .unwrap_or_default();
        lines.push((
            "Active Window".to_string(),
            format!(
                "{} syncWindows[{}] ({}, {}){until}",
                s.window.kind.as_str(),
                s.index,
                s.window.schedule,
                s.window.duration
            ),
        ));
    }
    let automated = match state.refusal(false) {
        None => "may run now".to_string(),
        Some(why) => format!("held: {why}"),
    };
    lines.push(("Auto Sync".to_string(), automated));
    let manual = match state.refusal(true) {
        None => "may run now".to_string(),
        Some(why) => format!("refused: {why}"),
    };
    lines.push(("Manual Sync".to_string(), manual));
    lines
}
