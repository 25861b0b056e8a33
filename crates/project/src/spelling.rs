//! One spelling per repository before any `sourceRepos` rule sees a URL. A glob matches text, so a
//! URL that names one repository in another spelling — `https://charts/team-a/../team-b`, a
//! percent-encoded `.` or `/`, a backslash — could match an allow entry for one repository and be
//! fetched as another. Whatever the kind of repository (Git, Helm, OCI, images), such a URL is refused
//! here, at the project check, so no caller can forget it.

/// Why `url` has more than one reading, or `None` when it has one.
pub(crate) fn ambiguous(url: &str) -> Option<&'static str> {
    // Surrounding blanks are trimmed by the normalisation, as before.
    let url = url.trim();
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("it contains whitespace or control characters");
    }
    if url.contains('\\') {
        return Some("it contains a backslash");
    }
    let lower = url.to_ascii_lowercase();
    if ["%2e", "%2f", "%5c", "%00"].iter().any(|e| lower.contains(e)) {
        return Some("it percent-encodes '.', '/', '\\' or NUL");
    }
    // The path after the authority (or after `host:` in scp-like `user@host:path`).
    let path = match url.split_once("://") {
        Some((_, rest)) => rest.split_once('/').map_or("", |(_, p)| p),
        None => url.split_once(':').map_or(url, |(_, p)| p),
    };
    let path = path.split(['?', '#']).next().unwrap_or_default();
    if path.split('/').any(|segment| segment == "." || segment == "..") {
        return Some("it has a '.' or '..' path segment");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_repository_one_spelling() {
        for bad in [
            "https://charts.example.test/team-a/../team-b",
            "https://charts.example.test/team-a/./x",
            "oci://registry.example.test/team-a/..",
            "https://charts.example.test/team-a/%2e%2e/team-b",
            "https://charts.example.test/team-a%2Fteam-b",
            "https://charts.example.test/team-a\\..\\team-b",
            "git@git.example.test:team-a/../team-b.git",
            "https://charts.example.test/team a",
        ] {
            assert!(ambiguous(bad).is_some(), "{bad}");
        }
        for good in [
            "https://charts.example.test/team-a",
            "oci://registry.example.test/team-a/charts",
            "git@git.example.test:team-a/app.git",
            "https://git.example.test/org/app..v2.git",
            "https://charts.example.test/",
        ] {
            assert_eq!(ambiguous(good), None, "{good}");
        }
    }
}
