//! Where `capstan login` keeps what it got from each server: `sessions.json` in
//! `$CAPSTAN_CONFIG_DIR`, else `$XDG_CONFIG_HOME/capstan`, else `~/.config/capstan`. The
//! directory is created with mode 0700 and the file written with mode 0600 (through a temporary
//! file renamed over it), since it holds session cookies and API tokens.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How the CLI proves who it is to one server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Credentials {
    /// An API token (`capstan account generate-token`), sent as a bearer token.
    Token {
        /// The token.
        token: String,
    },
    /// A password login's session cookie and the CSRF token that goes with it.
    Session {
        /// `NAME=VALUE` of the session cookie.
        cookie: String,
        /// The CSRF token writes carry.
        csrf: String,
    },
}

/// One server the user logged in to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Login {
    /// Who the server said the user is.
    pub user: String,
    /// The credentials.
    pub credentials: Credentials,
    /// Certificates are not verified (`--insecure-skip-tls-verify`).
    #[serde(default)]
    pub insecure: bool,
    /// PEM of the CA certificates trusted for this server besides the system's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_pem: Option<String>,
}

/// Every login, by server URL, and the one in use.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Sessions {
    /// The server commands go to (`capstan context` switches it); none: the kubeconfig is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    /// Logins by server URL.
    #[serde(default)]
    pub servers: BTreeMap<String, Login>,
}

/// Why the sessions file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    /// Reading or writing it.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// It is not what `capstan login` writes.
    #[error("{path} is not a sessions file ({source}): remove it and log in again")]
    Format {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: serde_json::Error,
    },
}

/// The configuration directory.
pub fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CAPSTAN_CONFIG_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(d).join("capstan");
    }
    PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/".into()))
        .join(".config")
        .join("capstan")
}

fn file() -> PathBuf {
    dir().join("sessions.json")
}

/// A server URL as sessions are keyed: scheme, host and port, no trailing slash.
pub fn normalize(server: &str) -> String {
    let s = server.trim().trim_end_matches('/');
    if s.contains("://") {
        s.to_string()
    } else {
        format!("https://{s}")
    }
}

impl Sessions {
    /// The file's sessions (none when it does not exist).
    pub fn load() -> Result<Sessions, SessionsError> {
        let path = file();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| SessionsError::Format {
                path: path.display().to_string(),
                source,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Sessions::default()),
            Err(source) => Err(SessionsError::Io {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    /// Write the file (mode 0600, in a directory of mode 0700).
    pub fn save(&self) -> Result<(), SessionsError> {
        let path = file();
        let io = |source| SessionsError::Io {
            path: path.display().to_string(),
            source,
        };
        let dir = dir();
        std::fs::create_dir_all(&dir).map_err(io)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
        let text = serde_json::to_vec_pretty(self).unwrap_or_default();
        let temp = dir.join(format!(".sessions.{}.tmp", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)
            .map_err(io)?;
        f.write_all(&text).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&temp, &path).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_written_for_the_user_only() {
        let home = tempfile::tempdir().expect("dir");
        // SAFETY: this unit test is the only one in this binary touching the variable.
        unsafe { std::env::set_var("CAPSTAN_CONFIG_DIR", home.path().join("cfg")) };
        let mut s = Sessions::load().expect("none yet");
        assert_eq!(s, Sessions::default());
        s.current = Some(normalize("capstan.example:8443/"));
        s.servers.insert(
            "https://capstan.example:8443".into(),
            Login {
                user: "dev".into(),
                credentials: Credentials::Token {
                    token: "cst_x.y".into(),
                },
                insecure: false,
                ca_pem: None,
            },
        );
        s.save().expect("saved");
        let mode = std::fs::metadata(home.path().join("cfg/sessions.json"))
            .expect("file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let dmode = std::fs::metadata(home.path().join("cfg"))
            .expect("dir")
            .permissions()
            .mode();
        assert_eq!(dmode & 0o777, 0o700);
        assert_eq!(Sessions::load().expect("read back"), s);
        assert_eq!(s.current.as_deref(), Some("https://capstan.example:8443"));
    }
}
