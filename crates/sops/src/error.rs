//! The one error type of the crate. No variant ever carries plaintext values or secret key material:
//! only field names, key paths, public recipients and format descriptions. The caller adds the file path.

/// Why a file could not be decrypted.
#[derive(Debug, thiserror::Error)]
pub enum SopsError {
    /// The age key file could not be read (the line number is given, never the line).
    #[error("age identities: line {line} is not an age X25519 identity (AGE-SECRET-KEY-1...)")]
    BadIdentity {
        /// The 1-based line number.
        line: usize,
    },
    /// The identity file holds no identity at all.
    #[error("age identities: no AGE-SECRET-KEY-1... line found")]
    NoIdentities,
    /// The file is not a SOPS file, or its `sops` metadata is not valid SOPS metadata.
    #[error("not a SOPS file: {reason}")]
    NotSops {
        /// What is wrong.
        reason: String,
    },
    /// The file's data could not be parsed in its format, or a value is not in SOPS' shape.
    #[error("malformed SOPS file: {reason}")]
    Malformed {
        /// What is wrong, and where.
        reason: String,
    },
    /// The metadata names a SOPS version this crate does not know.
    #[error("unsupported SOPS version {version:?} (only 3.x is supported)")]
    UnsupportedVersion {
        /// The version the metadata names.
        version: String,
    },
    /// The data key is only available through master keys this crate cannot use.
    #[error("the data key is only encrypted for {kinds} master keys; only age is supported")]
    UnsupportedKeyGroup {
        /// The kinds of master key found (`pgp`, `kms`, …).
        kinds: String,
    },
    /// A SOPS feature this crate does not implement.
    #[error("unsupported SOPS feature: {feature}")]
    Unsupported {
        /// The feature.
        feature: String,
    },
    /// None of the given identities decrypts the data key.
    #[error("no age identity matches the file's recipients: {}", recipients.join(", "))]
    NoMatchingKey {
        /// The age recipients the file is encrypted for.
        recipients: Vec<String>,
    },
    /// An encrypted value failed authentication (changed ciphertext, or moved to another key).
    #[error("the encrypted value at {path:?} fails authentication (tampered or moved)")]
    TamperedValue {
        /// The value's path in the document.
        path: String,
    },
    /// The encrypted MAC failed authentication (changed MAC or `lastmodified`).
    #[error("the file's MAC fails authentication (MAC or lastmodified tampered)")]
    TamperedMac,
    /// The MAC does not match the file's values.
    #[error("the file's MAC does not match its values (a value was changed, added or removed)")]
    MacMismatch,
}

pub(crate) fn not_sops(reason: impl Into<String>) -> SopsError {
    SopsError::NotSops { reason: reason.into() }
}

pub(crate) fn malformed(reason: impl Into<String>) -> SopsError {
    SopsError::Malformed { reason: reason.into() }
}
