//! `capstan app rollback NAME ID --revert [--reason TEXT]`: a rollback by one Git revert commit on
//! the Application's branch, made from the command line with the repository credentials read
//! through the Kubernetes API (as `capstan promote` does); the commit is `capstan-promote`'s
//! [`capstan_promote::Promoter::revert_rollback`], the same the HTTP API makes. Exit status 0 with
//! the commit printed, 1 when Capstan refuses (the reason on stderr), 2 when something fails.

use std::process::ExitCode;

use crate::output::outln;

/// Run the revert; never fails (the exit status says how it went).
pub(super) async fn run(
    client: kube::Client,
    namespace: &str,
    name: &str,
    id: i64,
    reason: Option<String>,
) -> ExitCode {
    let user = format!("cli:{}", crate::commands::login_name());
    let promoter = capstan_promote::Promoter::new(client, namespace);
    let reason = reason.unwrap_or_default();
    match promoter.revert_rollback(name, id, &user, &reason, "capstan-cli").await {
        Ok(reverted) => {
            outln!("{}", reverted.sha);
            let short: Vec<&str> = reverted.reverted.iter().map(|s| s.get(..12).unwrap_or(s)).collect();
            eprintln!(
                "rolled {name} back to history {id}: reverted {} on {}; automated sync (if on) follows",
                short.join(", "),
                reverted.branch
            );
            ExitCode::SUCCESS
        }
        Err(err) if err.is_refusal() => {
            eprintln!("refused: {err}");
            ExitCode::from(1)
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
    }
}
