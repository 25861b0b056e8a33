//! `capstan project …`: inspect AppProjects. `windows NAME` lists a project's sync windows, each
//! active or not now and when that changes next; logged in to a server (`capstan login`), the
//! project comes from it (`GET /api/projects/{name}`).

use std::process::ExitCode;

use anyhow::{Context, anyhow};
use capstan_api::AppProject;
use capstan_project::windows;
use kube::api::Api;

use crate::commands::app::print_table;
use crate::kube_client::{KubeArgs, describe};
use crate::output::outln;
use crate::remote::Remote;
use crate::remote::client::encode;

/// `capstan project` and its subcommands.
#[derive(Debug, clap::Args)]
pub struct ProjectArgs {
    /// Namespace Capstan runs in (where AppProjects live).
    #[arg(long = "namespace", short = 'n', global = true, default_value = capstan_api::NAMESPACE,
          alias = "capstan-namespace")]
    namespace: String,
    #[command(flatten)]
    kube: KubeArgs,
    #[command(subcommand)]
    command: ProjectCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ProjectCommand {
    /// List a project's sync windows: active or inactive now, and when that changes next (exit 1
    /// when a window does not parse).
    Windows {
        /// Name of the AppProject.
        name: String,
    },
}

/// Run `capstan project …`.
pub async fn run(args: ProjectArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ProjectCommand::Windows { name } => {
            let project = match Remote::current()? {
                Some(remote) => remote
                    .get::<AppProject>(&format!("/api/projects/{}", encode(&name)))
                    .await
                    .map_err(|e| match e.status() {
                        Some(404) => anyhow!("AppProject {name:?} not found"),
                        _ => e.into(),
                    })?,
                None => {
                    let api: Api<AppProject> = Api::namespaced(args.kube.client().await?, &args.namespace);
                    api.get_opt(&name)
                        .await
                        .map_err(|e| anyhow!("{}", describe(&e)))
                        .with_context(|| format!("reading AppProject {name}"))?
                        .ok_or_else(|| anyhow!("AppProject {name:?} not found in namespace {}", args.namespace))?
                }
            };
            print_windows(&name, &project)
        }
    }
}

/// `project windows`' table of the project's sync windows; exit 1 when one does not parse.
fn print_windows(name: &str, project: &AppProject) -> anyhow::Result<ExitCode> {
    let at = capstan_controller::gates::system_now();
    let states = windows::states(&project.spec.sync_windows, at);
    if states.is_empty() {
        outln!("AppProject {name} has no sync windows: its Applications may sync at any time");
        return Ok(ExitCode::SUCCESS);
    }
    let (rows, bad) = rows(&states);
    print_table(&rows);
    for e in &bad {
        eprintln!("error: AppProject {name}: {e}");
    }
    Ok(if bad.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The table of `states` (header first), and the windows that do not parse.
fn rows(states: &[windows::WindowState]) -> (Vec<Vec<String>>, Vec<windows::WindowError>) {
    let mut rows = vec![
        [
            "ID",
            "STATUS",
            "KIND",
            "SCHEDULE",
            "DURATION",
            "TIMEZONE",
            "APPLICATIONS",
            "NAMESPACES",
            "CLUSTERS",
            "MANUALSYNC",
            "NEXT CHANGE",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let mut bad = Vec::new();
    for s in states {
        let w = &s.window;
        let status = match &s.parsed {
            Err(e) => {
                bad.push(e.clone());
                "Invalid"
            }
            Ok(_) if s.active => "Active",
            Ok(_) => "Inactive",
        };
        let list = |v: &[String]| if v.is_empty() { "-".to_string() } else { v.join(",") };
        rows.push(vec![
            s.index.to_string(),
            status.into(),
            w.kind.as_str().into(),
            w.schedule.clone(),
            w.duration.clone(),
            if w.time_zone.is_empty() {
                "UTC".into()
            } else {
                w.time_zone.clone()
            },
            list(&w.applications),
            list(&w.namespaces),
            list(&w.clusters),
            if w.manual_sync { "Enabled" } else { "Disabled" }.into(),
            s.next_change.map(windows::format_instant).unwrap_or_else(|| "-".into()),
        ]);
    }
    (rows, bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::sync_window::{SyncWindow, SyncWindowKind};

    #[test]
    fn windows_are_listed_with_their_state_and_next_change() {
        let at = windows::instant(1_780_000_000, 0).expect("instant");
        let list = [
            SyncWindow {
                kind: SyncWindowKind::Deny,
                schedule: "* * * * *".into(),
                duration: "1h".into(),
                applications: vec!["*".into()],
                manual_sync: true,
                ..Default::default()
            },
            SyncWindow {
                schedule: "0 9 * * *".into(),
                duration: "soon".into(),
                namespaces: vec!["prod-*".into()],
                ..Default::default()
            },
        ];
        let (rows, bad) = rows(&windows::states(&list, at));
        assert_eq!(rows[1][..3], ["0", "Active", "deny"]);
        assert_eq!(rows[1][9], "Enabled");
        assert_eq!(rows[2][..3], ["1", "Invalid", "allow"]);
        assert_eq!(rows[2][5], "UTC");
        assert_eq!(bad.len(), 1);
        assert!(bad[0].to_string().contains("syncWindows[1]: duration \"soon\""));
    }
}
