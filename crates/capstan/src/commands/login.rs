//! `capstan login`, `capstan logout` and `capstan context`: logging in to Capstan's HTTP server
//! with a password or an API token, keeping the login per server (see
//! [`crate::remote::sessions`]), and choosing which server commands go to. While a server is
//! current, `capstan app …` goes through its API with the user's project roles; with none, the
//! kubeconfig is used as before.

use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::output::outln;
use crate::remote::sessions::{Credentials, Login, Sessions, normalize};
use crate::remote::{Remote, RemoteError};

/// Arguments of `capstan login`.
#[derive(Debug, clap::Args)]
pub struct LoginArgs {
    /// The server's URL (`https://capstan.example.com`; `http://` only on loopback or behind a
    /// TLS-terminating proxy).
    server: String,
    /// The local account to log in as (default: $USER).
    #[arg(long)]
    username: Option<String>,
    /// The password (default: $CAPSTAN_PASSWORD, else one line of stdin).
    #[arg(long, env = "CAPSTAN_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// Log in with the API token in this file (`capstan account generate-token`) instead of a
    /// password; $CAPSTAN_TOKEN does the same without a file.
    #[arg(long, conflicts_with_all = ["username", "password"])]
    token_file: Option<std::path::PathBuf>,
    /// Do not verify the server's certificate (warns on every command).
    #[arg(long)]
    insecure_skip_tls_verify: bool,
    /// PEM file of the CA that signed the server's certificate (besides the system's roots).
    #[arg(long)]
    certificate_authority: Option<std::path::PathBuf>,
}

/// Arguments of `capstan logout`.
#[derive(Debug, clap::Args)]
pub struct LogoutArgs {
    /// The server to log out of (default: the current one).
    server: Option<String>,
}

/// Arguments of `capstan context`.
#[derive(Debug, clap::Args)]
pub struct ContextArgs {
    /// Make this server (one logged in to) the current one; without it, list the logins.
    server: Option<String>,
    /// Use no server: commands go through the kubeconfig again (the logins are kept).
    #[arg(long, conflicts_with = "server")]
    none: bool,
}

/// `capstan login SERVER`.
pub async fn login(args: LoginArgs) -> anyhow::Result<ExitCode> {
    let server = normalize(&args.server);
    let ca_pem = match &args.certificate_authority {
        Some(path) => Some(std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?),
        None => None,
    };
    let token = match &args.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?
                .trim()
                .to_string(),
        ),
        None if args.password.is_none() && args.username.is_none() => std::env::var("CAPSTAN_TOKEN")
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty()),
        None => None,
    };
    let base = |credentials| Login {
        user: String::new(),
        credentials,
        insecure: args.insecure_skip_tls_verify,
        ca_pem: ca_pem.clone(),
    };
    let login = match token {
        Some(token) => {
            if token.is_empty() {
                bail!("the token file is empty");
            }
            let remote = Remote::new(&server, base(Credentials::Token { token }))?;
            let me: serde_json::Value = remote.get("/api/userinfo").await.map_err(refused_token)?;
            Login {
                user: me["username"].as_str().unwrap_or_default().to_string(),
                ..remote.login
            }
        }
        None => {
            let username = args.username.clone().unwrap_or_else(super::login_name);
            let password = match args.password.clone() {
                Some(p) => p,
                None => read_password()?,
            };
            let remote = Remote::new(&server, base(Credentials::Token { token: String::new() }))?;
            let (user, credentials) = remote.password_login(&username, &password).await?;
            Login {
                user,
                credentials,
                ..remote.login
            }
        }
    };
    let mut sessions = Sessions::load()?;
    let user = login.user.clone();
    sessions.servers.insert(server.clone(), login);
    sessions.current = Some(server.clone());
    sessions.save()?;
    outln!("logged in to {server} as {user}");
    Ok(ExitCode::SUCCESS)
}

/// A token the server refuses is one to replace, not a session to renew.
fn refused_token(err: RemoteError) -> anyhow::Error {
    match err {
        RemoteError::Expired { server } => {
            anyhow::anyhow!("{server} refused the token: it is wrong, expired or revoked")
        }
        other => other.into(),
    }
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

/// `capstan logout [SERVER]`: end the session on the server (a password login's), forget it.
pub async fn logout(args: LogoutArgs) -> anyhow::Result<ExitCode> {
    let mut sessions = Sessions::load()?;
    let server = match args
        .server
        .as_deref()
        .map(normalize)
        .or_else(|| sessions.current.clone())
    {
        Some(s) => s,
        None => bail!("not logged in to any server"),
    };
    let Some(login) = sessions.servers.remove(&server) else {
        bail!("not logged in to {server}");
    };
    if matches!(login.credentials, Credentials::Session { .. }) {
        // The cookie stops working everywhere, not only here; an unreachable server is only a warning.
        let remote = Remote::new(&server, login)?;
        if let Err(err) = remote
            .call::<serde_json::Value>(capstan_http::Method::DELETE, "/api/session", None::<&()>)
            .await
        {
            eprintln!("warning: the server did not end the session: {err}");
        }
    }
    if sessions.current.as_deref() == Some(server.as_str()) {
        sessions.current = None;
    }
    sessions.save()?;
    outln!("logged out of {server}");
    Ok(ExitCode::SUCCESS)
}

/// `capstan context [SERVER | --none]`.
pub async fn context(args: ContextArgs) -> anyhow::Result<ExitCode> {
    let mut sessions = Sessions::load()?;
    if args.none {
        sessions.current = None;
        sessions.save()?;
        outln!("commands use the kubeconfig");
        return Ok(ExitCode::SUCCESS);
    }
    match args.server.as_deref().map(normalize) {
        Some(server) => {
            if !sessions.servers.contains_key(&server) {
                bail!("not logged in to {server}: run `capstan login {server}`");
            }
            sessions.current = Some(server.clone());
            sessions.save()?;
            outln!("commands go to {server}");
        }
        None => {
            let mut rows = vec![vec!["CURRENT".into(), "SERVER".into(), "USER".into(), "LOGIN".into()]];
            for (server, login) in &sessions.servers {
                rows.push(vec![
                    if sessions.current.as_deref() == Some(server.as_str()) {
                        "*".into()
                    } else {
                        String::new()
                    },
                    server.clone(),
                    login.user.clone(),
                    match login.credentials {
                        Credentials::Token { .. } => "token".into(),
                        Credentials::Session { .. } => "password".into(),
                    },
                ]);
            }
            crate::commands::app::print_table(&rows);
        }
    }
    Ok(ExitCode::SUCCESS)
}
