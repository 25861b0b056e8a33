//! Image repositories in OCI registries, the read side of image automation: a repository's tags
//! ([`ImageClient::tags`], following `Link` pages, bounded), the digest a tag points to
//! ([`ImageClient::digest`], `HEAD` of the manifest with a `GET` fallback) and the [`Policy`] that
//! chooses the newest tag.
//!
//! The registry client is the chart module's (`chart::oci`): the same HTTP client (`capstan-http`:
//! rustls, a repository CA, timeouts, size limits, redirects that keep credentials on their origin),
//! the same `Basic` and `Bearer` challenge answering and token reuse. Its errors are sorted here into
//! what a user acts on: unreachable, unauthorized, not found, a bad answer.

mod error;
mod policy;
mod reference;

use std::time::Duration;

use capstan_http::header::HeaderName;
use capstan_http::{Method, Response, StatusCode};

pub use error::ImageError;
pub use policy::{Choice, Order, Pick, Policy, PolicyError, Skipped};
pub use reference::ImageRepository;

use crate::chart::archive::sha256_hex;
use crate::chart::http::Http;
use crate::chart::oci::{self, AuthCache, JSON_LIMIT, NO_CREDENTIALS, Registry};
use crate::{ChartError, Credentials};

/// The manifest media types asked for and accepted: OCI index and manifest, Docker v2 manifest
/// list and manifest.
pub const MANIFEST_TYPES: [&str; 4] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// The most tags one repository may list.
pub const DEFAULT_MAX_TAGS: usize = 10_000;

const DIGEST_HEADER: HeaderName = HeaderName::from_static("docker-content-digest");

/// A client for image repositories, sharing connections and authentication tokens between calls.
pub struct ImageClient {
    http: Http,
    auth: AuthCache,
    page_size: Option<u32>,
    max_tags: usize,
}

impl ImageClient {
    /// A client whose every request must complete within `timeout`.
    pub fn new(timeout: Duration) -> ImageClient {
        ImageClient {
            http: Http::new(timeout),
            auth: AuthCache::default(),
            page_size: None,
            max_tags: DEFAULT_MAX_TAGS,
        }
    }

    /// Ask for tag lists in pages of `n` (`?n=`; registries may send fewer or ignore it — Debian's
    /// distribution 2.8 does — and by default choose).
    pub fn with_page_size(mut self, n: u32) -> ImageClient {
        self.page_size = Some(n.max(1));
        self
    }

    /// Refuse repositories with more than `max` tags (default [`DEFAULT_MAX_TAGS`]).
    pub fn with_max_tags(mut self, max: usize) -> ImageClient {
        self.max_tags = max;
        self
    }

    fn registry<'a>(&'a self, repo: &'a ImageRepository, creds: &'a Credentials) -> Registry<'a> {
        Registry {
            http: &self.http,
            creds,
            repo: &repo.oci,
            auth: &self.auth,
        }
    }

    /// Every tag of `repo`, in the registry's order (following `Link` pages, at most 50 pages and
    /// the maximum number of tags).
    pub async fn tags(&self, repo: &ImageRepository, creds: &Credentials) -> Result<Vec<String>, ImageError> {
        let tags = self
            .registry(repo, creds)
            .tags_paged(self.page_size, self.max_tags)
            .await
            .map_err(|e| classify(repo, repo.to_string(), e))?;
        tracing::debug!(repository = %repo, tags = tags.len(), "listed image tags");
        Ok(tags)
    }

    /// The digest (`sha256:…`) of the manifest (or index) `tag` points to: the `Docker-Content-Digest`
    /// of a `HEAD`, or, when the registry does not answer `HEAD` with one, of a `GET` whose body's
    /// own SHA-256 must agree.
    pub async fn digest(&self, repo: &ImageRepository, tag: &str, creds: &Credentials) -> Result<String, ImageError> {
        check_tag(tag)?;
        let at = format!("{repo}:{tag}");
        let registry = self.registry(repo, creds);
        let url = format!("{}/v2/{}/manifests/{tag}", repo.oci.base, repo.oci.repository);
        let accept = MANIFEST_TYPES.join(", ");
        match registry
            .send(Method::HEAD, &url, Some(&accept), JSON_LIMIT, "image manifest")
            .await
        {
            Ok(answer) => {
                check_media_type(repo, &answer)?;
                if let Some(digest) = header_digest(&at, &answer)? {
                    tracing::debug!(reference = %at, %digest, "image digest");
                    return Ok(digest);
                }
            }
            // Registries that refuse HEAD (405, 400 ...) are asked with GET.
            Err(ChartError::Status { status, .. })
                if ![StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN, StatusCode::NOT_FOUND]
                    .iter()
                    .any(|s| s.as_u16() == status) => {}
            Err(e) => return Err(classify(repo, at, e)),
        }
        let answer = registry
            .get(&url, Some(&accept), JSON_LIMIT, "image manifest")
            .await
            .map_err(|e| classify(repo, at.clone(), e))?;
        check_media_type(repo, &answer)?;
        let manifest: serde_json::Value = serde_json::from_slice(&answer.body).map_err(|e| ImageError::BadAnswer {
            repository: at.clone(),
            reason: format!("the manifest is not JSON: {e}"),
            source: None,
        })?;
        if manifest.get("schemaVersion").and_then(serde_json::Value::as_u64) != Some(2) {
            return Err(ImageError::BadAnswer {
                repository: at,
                reason: "the manifest is not schemaVersion 2".into(),
                source: None,
            });
        }
        let computed = format!("sha256:{}", sha256_hex(&answer.body));
        if let Some(announced) = header_digest(&at, &answer)?
            && announced != computed
        {
            return Err(ImageError::BadAnswer {
                repository: at,
                reason: format!("the manifest's SHA-256 is {computed}, the registry says {announced}"),
                source: None,
            });
        }
        tracing::debug!(reference = %at, digest = %computed, "image digest (from the manifest body)");
        Ok(computed)
    }
}

/// A tag as the distribution spec writes them.
fn check_tag(tag: &str) -> Result<(), ImageError> {
    let mut bytes = tag.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
    let rest_ok = bytes.all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if first_ok && rest_ok && tag.len() <= 128 {
        return Ok(());
    }
    Err(ImageError::InvalidReference {
        reference: tag.chars().take(130).collect(),
        reason: "a tag is 1 to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'".into(),
    })
}

/// A `Content-Type`, when sent, must be one of [`MANIFEST_TYPES`].
fn check_media_type(repo: &ImageRepository, answer: &Response) -> Result<(), ImageError> {
    match oci::media_type(answer) {
        Some(ct) if !MANIFEST_TYPES.contains(&ct.as_str()) => Err(ImageError::BadAnswer {
            repository: repo.to_string(),
            reason: format!("the manifest is of type {ct:?}, expected one of {MANIFEST_TYPES:?}"),
            source: None,
        }),
        _ => Ok(()),
    }
}

/// The `Docker-Content-Digest` header, if sent, checked to be `sha256:` and 64 lower-case hex digits.
fn header_digest(at: &str, answer: &Response) -> Result<Option<String>, ImageError> {
    let Some(value) = answer.headers.get(DIGEST_HEADER) else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(value.as_bytes()).trim().to_string();
    let valid = text
        .strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    if !valid {
        return Err(ImageError::BadDigest {
            reference: at.to_string(),
            digest: text.chars().take(100).collect(),
        });
    }
    Ok(Some(text))
}

/// Sort an HTTP/registry error into what a user acts on.
fn classify(repo: &ImageRepository, at: String, err: ChartError) -> ImageError {
    let registry = repo.registry().to_string();
    match err {
        ChartError::Unreachable { .. } | ChartError::Timeout { .. } => ImageError::Unreachable {
            registry,
            source: Box::new(err),
        },
        ChartError::Status { status: 401 | 403, .. } => ImageError::Unauthorized {
            registry,
            source: Box::new(err),
        },
        ChartError::Oci { ref detail, .. } if detail == NO_CREDENTIALS => ImageError::Unauthorized {
            registry,
            source: Box::new(err),
        },
        ChartError::Status { status: 404, .. } => ImageError::NotFound {
            repository: at,
            source: Box::new(err),
        },
        ChartError::Tls { .. } => ImageError::Tls {
            registry,
            source: Box::new(err),
        },
        other => ImageError::BadAnswer {
            repository: at,
            reason: other.to_string(),
            source: Some(Box::new(other)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_as_the_spec_writes_them() {
        for ok in ["latest", "v1.2.3", "main-20240101", "_x", "1.0_build-2"] {
            assert!(check_tag(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".x", "-x", "a/b", "a:b", "a b", &"x".repeat(129)] {
            assert!(check_tag(bad).is_err(), "{bad}");
        }
    }
}
