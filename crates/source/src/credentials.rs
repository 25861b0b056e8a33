//! Repository credentials: HTTP basic auth (or a token as password), a private CA for `https://`,
//! and SSH keys with `known_hosts`.

use std::fmt;

/// Credentials for one repository, as read from a Secret labelled `capstan.dev/secret-type: repository`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// HTTP user name (any non-empty value with a token as password for most forges).
    pub username: Option<String>,
    /// HTTP password or token.
    pub password: Option<String>,
    /// PEM/OpenSSH private key for `ssh://` and `git@host:path` URLs.
    pub ssh_private_key: Option<String>,
    /// `known_hosts` lines the SSH server's key must match.
    pub known_hosts: Option<String>,
    /// PEM certificates trusted for `https://` besides the system's roots (a private CA).
    pub tls_ca: Option<String>,
    /// Skip TLS verification (https) or host key checking (ssh). For tests and labs only.
    pub insecure: bool,
}

impl Credentials {
    /// No credentials.
    pub fn none() -> Self {
        Self::default()
    }

    /// The secret values, for redaction.
    pub fn secrets(&self) -> Vec<&str> {
        [self.password.as_deref(), self.ssh_private_key.as_deref()]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// Whether no credential is set.
    pub fn is_empty(&self) -> bool {
        self.username.is_none() && self.password.is_none() && self.ssh_private_key.is_none()
    }
}

/// Debug never shows secrets.
impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("ssh_private_key", &self.ssh_private_key.as_ref().map(|_| "<redacted>"))
            .field("known_hosts", &self.known_hosts.is_some())
            .field("tls_ca", &self.tls_ca.is_some())
            .field("insecure", &self.insecure)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_secrets() {
        let c = Credentials {
            username: Some("bot".into()),
            password: Some("hunter2".into()),
            ssh_private_key: Some("-----BEGIN KEY-----".into()),
            ..Default::default()
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2") && !shown.contains("BEGIN KEY"), "{shown}");
        assert!(shown.contains("bot"));
        assert!(!c.is_empty() && Credentials::none().is_empty());
    }
}
