//! `capstan app diff`: the unified diff of every out-of-sync object, live → Git (Secret values redacted).

use crate::output::outln;
use std::process::ExitCode;
use std::time::Duration;

use capstan_api::Application;
use kube::api::Api;

use super::*;

pub(super) async fn diff(
    client: kube::Client,
    api: &Api<Application>,
    namespace: &str,
    name: &str,
    revision: Option<String>,
    deny_implicit_default_project: bool,
) -> ExitCode {
    match diff_inner(client, api, namespace, name, revision, deny_implicit_default_project).await {
        Ok(true) => ExitCode::from(1),
        Ok(false) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

pub(super) async fn diff_inner(
    client: kube::Client,
    api: &Api<Application>,
    namespace: &str,
    name: &str,
    revision: Option<String>,
    deny_implicit_default_project: bool,
) -> anyhow::Result<bool> {
    let app = get(api, name).await?;
    let cache = crate::commands::default_cache().join("cli");
    let pipeline = capstan_controller::Pipeline::new(client, cache, namespace, Duration::from_secs(60), Duration::ZERO);
    pipeline.projects.deny_implicit_default(deny_implicit_default_project);
    pipeline.clusters.load().await?;
    let project = pipeline.project(&app).await?;
    let resolved = pipeline.resolve(&app, &project, revision.as_deref(), true).await?;
    let state = pipeline.compare(&app, &project, resolved).await?;
    let colour = crate::output::color(crate::output::Stream::Stdout);
    let mut any = false;
    for r in state
        .comparison
        .resources
        .iter()
        .filter(|r| !r.hook && r.sync == capstan_compare::SyncCode::OutOfSync)
    {
        any = true;
        // Secret values (those resolved from a secret store included) are not printed: which keys
        // changed is shown, as the server's diffs do.
        let mut r = r.clone();
        let mut live = r.live.clone();
        capstan_redact::objects::redact_pair(&mut live, &mut r.predicted);
        capstan_redact::objects::redact_pair(&mut r.live, &mut r.desired);
        print_diff(&capstan_compare::render_diff(&r), colour);
    }
    Ok(any)
}

/// One object's unified diff, coloured on a terminal that wants colour.
pub(super) fn print_diff(text: &str, colour: bool) {
    for line in text.lines() {
        if !colour {
            outln!("{line}");
        } else if line.starts_with('+') {
            outln!("\x1b[32m{line}\x1b[0m");
        } else if line.starts_with('-') {
            outln!("\x1b[31m{line}\x1b[0m");
        } else if line.starts_with("@@") {
            outln!("\x1b[36m{line}\x1b[0m");
        } else {
            outln!("{line}");
        }
    }
}
