use super::*;

fn url(s: &str) -> RepoUrl {
    match RepoUrl::parse(s) {
        Ok(u) => u,
        Err(e) => panic!("{s:?}: {e}"),
    }
}

#[test]
fn spellings_of_one_address_are_equal() {
    for (a, b) in [
        ("https://github.com/acme/deploy", "https://github.com/acme/deploy.git"),
        ("https://github.com/acme/deploy", "https://github.com/acme/deploy/"),
        ("https://github.com/acme/deploy", "https://github.com/acme/deploy.git/"),
        ("https://github.com/acme/deploy", "HTTPS://GitHub.com/Acme/Deploy.git"),
        ("https://github.com/acme/deploy", "  https://github.com/acme/deploy\n"),
        ("https://github.com/acme/deploy", "https://github.com:443/acme/deploy"),
        ("http://h/x", "http://h:80/x"),
        ("git://127.0.0.1/site", "git://127.0.0.1:9418/site"),
        ("git@github.com:acme/deploy.git", "ssh://git@github.com/acme/deploy"),
        (
            "git@github.com:acme/deploy.git",
            "ssh://git@github.com:22/acme/deploy.git",
        ),
        ("git@github.com:acme/deploy.git", "git+ssh://git@github.com/acme/deploy"),
        ("git@github.com:acme/deploy.git", "ssh+git://GIT@GitHub.com/acme/deploy"),
        ("ssh://git@[::1]:22/r", "ssh://git@[::1]/r.git"),
        ("oci://registry.example/charts", "oci://registry.example:443/charts/"),
        ("file:///tmp/r", "/tmp/r"),
    ] {
        assert_eq!(url(a), url(b), "{a} = {b}");
        assert!(url(a).same_repository(&url(b)), "{a} ~ {b}");
    }
}

#[test]
fn the_same_repository_over_another_transport_or_as_another_user() {
    let want = url("https://github.com/acme/deploy");
    for same in [
        "git@github.com:acme/deploy.git",
        "ssh://git@github.com/acme/deploy",
        "http://github.com/acme/deploy/",
        "git://github.com/acme/deploy.git",
        "https://x-access-token@github.com/acme/deploy",
        "https://ops@github.com/acme/deploy.git",
    ] {
        assert!(want.same_repository(&url(same)), "{same}");
        assert!(url(same).same_repository(&want), "{same}");
        assert_ne!(want, url(same), "{same}: another address");
    }
}

#[test]
fn other_hosts_ports_and_paths_are_other_repositories() {
    let want = url("https://github.com/acme/deploy");
    for other in [
        "https://github.com/acme/deploy-staging",
        "https://github.com/acme/deploy/sub",
        "https://github.com/acme2/deploy",
        "https://github.com/acme",
        "https://gitlab.com/acme/deploy",
        "https://github.com.evil.io/acme/deploy",
        "https://github.com:8443/acme/deploy",
        "git@github.com:acme/deploy2.git",
        "ssh://git@github.com:2222/acme/deploy",
        "https://github.com/acme/deploy.git.git2",
    ] {
        let other = url(other);
        assert!(!want.same_repository(&other), "{other}");
        assert_ne!(want, other, "{other}");
    }
    // Different users are different addresses (credentials and projects tell them apart).
    assert_ne!(url("ssh://alice@h/r"), url("ssh://bob@h/r"));
    assert_ne!(url("https://h/r"), url("http://h/r"));
    // A user name before the host does not hide the host.
    assert_eq!(url("https://allowed.example@evil.example/r").host(), "evil.example");
    assert_eq!(
        url("https://allowed.example/x@evil.example/r").host(),
        "allowed.example"
    );
}

#[test]
fn what_was_written_is_kept() {
    let u = url("  HTTPS://GitHub.com:443/Acme/Deploy.git/ ");
    assert_eq!(u.as_str(), "HTTPS://GitHub.com:443/Acme/Deploy.git/");
    assert_eq!(u.to_string(), u.as_str());
    assert_eq!(u.identity(), "https://github.com/acme/deploy");
    assert!(u.has_explicit_default_port());
    assert_eq!(url("git@h:org/r.git").identity(), "ssh://git@h/org/r");
    assert!(url("git@h:org/r.git").is_scp_like());
    assert_eq!(url("ssh://git@h:2222/r").identity(), "ssh://git@h:2222/r");
    assert_eq!(url("ssh://git@h:2222/r").port(), Some(2222));
    assert_eq!(
        url("https://charts.example.test/").identity(),
        "https://charts.example.test"
    );
}

#[test]
fn the_identity_parses_to_itself() {
    for s in [
        "HTTPS://GitHub.com:443/Acme/Deploy.git/",
        "git@h:org/r.git",
        "ssh://git@[::1]:2222/r",
        "git://127.0.0.1:9419/site",
        "file:///tmp/r",
        "/tmp/r",
        "oci://registry.example/charts",
        "https://org@dev.azure.com/org/proj/_git/repo",
        "https://git.example.test/org/app..v2.git",
        "ssh://git@h:0/r",
    ] {
        let once = url(s);
        let again = url(once.identity());
        assert_eq!(once.identity(), again.identity(), "{s}");
        assert_eq!(normalize_pattern(s), once.identity(), "{s}: pattern and URL agree");
    }
}

#[test]
fn spellings_with_more_than_one_reading_are_refused() {
    for (bad, why) in [
        ("", UrlError::NotAUrl),
        ("--upload-pack=evil", UrlError::NotAUrl),
        ("r.git", UrlError::NotAUrl),
        ("ftp://h/r", UrlError::Scheme("ftp".into())),
        ("https://git.example/team-b/../team-a/secret.git", UrlError::Segment),
        ("https://git.example/team-b/./r.git", UrlError::Segment),
        ("https://git.example/team-b//r.git", UrlError::Segment),
        ("oci://registry.example.test/team-a/..", UrlError::Segment),
        ("git@git.example.test:team-a/../team-b.git", UrlError::Segment),
        // Found by the fuzzer: the `.git` suffix removed, these would name `.` and `..`.
        ("/..git", UrlError::Segment),
        ("https://git.example/team/...git", UrlError::Segment),
        (
            "https://git.example/team-b/%2e%2e/team-a/r.git",
            UrlError::PercentEncoded,
        ),
        (
            "https://git.example/team-b%2F..%2fteam-a/r.git",
            UrlError::PercentEncoded,
        ),
        ("https://git.example/r%00", UrlError::PercentEncoded),
        ("https://git.example/r%5c", UrlError::PercentEncoded),
        // An encoded letter is a second spelling git and servers decode: `s%65cret` is `secret`.
        ("ssh://git@github.com/org/s%65cret", UrlError::PercentEncoded),
        ("git@github.com:org/S%45CRET.git", UrlError::PercentEncoded),
        ("https://git.example/%7eteam/r", UrlError::PercentEncoded),
        ("https://git.example/r%", UrlError::PercentEncoded),
        ("https://git.example/r%zz", UrlError::PercentEncoded),
        // Git ignores the host of a file:// URL: `file://x/srv/r` reads `/srv/r`.
        ("file://anything/srv/git/r.git", UrlError::Host),
        (
            "https://git.example/team-b/r.git?x=/../../team-a",
            UrlError::QueryOrFragment,
        ),
        ("https://git.example/team-b/r.git#frag", UrlError::QueryOrFragment),
        ("https://user:pw@git.example/team-b/r.git", UrlError::Password),
        ("ssh://-oProxyCommand=touch@h/r", UrlError::User),
        ("https://git.example./team-b/r.git", UrlError::TrailingDot),
        ("https://git.example/r.git\\..\\x", UrlError::Characters),
        ("https://git.example/r .git", UrlError::Characters),
        ("https://git.example/r\u{0}", UrlError::Characters),
        ("https:///r.git", UrlError::Host),
        ("https://h..evil/r", UrlError::Host),
        ("https://[zz]/r", UrlError::Host),
        ("https://h:99999999/r", UrlError::Host),
        ("https://h:99999/r", UrlError::Host),
        ("https://h:0443/r", UrlError::Host),
        ("git@-h:r", UrlError::Host),
        ("git@h:", UrlError::NoPath),
        ("./x@h:r", UrlError::NotAUrl),
        ("a/b@host:r", UrlError::NotAUrl),
    ] {
        assert_eq!(RepoUrl::parse(bad).err(), Some(why), "{bad:?}");
    }
}

#[test]
fn encodings_without_a_plain_spelling_are_kept() {
    // A space or a non-ASCII letter can only be written encoded (Azure DevOps project names).
    let spaced = url("https://dev.azure.example/org/My%20Project/_git/repo");
    assert_eq!(spaced.as_str(), "https://dev.azure.example/org/My%20Project/_git/repo");
    assert!(spaced.same_repository(&url("https://dev.azure.example/org/my%20project/_git/repo")));
    assert!(!spaced.same_repository(&url("https://dev.azure.example/org/My%21Project/_git/repo")));
    assert_eq!(url("file:///srv/git/r.git").identity(), "file:///srv/git/r");
    assert_eq!(url("file://localhost/srv/git/r.git").identity(), "file:///srv/git/r");
    // Found by the fuzzer: a glob normalises `file://localhost` as a URL does.
    assert_eq!(
        normalize_pattern("file://localhost"),
        url("file://localhost").identity()
    );
    assert_eq!(normalize_pattern("file://localhost/srv/*"), "file:///srv/*");
    // Found by the fuzzer: the root's identity parses to itself.
    assert_eq!(url(url("/").identity()).identity(), url("/").identity());
}

#[test]
fn prefixes_cover_whole_segments_on_the_same_host_only() {
    let covers = |prefix: &str, repo: &str| url(repo).is_within(&url(prefix));
    assert!(covers("https://git.example.com", "https://git.example.com/org/app.git"));
    assert!(covers(
        "https://git.example.com/org/",
        "https://git.example.com/org/app.git"
    ));
    assert!(covers(
        "https://git.example.com/org/app.git",
        "https://git.example.com/org/app"
    ));
    assert!(covers("https://Git.Example.com/ORG", "https://git.example.com/org/app"));
    assert!(covers("git@github.com:org", "ssh://git@github.com/org/app.git"));
    assert!(covers("oci://registry.example", "oci://registry.example/team/app"));
    assert!(!covers("https://git.example.com", "https://git.example.com.evil.io/x"));
    assert!(!covers(
        "https://git.example.com/org",
        "https://git.example.com/organisation/x"
    ));
    assert!(!covers("https://git.example.com", "https://git.example.com:8443/x"));
    assert!(!covers("https://git.example.com", "http://git.example.com/x"));
    assert!(!covers("https://git.example.com", "https://someone@git.example.com/x"));
    assert!(!covers("ssh://alice@git.example.com/", "ssh://bob@git.example.com/x"));
    assert!(!covers(
        "https://git.example.com/org/app",
        "https://git.example.com/org"
    ));
}

#[test]
fn patterns_normalise_as_urls_do() {
    for (pattern, want) in [
        ("*", "*"),
        ("https://GitHub.com/org/*", "https://github.com/org/*"),
        ("https://github.com:443/org/*.git/", "https://github.com/org/*"),
        ("git@github.com:org/*", "ssh://git@github.com/org/*"),
        ("ssh://git@github.com:22/org/**", "ssh://git@github.com/org/**"),
        ("git+ssh://git@github.com/org/*", "ssh://git@github.com/org/*"),
        ("  https://github.com/org/apps.git  ", "https://github.com/org/apps"),
    ] {
        assert_eq!(normalize_pattern(pattern), want, "{pattern}");
    }
}
