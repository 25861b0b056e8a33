//! Everything that can go wrong talking to the store. Messages name addresses, paths, keys, mounts
//! and roles; never a secret value, a token or a JWT.

/// An error from the secret store client.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// The configuration is unusable (address, CA, auth settings).
    #[error("secret store configuration: {reason}")]
    BadConfig {
        /// What is wrong.
        reason: String,
    },
    /// The store could not be reached (connection refused, DNS, TLS, timeout).
    #[error("secret store {address} unreachable: {detail}")]
    Unreachable {
        /// The store's address.
        address: String,
        /// The cause and its causes on one line.
        detail: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The store is sealed: it answers but cannot read anything until it is unsealed.
    #[error("secret store {address} is sealed")]
    Sealed {
        /// The store's address.
        address: String,
    },
    /// The token may not read the path (HTTP 403).
    #[error("permission denied reading {path} from the secret store")]
    PermissionDenied {
        /// `mount/path`.
        path: String,
    },
    /// No secret at the path, or its current version is deleted or destroyed (HTTP 404).
    #[error("secret {path} not found in the secret store")]
    NotFound {
        /// `mount/path`.
        path: String,
    },
    /// The secret exists but has no such key.
    #[error("secret {path} has no key {key:?}")]
    MissingKey {
        /// `mount/path`.
        path: String,
        /// The key asked for.
        key: String,
    },
    /// Kubernetes auth refused the login.
    #[error("login to the secret store with Kubernetes auth (mount {mount}, role {role}) failed: {reason}")]
    LoginFailed {
        /// Mount of the auth method.
        mount: String,
        /// Role asked for.
        role: String,
        /// The store's reason (its `errors`), or what was wrong with its answer.
        reason: String,
    },
    /// The store answered something this client does not understand.
    #[error("unexpected answer from the secret store: {reason}")]
    BadResponse {
        /// What was unexpected.
        reason: String,
    },
    /// A reference to a secret (`mount/path#key`) is not acceptable.
    #[error("bad secret reference {path:?}: {reason}")]
    BadPath {
        /// The reference as given.
        path: String,
        /// Why it is refused.
        reason: String,
    },
}
