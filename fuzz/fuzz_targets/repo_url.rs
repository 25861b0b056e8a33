//! Repository URLs: any string through Capstan's URL check. Must never panic, and anything it
//! accepts never starts with `-` (an option to git), never holds `..` segments, `?`, `#`, whitespace
//! or a password in an http(s) URL, and is never local unless local repositories are on.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(url) = std::str::from_utf8(data) else { return };
    let strict = capstan_source::check_url(url, false).is_ok();
    let _ = capstan_source::check_url(url, true);
    if strict {
        assert!(!url.starts_with('-'), "{url:?}");
        assert!(!url.starts_with("file://") && !url.starts_with('/'), "{url:?}");
        assert!(!url.contains('?') && !url.contains('#'), "{url:?}");
        assert!(!url.chars().any(char::is_whitespace), "{url:?}");
        assert!(!url.split('/').any(|s| s == ".."), "{url:?}");
        if let Some(rest) = url
            .strip_prefix("https://")
            .or(url.strip_prefix("http://"))
            .or(url.strip_prefix("git://"))
        {
            let authority = rest.split('/').next().unwrap_or_default();
            // A user name alone may precede the host; a password never.
            if let Some((user, _)) = authority.split_once('@') {
                assert!(!user.contains(':'), "{url:?}");
            }
        }
    }
    let _ = capstan_source::redact(url, &["secret-value"]);
});
