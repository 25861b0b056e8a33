//! The shapes Kubernetes requires of names (one owner for every crate that checks a name before it
//! reaches an API server or a header): DNS-1123 labels (namespaces, Services) and subdomains
//! (most object names, ServiceAccounts among them).

/// Whether `name` is a DNS-1123 label: at most 63 lower-case letters, digits and `-`, starting and
/// ending with a letter or digit (what Kubernetes requires of a namespace's name).
pub fn is_dns1123_label(name: &str) -> bool {
    name.len() <= 63
        && !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Whether `name` is a DNS-1123 subdomain: at most 253 characters of `.`-separated labels (what
/// Kubernetes requires of most objects' names).
pub fn is_dns1123_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert!(is_dns1123_label("team-a"));
        assert!(is_dns1123_label("a1"));
        assert!(!is_dns1123_label(""));
        assert!(!is_dns1123_label("Team"));
        assert!(!is_dns1123_label("a.b"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_label(&"a".repeat(63)));
    }

    #[test]
    fn subdomains() {
        assert!(is_dns1123_subdomain("web-staging"));
        assert!(is_dns1123_subdomain("a.b-c.d"));
        assert!(!is_dns1123_subdomain("Web"));
        assert!(!is_dns1123_subdomain("a_b"));
        assert!(!is_dns1123_subdomain("-a"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(!is_dns1123_subdomain("a:b"));
        assert!(!is_dns1123_subdomain(""));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
    }
}
