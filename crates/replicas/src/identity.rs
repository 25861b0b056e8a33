//! Who this replica is: `--replica-id`, else the Pod's name (`POD_NAME`), else the host name and
//! the process id. The identity names the replica's member Lease, so it must be a DNS-1123 label.

use std::fmt;

/// Prefix of a replica's member Lease's name; the rest is its identity.
pub const MEMBER_PREFIX: &str = "capstan-replica-";

/// The longest identity: the member Lease's name (`capstan-replica-` + id) must stay a label.
const MAX_LEN: usize = 63 - MEMBER_PREFIX.len();

/// Why an identity is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    /// Not a DNS-1123 label (lower-case letters, digits and `-`, starting and ending alphanumeric).
    #[error(
        "replica id {0:?} is not a DNS-1123 label of at most {MAX_LEN} characters (lower-case letters, digits and '-', starting and ending with a letter or digit)"
    )]
    Invalid(String),
}

/// A replica's identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplicaId(String);

impl ReplicaId {
    /// `id` as given (`--replica-id`), checked.
    pub fn new(id: &str) -> Result<Self, IdentityError> {
        let ok = !id.is_empty()
            && id.len() <= MAX_LEN
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !id.starts_with('-')
            && !id.ends_with('-');
        if ok {
            Ok(Self(id.to_string()))
        } else {
            Err(IdentityError::Invalid(id.to_string()))
        }
    }

    /// The identity when none is given: `POD_NAME` (the Deployment passes the Pod's name), else the
    /// host name and the process id, each made a label (lower-cased, other characters as `-`,
    /// shortened from the left so the process id stays).
    pub fn infer() -> Self {
        if let Ok(pod) = std::env::var("POD_NAME")
            && let Ok(id) = Self::new(&pod)
        {
            return id;
        }
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default();
        Self::from_host(&host, std::process::id())
    }

    /// `HOST-PID` made a label.
    fn from_host(host: &str, pid: u32) -> Self {
        let cleaned: String = host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        let suffix = format!("-{pid}");
        let keep = MAX_LEN - suffix.len();
        let host = cleaned.trim_matches('-');
        let host = &host[host.len().saturating_sub(keep)..];
        let host = host.trim_start_matches('-');
        let host = if host.is_empty() { "capstan" } else { host };
        Self(format!("{host}{suffix}"))
    }

    /// The identity as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_labels() {
        assert!(ReplicaId::new("capstan-controller-7d9f8-x2k4q").is_ok());
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(MAX_LEN + 1), "../x"] {
            assert_eq!(
                ReplicaId::new(bad),
                Err(IdentityError::Invalid(bad.to_string())),
                "{bad}"
            );
        }
    }

    #[test]
    fn host_names_become_labels_keeping_the_pid() {
        assert_eq!(ReplicaId::from_host("Build.Host_1", 42).as_str(), "build-host-1-42");
        assert_eq!(ReplicaId::from_host("", 7).as_str(), "capstan-7");
        let long = ReplicaId::from_host(&"h".repeat(300), 4_000_000);
        assert!(long.as_str().ends_with("-4000000"), "{long}");
        assert!(ReplicaId::new(long.as_str()).is_ok(), "{long}");
    }
}
