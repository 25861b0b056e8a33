//! `capstan account …`: the HTTP server's local accounts and API tokens, kept in the Secret
//! `capstan-secret` (password hashes and token hashes only; a token is shown once), and the
//! revocation of an account's sessions (its session generation).

use crate::output::outln;
use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;

use anyhow::{Context, bail};
use base64::Engine;
use capstan_server::auth::{self, password, rbac};
use capstan_server::state::SECRET;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::kube_client::{KubeArgs, describe};

/// Arguments of `capstan account`.
#[derive(Debug, clap::Args)]
pub struct AccountArgs {
    #[command(flatten)]
    kube: KubeArgs,
    /// Namespace of the server's Secret.
    #[arg(long, short = 'n', global = true, default_value = capstan_api::NAMESPACE)]
    namespace: String,
    #[command(subcommand)]
    command: AccountCommand,
}

#[derive(Debug, clap::Subcommand)]
enum AccountCommand {
    /// Set (or create) a local account's password (ending its sessions); read from --password or one
    /// line of stdin.
    SetPassword {
        /// The account (lower-case letters, digits and '-').
        name: String,
        /// The new password (default: one line of stdin).
        #[arg(long, env = "CAPSTAN_PASSWORD", hide_env_values = true)]
        password: Option<String>,
    },
    /// Create an API token for an account and print it (once).
    GenerateToken {
        /// The account the token acts as.
        name: String,
        /// Let the token expire after this long: seconds, or 90s, 5m, 1h, 30d (default: never).
        #[arg(long, value_parser = lifetime)]
        expires_in: Option<u64>,
    },
    /// End every session of an account (session cookies issued before are refused).
    RevokeSessions {
        /// The account.
        name: String,
    },
    /// Revoke an API token by its id (the part between `cst_` and the dot).
    DeleteToken {
        /// The token's id (see `capstan account list`).
        id: String,
    },
    /// List accounts and token ids (never secrets).
    List,
}

/// Run an `account` subcommand.
pub async fn run(args: AccountArgs) -> anyhow::Result<ExitCode> {
    let client = args.kube.client().await?;
    let secrets: Api<Secret> = Api::namespaced(client, &args.namespace);
    match args.command {
        AccountCommand::SetPassword { name, password } => {
            check_name(&name)?;
            let password = match password {
                Some(p) => p,
                None => read_password()?,
            };
            if password.chars().count() < 8 {
                bail!("the password must have at least 8 characters");
            }
            let hash = password::hash(&password);
            set(&secrets, &auth::password_key(&name), &hash).await?;
            bump_generation(&secrets, &name).await?;
            outln!("password of account {name} set; its sessions are ended");
        }
        AccountCommand::GenerateToken { name, expires_in } => {
            check_name(&name)?;
            let expires = expires_in.map(|s| auth::session::now_secs().saturating_add(s));
            let (id, token, stored) = auth::new_token(&name, expires);
            set(&secrets, &auth::token_key(&id), &stored).await?;
            match expires_in {
                Some(s) => eprintln!("token {id} for account {name} created, expiring in {s} s; it is shown only now:"),
                None => eprintln!("token {id} for account {name} created; it is shown only now:"),
            }
            outln!("{token}");
        }
        AccountCommand::RevokeSessions { name } => {
            check_name(&name)?;
            bump_generation(&secrets, &name).await?;
            outln!("sessions of account {name} revoked");
        }
        AccountCommand::DeleteToken { id } => {
            if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
                bail!("invalid token id {id:?}");
            }
            let patch = json!({"data": {auth::token_key(&id): null}});
            secrets
                .patch(SECRET, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map_err(|e| anyhow::anyhow!("{}", describe(&e)))
                .with_context(|| format!("updating Secret {SECRET}"))?;
            outln!("token {id} revoked");
        }
        AccountCommand::List => {
            let secret = secrets
                .get_opt(SECRET)
                .await
                .map_err(|e| anyhow::anyhow!("{}", describe(&e)))?
                .with_context(|| format!("Secret {SECRET} not found: run `capstan install`"))?;
            let data = secret.data.unwrap_or_default();
            outln!("ACCOUNT\tKIND\tID");
            for key in data.keys() {
                if key == auth::ADMIN_PASSWORD {
                    outln!("{}\tpassword\t-", rbac::ADMIN);
                } else if let Some(name) = key.strip_prefix("accounts.").and_then(|k| k.strip_suffix(".password")) {
                    outln!("{name}\tpassword\t-");
                } else if let Some(id) = key.strip_prefix("tokens.") {
                    let account = serde_json::from_slice::<serde_json::Value>(&data[key].0)
                        .ok()
                        .and_then(|v| v.get("account").and_then(|a| a.as_str()).map(str::to_string))
                        .unwrap_or_default();
                    outln!("{account}\ttoken\t{id}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A token lifetime: what `--timeout` flags take (seconds, or 90s, 5m, 1h), and days (30d), which
/// only lifetimes need.
fn lifetime(text: &str) -> Result<u64, String> {
    match text.trim().strip_suffix('d') {
        Some(days) if !days.is_empty() && days.chars().all(|c| c.is_ascii_digit()) => days
            .parse::<u64>()
            .ok()
            .and_then(|d| d.checked_mul(86_400))
            .ok_or_else(|| format!("{text:?} is too long a duration")),
        _ => super::seconds(text).map_err(|e| format!("{e}, or days (30d)")),
    }
}

fn check_name(name: &str) -> anyhow::Result<()> {
    if !auth::valid_account(name) {
        bail!("invalid account name {name:?}: use lower-case letters, digits and '-' (at most 63)");
    }
    Ok(())
}

/// One line of stdin as a password (prompted on a terminal); `capstan login` reads it the same way.
pub(crate) fn read_password() -> anyhow::Result<String> {
    if std::io::stdin().is_terminal() {
        eprint!("password: ");
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the password from stdin")?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

/// Move `account`'s session generation on, so that its existing session cookies are refused. The
/// write carries the Secret's resourceVersion, so two bumps at once cannot both read the same value.
async fn bump_generation(secrets: &Api<Secret>, account: &str) -> anyhow::Result<()> {
    let key = auth::generation_key(account);
    for _ in 0..5 {
        let secret = secrets
            .get_opt(SECRET)
            .await
            .map_err(|e| anyhow::anyhow!("{}", describe(&e)))?
            .with_context(|| format!("Secret {SECRET} not found: run `capstan install` first"))?;
        let current = auth::parse_generation(secret.data.as_ref().and_then(|d| d.get(&key)).map(|v| v.0.as_slice()));
        let encoded = base64::engine::general_purpose::STANDARD.encode((current + 1).to_string());
        let patch = json!({
            "metadata": {"resourceVersion": secret.metadata.resource_version},
            "data": {&key: encoded},
        });
        match secrets
            .patch(SECRET, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => {
                return Err(anyhow::anyhow!("{}", describe(&e))).with_context(|| format!("updating Secret {SECRET}"));
            }
        }
    }
    bail!("Secret {SECRET} kept changing: try again")
}

/// Set one key of the server's Secret (created if missing).
async fn set(secrets: &Api<Secret>, key: &str, value: &str) -> anyhow::Result<()> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(value);
    let patch = json!({"data": {key: encoded}});
    match secrets
        .patch(SECRET, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => bail!("Secret {SECRET} not found: run `capstan install` first"),
        Err(e) => Err(anyhow::anyhow!("{}", describe(&e))).with_context(|| format!("updating Secret {SECRET}")),
    }
}

#[cfg(test)]
mod tests {
    use super::lifetime;

    #[test]
    fn token_lifetimes_take_days_too() {
        assert_eq!(lifetime("30d"), Ok(30 * 86_400));
        assert_eq!(lifetime("2h"), Ok(7_200));
        assert_eq!(lifetime("90"), Ok(90));
        for bad in ["d", "-1d", "1.5d", "10w"] {
            assert!(lifetime(bad).is_err(), "{bad}");
        }
        assert!(lifetime(&format!("{}d", u64::MAX)).is_err());
    }
}
