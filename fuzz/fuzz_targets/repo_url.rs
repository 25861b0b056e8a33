//! Repository URLs: any string through `RepoUrl::parse` (the one check and normalisation) and
//! Capstan's Git URL check. Must never panic; what parses normalises idempotently (its identity
//! parses to the same identity, and a glob normalises the way the URL does); nothing accepted starts
//! with `-` (an option to git), holds `..` segments, `?`, `#`, whitespace, a password, a
//! percent-encoding of a character that has a plain spelling or a `file://` host; and Git's
//! check accepts nothing local unless local repositories are on.
#![no_main]

use capstan_api::repo_url::{RepoUrl, normalize_pattern};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(url) = std::str::from_utf8(data) else { return };
    if let Ok(parsed) = RepoUrl::parse(url) {
        let written = parsed.as_str();
        assert!(!written.starts_with('-'), "{url:?}");
        assert!(!written.contains('?') && !written.contains('#'), "{url:?}");
        assert!(!written.chars().any(char::is_whitespace), "{url:?}");
        assert!(!written.split('/').any(|s| s == ".." || s == "."), "{url:?}");
        // No second spelling through percent-encoding: every `%` encodes something that has no
        // plain spelling (never a letter, digit, `-._~`, `/`, `\` or NUL).
        let bytes = written.as_bytes();
        for (i, _) in bytes.iter().enumerate().filter(|(_, b)| **b == b'%') {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3).unwrap_or_default()).unwrap_or_default();
            let decoded = u8::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("{url:?}: a bare %"));
            assert!(
                !(decoded.is_ascii_alphanumeric() || b"-._~/\\\0".contains(&decoded)),
                "{url:?}: %{hex} has a plain spelling"
            );
        }
        if let Some(rest) = written.strip_prefix("file://") {
            // Git ignores a file:// host: only none (or `localhost`) has one reading.
            let rest = rest.strip_prefix("localhost").unwrap_or(rest);
            assert!(rest.is_empty() || rest.starts_with('/'), "{url:?}: a file:// URL with a host");
        }
        // Normalisation is idempotent: the identity is a URL with the same identity.
        let again = RepoUrl::parse(parsed.identity()).unwrap_or_else(|e| panic!("{url:?} → {:?}: {e}", parsed.identity()));
        assert_eq!(again.identity(), parsed.identity(), "{url:?}");
        assert!(again == parsed && again.same_repository(&parsed), "{url:?}");
        assert!(parsed.is_within(&parsed), "{url:?}");
        assert_eq!(normalize_pattern(url), parsed.identity(), "{url:?}");
        // The host is never hidden: what precedes it is a user name, never a password.
        if let Some(user) = parsed.user() {
            assert!(!user.contains(':') && !user.contains('@'), "{url:?}");
        }
        assert!(!parsed.host().contains(['@', '/']), "{url:?}");
    }
    let strict = capstan_source::check_url(url, false);
    let _ = capstan_source::check_url(url, true);
    if let Ok(checked) = strict {
        assert!(RepoUrl::parse(url).is_ok(), "{url:?}");
        assert_eq!(checked.as_str(), url, "{url:?}");
        assert!(!url.starts_with("file://") && !url.starts_with('/'), "{url:?}");
    }
    let _ = capstan_source::redact(url, &["secret-value"]);
});
