//! Repository URLs: the one place that decides whether a string is a repository URL Capstan will
//! look at, and which spellings name the same repository.
//!
//! [`RepoUrl::parse`] refuses what has more than one reading (the security rules of
//! [docs/security.md](../../../docs/security.md), "Repository URLs") and normalises what is left
//! into an identity. Everything that compares repository URLs goes through it: webhooks and the
//! refresh after Capstan's own commits ([`RepoUrl::same_repository`]), AppProject `sourceRepos`
//! globs ([`RepoUrl::identity`] and [`normalize_pattern`], one normalisation for both sides),
//! repository credentials ([`RepoUrl::is_within`]) and the Helm chart cache (which keys by what was
//! written, see `capstan_source::chart`). What the user wrote is kept ([`RepoUrl::as_str`]): it is
//! what Git and HTTP are given and what messages show.
//!
//! # The normalisation
//!
//! Argo CD's `git.NormalizeGitURL` (used by its `SameURL`, projects and repository credentials) is
//! followed: surrounding blanks trimmed, everything lower-cased (host names are case-insensitive, and
//! so are the paths of the forges people use: GitHub, GitLab, Bitbucket, Azure DevOps), the
//! scp-like form `user@host:path` read as `ssh://user@host/path` (`git.IsSSHURL`), and no `.git`
//! suffix or trailing `/`. Capstan differs where Argo CD leaves two spellings of one address apart
//! or could join two addresses:
//! - a scheme's default port is dropped (`https://h:443/x` is `https://h/x`; 22 for ssh, 80, 9418
//!   for `git://`), and `git+ssh://`/`ssh+git://` are `ssh://`;
//! - a prefix (credentials) only matches on the same scheme, user, host and port and on whole path
//!   segments, so `https://git.example.com` never covers `https://git.example.com.evil.io/x`
//!   (Argo CD's `strings.HasPrefix` on the normalised text would);
//! - a string with more than one reading is refused rather than normalised (see [`UrlError`]).
//!
//! A server that serves two different repositories at paths differing only in case is therefore
//! not supported, as in Argo CD.
//!
//! [`RepoUrl::same_repository`] is looser than equality, as Argo CD's webhook handler
//! (`GetWebURLRegex`) is: the transport (scheme) and the user do not matter, the host, the port and
//! the path do. It only decides what to refresh; it is never used to choose credentials or to allow
//! a repository.

use std::fmt;
use std::hash::{Hash, Hasher};

/// Why a string is not a repository URL Capstan accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Empty, starting with `-` (Git would read an option), or no known form.
    #[error("not a repository URL (use https://, http://, ssh://, git@host:path, git:// or oci://)")]
    NotAUrl,
    /// A scheme Capstan does not speak.
    #[error("the scheme {0:?} is not supported (use https://, http://, ssh://, git@host:path, git:// or oci://)")]
    Scheme(String),
    /// Whitespace, control characters or a backslash anywhere.
    #[error("whitespace, control characters and backslashes are not allowed")]
    Characters,
    /// A percent-encoded letter, digit, `-`, `.`, `_`, `~`, `/`, `\` or NUL, or a `%` not followed by
    /// two hexadecimal digits: Git and the servers decode them after the rules matched the text, so
    /// `s%65cret` would be a second spelling of `secret`.
    #[error(
        "percent-encoded letters, digits, '-', '.', '_', '~', slashes, backslashes and NUL are not allowed (write the character itself)"
    )]
    PercentEncoded,
    /// `?` or `#`.
    #[error("a query (?) or fragment (#) is not allowed")]
    QueryOrFragment,
    /// `user:password@`.
    #[error("a password in the URL is not allowed; put credentials in a repository Secret")]
    Password,
    /// Anything but a plain user name before the host.
    #[error("only a user name (letters, digits, '.', '_', '-') may precede the host")]
    User,
    /// No host, or not a host name, IPv4 or bracketed IPv6 address with an optional port.
    #[error("the URL names no valid host")]
    Host,
    /// `host.`: the same host as `host`, spelled another way.
    #[error("the host may not end with a dot")]
    TrailingDot,
    /// `.`, `..` or an empty segment inside the path.
    #[error("`.`, `..` and empty path segments are not allowed")]
    Segment,
    /// scp-like `user@host:` with nothing after the colon.
    #[error("the URL names no repository path")]
    NoPath,
}

/// How a repository is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `https://`
    Https,
    /// `http://`
    Http,
    /// `ssh://`, `git+ssh://`, `ssh+git://` and scp-like `user@host:path`.
    Ssh,
    /// `git://` (the git daemon).
    Git,
    /// `file://` and absolute paths.
    File,
    /// `oci://` (Helm charts and images in an OCI registry).
    Oci,
}

impl Scheme {
    fn from_name(name: &str) -> Option<Scheme> {
        Some(match name {
            "https" => Scheme::Https,
            "http" => Scheme::Http,
            "ssh" | "git+ssh" | "ssh+git" => Scheme::Ssh,
            "git" => Scheme::Git,
            "file" => Scheme::File,
            "oci" => Scheme::Oci,
            _ => return None,
        })
    }

    /// The scheme's name in a normalised URL.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Https => "https",
            Scheme::Http => "http",
            Scheme::Ssh => "ssh",
            Scheme::Git => "git",
            Scheme::File => "file",
            Scheme::Oci => "oci",
        }
    }

    /// The port a URL of this scheme reaches without one.
    pub fn default_port(self) -> Option<u16> {
        match self {
            Scheme::Https | Scheme::Oci => Some(443),
            Scheme::Http => Some(80),
            Scheme::Ssh => Some(22),
            Scheme::Git => Some(9418),
            Scheme::File => None,
        }
    }
}

/// A repository URL that passed [`RepoUrl::parse`]: what was written, and its normalised identity.
/// Equality and hashing are on the identity.
#[derive(Debug, Clone)]
pub struct RepoUrl {
    written: String,
    scheme: Scheme,
    scp_like: bool,
    user: Option<String>,
    host: String,
    port: Option<u16>,
    explicit_default_port: bool,
    path: String,
    identity: String,
}

impl RepoUrl {
    /// Check `url` and normalise it. Surrounding blanks are trimmed; anything else that could be
    /// read two ways is refused:
    /// - empty, or starting with `-` (an option to git);
    /// - whitespace, control characters or backslashes; percent-encoded `.`, `/`, `\` or NUL;
    /// - a query or fragment;
    /// - a password, or anything but a user name, before the host (`https://allowed@evil/` is refused
    ///   only when `allowed` is not a plain name); a host that is not a host name, IPv4 or bracketed
    ///   IPv6 address with an optional port, or that ends with a dot;
    /// - `.`, `..` or empty path segments (trailing `/` excepted).
    pub fn parse(url: &str) -> Result<RepoUrl, UrlError> {
        let written = url.trim();
        if written.is_empty() || written.starts_with('-') {
            return Err(UrlError::NotAUrl);
        }
        if written
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
        {
            return Err(UrlError::Characters);
        }
        if !percent_encodings_are_unambiguous(written) {
            return Err(UrlError::PercentEncoded);
        }
        if written.contains('?') || written.contains('#') {
            return Err(UrlError::QueryOrFragment);
        }
        let form = Form::of(written).ok_or(UrlError::NotAUrl)?;
        let (scheme, authority, path) = match form {
            Form::Scheme(name, rest) => {
                let scheme =
                    Scheme::from_name(&name.to_ascii_lowercase()).ok_or_else(|| UrlError::Scheme(name.into()))?;
                if scheme == Scheme::File {
                    // Git ignores the host of a `file://` URL (`file://x/srv/r` reads `/srv/r`): only
                    // the empty host and `localhost` (RFC 8089's name for it) say what git reads.
                    let path = rest.strip_prefix("localhost").unwrap_or(rest);
                    // (An empty path is the identity of `/`, which must parse to itself.)
                    if !path.is_empty() && !path.starts_with('/') {
                        return Err(UrlError::Host);
                    }
                    (scheme, "", path)
                } else {
                    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
                    (scheme, authority, path)
                }
            }
            Form::Scp(authority, path) => (Scheme::Ssh, authority, path),
            Form::Path(path) => (Scheme::File, "", path),
        };
        let scp_like = matches!(form, Form::Scp(..));
        let (user, host) = match authority.split_once('@') {
            Some((user, _)) if user.contains(':') => return Err(UrlError::Password),
            Some((user, _)) if !is_user_name(user) => return Err(UrlError::User),
            Some((user, host)) => (Some(user.to_lowercase()), host),
            None => (None, authority),
        };
        let (host, port) = if scheme == Scheme::File {
            (String::new(), None)
        } else {
            split_host(host, !scp_like).ok_or(UrlError::Host)?
        };
        if host.ends_with('.') {
            return Err(UrlError::TrailingDot);
        }
        if scp_like && path.is_empty() {
            return Err(UrlError::NoPath);
        }
        let segments: Vec<&str> = path.trim_start_matches('/').trim_end_matches('/').split('/').collect();
        if segments
            .iter()
            .any(|s| *s == "." || *s == ".." || (s.is_empty() && segments.len() > 1))
        {
            return Err(UrlError::Segment);
        }
        let explicit_default_port = port.is_some() && port == scheme.default_port();
        let port = port.filter(|p| Some(*p) != scheme.default_port());
        let path = normalize_path(path);
        // `team/...git` loses its `.git` to become `team/..`: an identity that does not parse to
        // itself (found by the fuzzer), so such a name is refused like `..` itself.
        if path.split('/').any(|s| s == "." || s == "..") {
            return Err(UrlError::Segment);
        }
        let identity = format_identity(scheme, user.as_deref(), &host, port, &path);
        Ok(RepoUrl {
            written: written.to_string(),
            scheme,
            scp_like,
            user,
            host,
            port,
            explicit_default_port,
            path,
            identity,
        })
    }

    /// What was written (without surrounding blanks): what Git and HTTP are given, and what
    /// messages show.
    pub fn as_str(&self) -> &str {
        &self.written
    }

    /// The normalised identity, `scheme://[user@]host[:port]/path`, lower case, no default port,
    /// `.git` suffix or trailing `/`; scp-like URLs are written `ssh://user@host/path`.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// How the repository is reached.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// Whether it was written scp-like (`user@host:path`).
    pub fn is_scp_like(&self) -> bool {
        self.scp_like
    }

    /// Whether it names the scheme's default port explicitly (`https://h:443/x`).
    pub fn has_explicit_default_port(&self) -> bool {
        self.explicit_default_port
    }

    /// The user name before the host, lower case.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The host, lower case (empty for local repositories).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port, unless it is the scheme's default.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Whether `self` and `other` are the same repository, whatever the transport and the user they
    /// are reached with: same host, port and normalised path. Used to decide what a push or a commit
    /// refreshes; never to choose credentials or to allow a repository.
    pub fn same_repository(&self, other: &RepoUrl) -> bool {
        self.host == other.host && self.port == other.port && self.path == other.path
    }

    /// Whether `prefix` (a repository Secret's `url`) covers `self`: the same scheme, user, host and
    /// port, and a path equal to the prefix's or below it by whole segments.
    pub fn is_within(&self, prefix: &RepoUrl) -> bool {
        self.scheme == prefix.scheme
            && self.user == prefix.user
            && self.host == prefix.host
            && self.port == prefix.port
            && (prefix.path.is_empty()
                || self.path == prefix.path
                || self
                    .path
                    .strip_prefix(prefix.path.as_str())
                    .is_some_and(|rest| rest.starts_with('/')))
    }
}

impl PartialEq for RepoUrl {
    fn eq(&self, other: &RepoUrl) -> bool {
        self.identity == other.identity
    }
}

impl Eq for RepoUrl {}

impl Hash for RepoUrl {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.identity.hash(state);
    }
}

impl fmt::Display for RepoUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}

impl std::str::FromStr for RepoUrl {
    type Err = UrlError;
    fn from_str(s: &str) -> Result<RepoUrl, UrlError> {
        RepoUrl::parse(s)
    }
}

/// The normalisation of [`RepoUrl::identity`] applied to text that need not be a URL: a
/// `sourceRepos` glob such as `git@github.com:org/*` or `*`. A URL [`RepoUrl::parse`] accepts
/// normalises to its identity, so a glob and a URL are compared in one spelling.
pub fn normalize_pattern(pattern: &str) -> String {
    let text = pattern.trim().to_lowercase();
    let Some(form) = Form::of(&text) else {
        return normalize_path(&text);
    };
    let (scheme, authority, path) = match form {
        Form::Scheme(name, rest) => match Scheme::from_name(name) {
            // `file://localhost/p` is `/p`, as `parse` reads it.
            Some(Scheme::File) => match rest.strip_prefix("localhost") {
                Some(r) if r.is_empty() || r.starts_with('/') => (Scheme::File, "", r),
                _ => (Scheme::File, "", rest),
            },
            Some(scheme) => {
                let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
                (scheme, authority, path)
            }
            None => return normalize_path(&text),
        },
        Form::Scp(authority, path) => (Scheme::Ssh, authority, path),
        Form::Path(path) => (Scheme::File, "", path),
    };
    let (user, host) = match authority.split_once('@') {
        Some((user, host)) => (Some(user), host),
        None => (None, authority),
    };
    // Drop the default port the way parse does, whatever the host part holds (a glob, say).
    let host = scheme
        .default_port()
        .and_then(|p| host.strip_suffix(&format!(":{p}")))
        .unwrap_or(host);
    format_identity(scheme, user, host, None, &normalize_path(path))
}

/// The three forms a repository URL can take, split as written.
#[derive(Debug, Clone, Copy)]
enum Form<'a> {
    /// `scheme://rest`
    Scheme(&'a str, &'a str),
    /// scp-like `[user@]host:path`: an `@` before the first `:`, no `/` before it.
    Scp(&'a str, &'a str),
    /// An absolute local path.
    Path(&'a str),
}

impl<'a> Form<'a> {
    fn of(text: &'a str) -> Option<Form<'a>> {
        if let Some((scheme, rest)) = text.split_once("://") {
            return Some(Form::Scheme(scheme, rest));
        }
        if text.starts_with('/') {
            return Some(Form::Path(text));
        }
        let (authority, path) = text.split_once(':')?;
        (authority.contains('@') && !authority.contains('/')).then_some(Form::Scp(authority, path))
    }
}

fn format_identity(scheme: Scheme, user: Option<&str>, host: &str, port: Option<u16>, path: &str) -> String {
    let mut out = format!("{}://", scheme.as_str());
    if let Some(user) = user {
        out.push_str(user);
        out.push('@');
    }
    out.push_str(host);
    if let Some(port) = port {
        out.push_str(&format!(":{port}"));
    }
    if !path.is_empty() {
        out.push('/');
        out.push_str(path);
    }
    out
}

/// Lower case, no leading or trailing `/`, no `.git` suffix (repeatedly: `x.git/` is `x`).
fn normalize_path(path: &str) -> String {
    let mut path = path.to_lowercase();
    loop {
        let trimmed = path.trim_matches('/');
        let trimmed = trimmed.strip_suffix(".git").unwrap_or(trimmed);
        if trimmed.len() == path.len() {
            return path;
        }
        path = trimmed.to_string();
    }
}

/// Whether every `%` in `text` starts an encoding that has no plain spelling: two hexadecimal digits
/// encoding neither an unreserved character (RFC 3986: letters, digits, `-`, `.`, `_`, `~`), which
/// Git and the servers decode to the character itself, nor `/`, `\` or NUL. (`%20`, `%C3%A9` stay:
/// they cannot be written otherwise in a URL.)
fn percent_encodings_are_unambiguous(text: &str) -> bool {
    let bytes = text.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) else {
                return false;
            };
            let decoded = (hi * 16 + lo) as u8;
            if decoded.is_ascii_alphanumeric() || matches!(decoded, b'-' | b'.' | b'_' | b'~' | b'/' | b'\\' | 0) {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

/// A user name as ssh accepts it in a URL.
fn is_user_name(user: &str) -> bool {
    !user.is_empty()
        && !user.starts_with('-')
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A host name, IPv4 address or bracketed IPv6 address (lower case), and its port when
/// `port_allowed` and one is given; `None` when `host` is none of these.
fn split_host(host: &str, port_allowed: bool) -> Option<(String, Option<u16>)> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (v6, tail) = rest.split_once(']')?;
        if v6.is_empty() || !v6.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return None;
        }
        let port = if tail.is_empty() {
            None
        } else {
            Some(tail.strip_prefix(':')?)
        };
        (&host[..v6.len() + 2], port)
    } else {
        let (name, port) = host.rsplit_once(':').map_or((host, None), |(n, p)| (n, Some(p)));
        let plain = !name.is_empty()
            && !name.starts_with(['-', '.'])
            && !name.contains("..")
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
        if !plain {
            return None;
        }
        (name, port)
    };
    let port = match port {
        None => None,
        Some(_) if !port_allowed => return None,
        // Digits only, and no leading zero: `h:0443` would be a second spelling of `h:443`.
        Some(p)
            if !p.is_empty()
                && p.len() <= 5
                && p.bytes().all(|b| b.is_ascii_digit())
                && (p == "0" || !p.starts_with('0')) =>
        {
            Some(p.parse().ok()?)
        }
        Some(_) => return None,
    };
    Some((name.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests;
