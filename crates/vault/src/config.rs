//! Where the secret store is and how Capstan authenticates to it.

use std::time::Duration;

use crate::secret::SecretString;

/// The mount of the Kubernetes auth method unless another is named.
pub const DEFAULT_KUBERNETES_MOUNT: &str = "kubernetes";
/// Default limit on establishing a connection (TCP and TLS handshake).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default limit on one whole request, answer body included.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// A secret store: its address, an optional private CA and the way to log in. OpenBao/Vault
/// namespaces are not supported.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// `http://` or `https://` URL of the server, e.g. `https://bao.example:8200`.
    pub address: String,
    /// PEM of CA certificates trusted in addition to the system's, for an `https://` address.
    pub ca_pem: Option<String>,
    /// How to authenticate.
    pub auth: Auth,
    /// Limit on establishing a connection.
    pub connect_timeout: Duration,
    /// Limit on one whole request (connecting, sending, reading the answer).
    pub request_timeout: Duration,
}

impl StoreConfig {
    /// A store at `address`, with the default timeouts and no private CA.
    pub fn new(address: impl Into<String>, auth: Auth) -> StoreConfig {
        StoreConfig {
            address: address.into(),
            ca_pem: None,
            auth,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// Trust the CA certificates in `pem` as well.
    pub fn with_ca_pem(mut self, pem: impl Into<String>) -> StoreConfig {
        self.ca_pem = Some(pem.into());
        self
    }
}

/// How to authenticate to the store.
#[derive(Clone, Debug)]
pub enum Auth {
    /// A client token, sent as `X-Vault-Token`.
    Token(SecretString),
    /// Kubernetes auth: `POST /v1/auth/{mount}/login` with `role` and a service-account `jwt`, which
    /// the store reviews against the API server (TokenReview) before issuing a client token.
    Kubernetes {
        /// Mount of the auth method (`kubernetes` by default).
        mount: String,
        /// Role configured in the auth method.
        role: String,
        /// The service account's token.
        jwt: SecretString,
    },
}

impl Auth {
    /// Token auth.
    pub fn token(token: impl Into<SecretString>) -> Auth {
        Auth::Token(token.into())
    }

    /// Kubernetes auth on the default mount (`kubernetes`).
    pub fn kubernetes(role: impl Into<String>, jwt: impl Into<SecretString>) -> Auth {
        Auth::Kubernetes {
            mount: DEFAULT_KUBERNETES_MOUNT.to_string(),
            role: role.into(),
            jwt: jwt.into(),
        }
    }
}
