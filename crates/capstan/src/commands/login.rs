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
    /// Log in through the server's single sign-on provider in a browser: the browser hands the
    /// result back to a listener on a loopback port of this machine.
    #[arg(long, conflicts_with_all = ["username", "password", "token_file"])]
    sso: bool,
    /// With --sso, on a machine without a browser: open the printed URL anywhere, then paste the
    /// code the server shows.
    #[arg(long, requires = "sso")]
    paste: bool,
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
        _ if args.sso => {
            let remote = Remote::new(&server, base(Credentials::Token { token: String::new() }))?;
            let (user, credentials) = sso(&remote, args.paste).await?;
            Login {
                user,
                credentials,
                ..remote.login
            }
        }
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
                None => super::account::read_password()?,
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

/// How long the browser may take to come back.
const SSO_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// Single sign-on: the provider's login in a browser, started with this CLI's PKCE challenge; the
/// code it ends with comes back to a loopback listener (or is pasted), and is redeemed with the
/// verifier, which never leaves this process.
async fn sso(remote: &Remote, paste: bool) -> anyhow::Result<(String, Credentials)> {
    use capstan_server::auth::{oidc::cli::challenge_of, password::random_secret};
    let verifier = random_secret(32);
    let challenge = challenge_of(&verifier);
    let listener = if paste {
        None
    } else {
        Some(
            tokio::net::TcpListener::bind(("127.0.0.1", 0))
                .await
                .context("listening on a loopback port for the browser")?,
        )
    };
    let mut url = format!("{}/auth/login?cli_challenge={challenge}", remote.server);
    if let Some(l) = &listener {
        url.push_str(&format!("&cli_port={}", l.local_addr()?.port()));
    }
    eprintln!("Log in in a browser at:\n  {url}");
    let code = match listener {
        None => {
            eprint!("then paste the code it shows: ");
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .context("reading the code from stdin")?;
            line.trim().to_string()
        }
        Some(listener) => {
            if std::io::stderr().is_terminal() {
                // Best effort: a desktop opens it; elsewhere the URL above is there to copy.
                let _ = std::process::Command::new("xdg-open")
                    .arg(&url)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn();
            }
            tokio::time::timeout(SSO_WAIT, loopback_code(listener))
                .await
                .map_err(|_| anyhow::anyhow!("the browser did not come back within {} s", SSO_WAIT.as_secs()))??
        }
    };
    if code.is_empty() {
        bail!("no code");
    }
    Ok(remote.sso_login(&code, &verifier).await?)
}

/// Wait on `listener` for the browser's `GET /callback?code=…` (or `?sso_error=…`), answer it, and
/// return the code. Other requests (a favicon) get 404 and are waited past.
async fn loopback_code(listener: tokio::net::TcpListener) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        let (mut conn, _) = listener.accept().await?;
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let head = String::from_utf8_lossy(&head);
        let target = head
            .lines()
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .unwrap_or_default();
        let query = target.strip_prefix("/callback?");
        let param = |name: &str| {
            query.and_then(|q| {
                q.split('&')
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                    .map(|v| v.replace('+', " "))
            })
        };
        let (status, text, result) = match (param("code"), param("sso_error")) {
            (Some(code), _) => (
                "200 OK",
                "Logged in: you may close this tab and return to the terminal.",
                Some(Ok(code)),
            ),
            (None, Some(err)) => (
                "200 OK",
                "The login failed: see the terminal.",
                Some(Err(anyhow::anyhow!("single sign-on failed: {err}"))),
            ),
            _ => ("404 Not Found", "not here", None),
        };
        let reply = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        );
        let _ = conn.write_all(reply.as_bytes()).await;
        if let Some(result) = result {
            return result;
        }
    }
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

/// `capstan logout [SERVER]`: forget the login. The server is told (`DELETE /api/session`), but its
/// sessions are signed cookies it does not keep: the cookie stays valid until it expires, or until
/// `capstan account revoke-sessions` ends the account's sessions.
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
        // An unreachable server is only a warning: nothing on the server depends on this call.
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
                        Credentials::Session { .. } => "session".into(),
                    },
                ]);
            }
            crate::commands::app::print_table(&rows);
        }
    }
    Ok(ExitCode::SUCCESS)
}
