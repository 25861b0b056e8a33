//! The `oidc.config` document of `capstan-secret`: parsing and checking it, and what the flow derives
//! from it (redirect URI, scopes). Pure: no I/O, no server state.

use serde::Deserialize;

/// Key of the SSO configuration in `capstan-secret`.
pub const CONFIG_KEY: &str = "oidc.config";
/// Path of the callback; the redirect URI registered at the provider is `url` + this.
pub const CALLBACK_PATH: &str = "/auth/callback";

/// Why `oidc.config` (or a URL the provider announces) cannot be used; every message names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The document is not UTF-8.
    #[error("{key}: not UTF-8", key = CONFIG_KEY)]
    NotUtf8(#[source] std::str::Utf8Error),
    /// The document is not the expected YAML.
    #[error("{key}: {0}", key = CONFIG_KEY)]
    Yaml(#[source] serde_saphyr::Error),
    /// `clientID` is empty.
    #[error("{key}: clientID is empty", key = CONFIG_KEY)]
    EmptyClientId,
    /// A URL neither `https://` nor loopback `http://`.
    #[error("{key}: {field} {url:?} {why}", key = CONFIG_KEY)]
    InsecureUrl {
        /// The field (or discovery entry) holding it.
        field: String,
        /// The URL.
        url: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// `rootCA` is not PEM, holds no certificate, or some of its certificates cannot be used.
    #[error("{key}: rootCA: {0}", key = CONFIG_KEY)]
    RootCa(#[source] capstan_http::TlsError),
}

/// The `oidc.config` document.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OidcConfig {
    /// Label of the login button ("Log in with NAME").
    #[serde(default = "default_name")]
    pub name: String,
    /// The provider's issuer URL (its discovery document is at `ISSUER/.well-known/openid-configuration`).
    pub issuer: String,
    /// The client id registered at the provider.
    #[serde(rename = "clientID")]
    pub client_id: String,
    /// The client secret (empty for a public client).
    #[serde(default)]
    pub client_secret: String,
    /// Capstan's external URL as browsers reach it; the redirect URI is `URL/auth/callback`.
    pub url: String,
    /// Scopes requested (`openid` is always added).
    #[serde(default = "default_scopes")]
    pub requested_scopes: Vec<String>,
    /// The claim naming the user (default `email`, then `sub` when the token has no email).
    #[serde(default)]
    pub username_claim: Option<String>,
    /// The claim listing the user's groups.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// PEM certificates trusted for the provider besides the system's roots.
    #[serde(default, rename = "rootCA")]
    pub root_ca: Option<String>,
}

fn default_name() -> String {
    "SSO".into()
}

fn default_scopes() -> Vec<String> {
    ["openid", "profile", "email", "groups"].map(String::from).to_vec()
}

fn default_groups_claim() -> String {
    "groups".into()
}

impl OidcConfig {
    /// Parse and check `oidc.config`; errors name the key and what is wrong.
    pub fn parse(text: &[u8]) -> Result<OidcConfig, ConfigError> {
        let text = std::str::from_utf8(text).map_err(ConfigError::NotUtf8)?;
        let config: OidcConfig = serde_saphyr::from_str(text).map_err(ConfigError::Yaml)?;
        check_url("issuer", &config.issuer)?;
        check_url("url", &config.url)?;
        if config.client_id.is_empty() {
            return Err(ConfigError::EmptyClientId);
        }
        Ok(config)
    }

    /// The redirect URI registered at the provider.
    pub fn redirect_uri(&self) -> String {
        format!("{}{CALLBACK_PATH}", self.url.trim_end_matches('/'))
    }

    /// The scopes requested, `openid` first and once.
    pub fn scopes(&self) -> String {
        let mut scopes = vec!["openid".to_string()];
        scopes.extend(self.requested_scopes.iter().filter(|s| *s != "openid").cloned());
        scopes.join(" ")
    }
}

/// `https://` anywhere, `http://` only on loopback (a provider reached in clear text could hand out
/// any identity).
pub fn check_url(field: &str, url: &str) -> Result<(), ConfigError> {
    let bad = |why: &'static str| {
        Err(ConfigError::InsecureUrl {
            field: field.to_string(),
            url: url.to_string(),
            why,
        })
    };
    if url.starts_with("https://") {
        return Ok(());
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return bad("must start with https://");
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match host.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    if matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
        Ok(())
    } else {
        bad("must use https:// (plain http:// is allowed only on loopback)")
    }
}

/// A valid configuration, for the tests of this module and of the provider.
#[cfg(test)]
pub(crate) const TEST_CONFIG: &str = "
name: Dex
issuer: https://dex.example.test/
clientID: capstan
clientSecret: s3cret
url: https://capstan.example.test/
";

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = TEST_CONFIG;

    #[test]
    fn a_configuration_parses_with_defaults() {
        let c = OidcConfig::parse(CONFIG.as_bytes()).unwrap();
        assert_eq!(c.redirect_uri(), "https://capstan.example.test/auth/callback");
        assert_eq!(c.scopes(), "openid profile email groups");
        assert_eq!(c.groups_claim, "groups");
        assert_eq!(c.username_claim, None);
    }

    #[test]
    fn bad_configurations_name_what_is_wrong() {
        let err = OidcConfig::parse(b"issuer: https://x\nclientID: c\nurl: https://y\nclientSecrt: s\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("oidc.config") && err.contains("clientSecrt"), "{err}");
        let err = OidcConfig::parse(b"issuer: http://idp.example.test\nclientID: c\nurl: https://y\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("issuer") && err.contains("https://"), "{err}");
        let err = OidcConfig::parse(b"issuer: https://x\nclientID: ''\nurl: https://y\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("clientID"), "{err}");
        assert!(
            OidcConfig::parse(b"issuer: http://127.0.0.1:5556/dex\nclientID: c\nurl: http://localhost:8080\n").is_ok()
        );
        assert!(check_url("issuer", "http://127.0.0.1.evil.test/").is_err());
        assert!(check_url("issuer", "http://localhost@evil.test/").is_err());
    }
}
