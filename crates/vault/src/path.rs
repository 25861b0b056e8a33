//! References to one key of a KV v2 secret: `mount/path#key`, e.g. `secret/payments#apiKey` (the
//! first segment is the engine's mount).
//!
//! Segments and the key are kept to a plain character set (ASCII letters, digits and `-_.@+=,:~`),
//! so a reference can be put into a request path as it is: no `..`, no empty segments, no `?`, `#`,
//! `%`, spaces or control characters that could steer the request elsewhere.

use std::fmt;

use crate::error::VaultError;

/// `mount/path#key`, validated.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KvPath {
    mount: String,
    path: String,
    key: String,
}

impl KvPath {
    /// Parse `mount/path/...#key`.
    pub fn parse(reference: &str) -> Result<KvPath, VaultError> {
        let bad = |reason: &str| VaultError::BadPath {
            path: reference.to_string(),
            reason: reason.to_string(),
        };
        let (location, key) = reference
            .split_once('#')
            .ok_or_else(|| bad("no key: expected mount/path#key"))?;
        if key.is_empty() {
            return Err(bad("empty key after '#'"));
        }
        check_part(key).map_err(|r| bad(&format!("key: {r}")))?;
        let (mount, path) = location
            .split_once('/')
            .ok_or_else(|| bad("expected mount/path#key: a mount and a path"))?;
        for segment in location.split('/') {
            check_segment(segment).map_err(|r| bad(&r))?;
        }
        Ok(KvPath {
            mount: mount.to_string(),
            path: path.to_string(),
            key: key.to_string(),
        })
    }

    /// The KV engine's mount (`secret`).
    pub fn mount(&self) -> &str {
        &self.mount
    }

    /// The secret's path inside the mount (`payments`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The key inside the secret (`apiKey`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// `mount/path`, as errors name it.
    pub fn location(&self) -> String {
        format!("{}/{}", self.mount, self.path)
    }

    /// The request path of a KV v2 read: `/v1/{mount}/data/{path}`.
    pub(crate) fn data_endpoint(&self) -> String {
        format!("/v1/{}/data/{}", self.mount, self.path)
    }
}

impl fmt::Display for KvPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}#{}", self.mount, self.path, self.key)
    }
}

/// One `/`-separated segment of a mount or a path.
pub(crate) fn check_segment(segment: &str) -> Result<(), String> {
    match segment {
        "" => Err("empty path segment".into()),
        "." | ".." => Err(format!("path segment {segment:?} is not allowed")),
        _ => check_part(segment),
    }
}

/// The characters a segment or key may hold.
fn check_part(part: &str) -> Result<(), String> {
    match part.chars().find(|c| !allowed(*c)) {
        None => Ok(()),
        Some(c) => Err(format!(
            "character {c:?} is not allowed (only ASCII letters, digits and -_.@+=,:~)"
        )),
    }
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_.@+=,:~".contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_path_and_key() {
        let p = KvPath::parse("secret/payments#apiKey").expect("parses");
        assert_eq!((p.mount(), p.path(), p.key()), ("secret", "payments", "apiKey"));
        assert_eq!(p.location(), "secret/payments");
        assert_eq!(p.data_endpoint(), "/v1/secret/data/payments");
        assert_eq!(p.to_string(), "secret/payments#apiKey");
        let deep = KvPath::parse("kv-prod/team.a/payments/db#tls.crt").expect("parses");
        assert_eq!(
            (deep.mount(), deep.path(), deep.key()),
            ("kv-prod", "team.a/payments/db", "tls.crt")
        );
        assert_eq!(deep.data_endpoint(), "/v1/kv-prod/data/team.a/payments/db");
    }

    #[test]
    fn hostile_references_are_refused() {
        for bad in [
            "",
            "#",
            "#k",
            "secret#k",
            "secret/#k",
            "/payments#k",
            "secret/x#",
            "secret/x",
            "secret//x#k",
            "secret/x/#k",
            "secret/../sys/seal#k",
            "../secret/x#k",
            "secret/x/..#k",
            "secret/./x#k",
            "secret/x?version=1#k",
            "secret/x#k#l",
            "secret/x#k?",
            "secret/x#a/b",
            "secret/x%2F..#k",
            "secret/pay ments#k",
            "secret/x#api key",
            "secret/x\n#k",
            "secret/x#k\n",
            "secret/x\r\nHost: evil#k",
            " secret/x#k",
            "secret\\x#k",
            "secret/xé#k",
            "secret/x#\u{0}",
        ] {
            match KvPath::parse(bad) {
                Err(VaultError::BadPath { path, reason }) => {
                    assert_eq!(path, bad);
                    assert!(!reason.is_empty());
                }
                other => panic!("{bad:?} was not refused: {other:?}"),
            }
        }
    }

    #[test]
    fn the_error_names_the_reference_and_the_reason() {
        let err = KvPath::parse("secret//x#k")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("secret//x#k") && err.contains("empty path segment"),
            "{err}"
        );
        let err = KvPath::parse("secret/x")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("no key"), "{err}");
        let err = KvPath::parse("secret/x\n#k")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            !err.contains('\n'),
            "the reference is quoted, control characters escaped: {err}"
        );
    }
}
