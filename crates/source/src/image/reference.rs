//! Image repositories as users name them: `host[:port]/path` (`registry.example:5000/team/payments`),
//! checked against the distribution spec's repository name grammar before anything is asked of a
//! registry.
//!
//! The registry host is always explicit: a first component without a `.` or `:` that is not
//! `localhost` is refused rather than guessed to be Docker Hub, and a tag or digest (`app:1.0`,
//! `app@sha256:…`) is refused because a repository is watched, not one image.

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

use super::error::ImageError;
use crate::chart::oci::OciRepo;

/// One path component (distribution spec: `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`).
static COMPONENT: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$").ok());
/// A host name or IPv4 address, with an optional port.
static HOST: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]{1,5})?$")
        .ok()
});

/// The longest repository path the distribution spec allows (with the host, as Docker counts).
const MAX_NAME: usize = 255;

/// A repository of images in an OCI registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRepository {
    host: String,
    path: String,
    plain_http: bool,
    pub(crate) oci: OciRepo,
}

impl ImageRepository {
    /// Parse `host[:port]/path` (HTTPS; see [`ImageRepository::with_plain_http`]).
    pub fn parse(reference: &str) -> Result<ImageRepository, ImageError> {
        // Text with an `@` may hold credentials (`user:password@host/…`): never shown.
        let shown: String = if reference.contains('@') {
            "(not shown: it contains '@')".to_string()
        } else {
            reference.chars().take(300).collect()
        };
        let refuse = |reason: &str| ImageError::InvalidReference {
            reference: shown.clone(),
            reason: reason.to_string(),
        };
        if reference.len() > MAX_NAME {
            return Err(refuse("longer than 255 characters"));
        }
        if reference.contains("://") {
            return Err(refuse(
                "write host[:port]/path without a scheme (plainHTTP selects http)",
            ));
        }
        if reference.contains('@') {
            return Err(refuse("a repository has no digest (@sha256:…) and no credentials"));
        }
        let Some((host, path)) = reference.split_once('/') else {
            return Err(refuse("write host[:port]/path, e.g. registry.example/team/app"));
        };
        let is_host = host.contains('.') || host.contains(':') || host == "localhost";
        if !is_host {
            return Err(refuse(
                "the first component must be a registry host (with a '.' or a ':port', or localhost), e.g. docker.io/library/nginx",
            ));
        }
        if !HOST.as_ref().is_some_and(|r| r.is_match(host)) {
            return Err(refuse(
                "the registry host must be a host name or IPv4 address with an optional :port",
            ));
        }
        if path.rsplit('/').next().is_some_and(|last| last.contains(':')) {
            return Err(refuse("a repository has no tag (:tag): the policy chooses the tag"));
        }
        let valid = |c: &str| COMPONENT.as_ref().is_some_and(|r| r.is_match(c));
        if !path.split('/').all(valid) {
            return Err(refuse(
                "path components must be lower-case letters and digits separated by '.', '_', '__' or '-'",
            ));
        }
        ImageRepository::build(host, path, false).map_err(|_| refuse("not a valid registry address"))
    }

    /// The same repository over plain HTTP (`true`) or HTTPS.
    pub fn with_plain_http(self, plain_http: bool) -> ImageRepository {
        match ImageRepository::build(&self.host, &self.path, plain_http) {
            Ok(repo) => repo,
            Err(_) => self,
        }
    }

    fn build(host: &str, path: &str, plain_http: bool) -> Result<ImageRepository, crate::ChartError> {
        Ok(ImageRepository {
            oci: OciRepo::new(host, path.to_string(), plain_http)?,
            host: host.to_string(),
            path: path.to_string(),
            plain_http,
        })
    }

    /// `host[:port]`.
    pub fn registry(&self) -> &str {
        &self.host
    }

    /// The repository path in the registry (`team/payments`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether the registry is spoken to over plain HTTP.
    pub fn plain_http(&self) -> bool {
        self.plain_http
    }
}

impl fmt::Display for ImageRepository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.host, self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted() {
        let r = ImageRepository::parse("registry.example:5000/team/payments").expect("valid");
        assert_eq!((r.registry(), r.path()), ("registry.example:5000", "team/payments"));
        assert_eq!(r.oci.base, "https://registry.example:5000");
        assert_eq!(r.to_string(), "registry.example:5000/team/payments");
        let r = r.with_plain_http(true);
        assert_eq!(r.oci.base, "http://registry.example:5000");
        for ok in [
            "localhost/app",
            "127.0.0.1:5000/a/b-c/d__e/f.g",
            "ghcr.io/o/x--y",
            "docker.io/library/nginx",
        ] {
            assert!(ImageRepository::parse(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refused() {
        for bad in [
            "nginx",
            "library/nginx",
            "reg.example/Team/app",
            "reg.example/app:1.0",
            "reg.example/app@sha256:abcd",
            "user:pw@reg.example/app",
            "https://reg.example/app",
            "reg.example/",
            "reg.example//app",
            "reg.example/app/",
            "reg.example/-app",
            "reg.example/a..b",
            "reg.example/../x",
            "reg example/x",
            "reg.example:port/x",
        ] {
            let err = ImageRepository::parse(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(!err.is_empty() && !err.contains("pw@"), "{bad}: {err}");
        }
        let long = format!("reg.example/{}", "a".repeat(300));
        assert!(ImageRepository::parse(&long).is_err());
    }
}
