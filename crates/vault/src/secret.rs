//! Masked strings (tokens, JWTs, secret values) and a secret read from a KV v2 engine.

use std::collections::BTreeMap;
use std::fmt;

use crate::error::VaultError;

/// A string that must never be shown: `Debug` and `Display` print `***`. Read it with
/// [`SecretString::expose`], only where it is used.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

/// One value of a secret.
pub type SecretValue = SecretString;

impl SecretString {
    /// Wrap `value`.
    pub fn new(value: impl Into<String>) -> SecretString {
        SecretString(value.into())
    }

    /// The secret text itself.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for SecretString {
    fn from(value: String) -> Self {
        SecretString(value)
    }
}

impl From<&str> for SecretString {
    fn from(value: &str) -> Self {
        SecretString(value.to_string())
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A secret read from a KV v2 engine: its keys and values (values masked in `Debug`) and the
/// version read.
#[derive(Clone, Debug)]
pub struct KvSecret {
    /// `mount/path` it was read from (for messages).
    path: String,
    data: BTreeMap<String, SecretValue>,
    version: u64,
}

impl KvSecret {
    pub(crate) fn new(path: String, data: BTreeMap<String, SecretValue>, version: u64) -> KvSecret {
        KvSecret { path, data, version }
    }

    /// The value of `key`, or [`VaultError::MissingKey`] naming the path and the key.
    pub fn get(&self, key: &str) -> Result<&SecretValue, VaultError> {
        self.data.get(key).ok_or_else(|| VaultError::MissingKey {
            path: self.path.clone(),
            key: key.to_string(),
        })
    }

    /// The keys of the secret, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.data.keys().map(String::as_str)
    }

    /// The secret's version (KV v2 metadata).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// `mount/path` it was read from.
    pub fn path(&self) -> &str {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_everywhere() {
        let s = SecretString::new("hunter2");
        assert_eq!(format!("{s} {s:?} {s:#?}"), "*** *** ***");
        let mut data = BTreeMap::new();
        data.insert("k".to_string(), s.clone());
        let secret = KvSecret::new("secret/x".into(), data, 3);
        let shown = format!("{secret:?} {secret:#?}");
        assert!(!shown.contains("hunter2") && shown.contains("secret/x"), "{shown}");
        assert_eq!(secret.get("k").map(SecretString::expose).ok(), Some("hunter2"));
        let missing = secret.get("nope").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(missing.contains("secret/x") && missing.contains("nope"), "{missing}");
    }
}
