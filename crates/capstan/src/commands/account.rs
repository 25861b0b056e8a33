//! `capstan account …`: the HTTP server's local accounts and API tokens, kept in the Secret
//! `capstan-secret` (password hashes and token hashes only; a token is shown once).

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
    #[arg(long, global = true, default_value = capstan_api::NAMESPACE)]
    namespace: String,
    #[command(subcommand)]
    command: AccountCommand,
}

#[derive(Debug, clap::Subcommand)]
enum AccountCommand {
    /// Set (or create) a local account's password; read from --password or one line of stdin.
    SetPassword {
        name: String,
        #[arg(long, env = "CAPSTAN_PASSWORD", hide_env_values = true)]
        password: Option<String>,
    },
    /// Create an API token for an account and print it (once).
    GenerateToken { name: String },
    /// Revoke an API token by its id (the part between `cst_` and the dot).
    DeleteToken { id: String },
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
            println!("password of account {name} set");
        }
        AccountCommand::GenerateToken { name } => {
            check_name(&name)?;
            let (id, token, stored) = auth::new_token(&name);
            set(&secrets, &auth::token_key(&id), &stored).await?;
            eprintln!("token {id} for account {name} created; it is shown only now:");
            println!("{token}");
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
            println!("token {id} revoked");
        }
        AccountCommand::List => {
            let secret = secrets
                .get_opt(SECRET)
                .await
                .map_err(|e| anyhow::anyhow!("{}", describe(&e)))?
                .with_context(|| format!("Secret {SECRET} not found: run `capstan install`"))?;
            let data = secret.data.unwrap_or_default();
            println!("ACCOUNT\tKIND\tID");
            for key in data.keys() {
                if key == auth::ADMIN_PASSWORD {
                    println!("{}\tpassword\t-", rbac::ADMIN);
                } else if let Some(name) = key.strip_prefix("accounts.").and_then(|k| k.strip_suffix(".password")) {
                    println!("{name}\tpassword\t-");
                } else if let Some(id) = key.strip_prefix("tokens.") {
                    let account = serde_json::from_slice::<serde_json::Value>(&data[key].0)
                        .ok()
                        .and_then(|v| v.get("account").and_then(|a| a.as_str()).map(str::to_string))
                        .unwrap_or_default();
                    println!("{account}\ttoken\t{id}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn check_name(name: &str) -> anyhow::Result<()> {
    if !auth::valid_account(name) {
        bail!("invalid account name {name:?}: use lower-case letters, digits and '-' (at most 63)");
    }
    Ok(())
}

fn read_password() -> anyhow::Result<String> {
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
