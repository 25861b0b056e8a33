//! Helm charts in OCI registries (`oci://host[:port]/path`), as `helm pull oci://…` reads them: the
//! registry v2 API's tag list (for constraints; `+` in a version is `_` in a tag), the manifest asked
//! for with the OCI manifest media type, whose config must be Helm's
//! (`application/vnd.cncf.helm.config.v1+json`) and whose chart layer
//! (`application/vnd.cncf.helm.chart.content.v1.tar+gzip`) is fetched by digest and verified.
//!
//! Authentication follows the registry's challenge: `Basic` gets the repository credentials;
//! `Bearer realm=…,service=…,scope=…` gets a token from the realm (with the credentials as basic
//! auth, or anonymously), as Docker and Helm clients do. A token or basic header that worked is
//! reused for the repository until a request is refused again.
//!
//! A small client on Capstan's one HTTP client (`capstan-http`, through `chart::http`) rather than
//! the `oci-client` crate: it would bring a second HTTP stack (reqwest) with its own
//! proxy-from-environment and TLS settings, while a chart pull needs four GET requests.

use std::collections::HashMap;
use std::sync::Mutex;

use capstan_http::header::{self, HeaderValue};
use capstan_http::{Method, Response, StatusCode};
use serde::Deserialize;

use super::error::ChartError;
use super::http::{Auth, Get, Http, Origin, check_url, status_error};
use crate::Credentials;

/// The manifest media type asked for and accepted.
pub(crate) const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Helm's chart config media type.
pub(crate) const HELM_CONFIG: &str = "application/vnd.cncf.helm.config.v1+json";
/// Helm's chart layer media type (and the legacy one Helm still reads).
pub(crate) const HELM_LAYERS: [&str; 2] = [
    "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
    "application/tar+gzip",
];

pub(crate) const JSON_LIMIT: u64 = 4 << 20;
const MAX_TAG_PAGES: usize = 50;
/// The detail of the error when a registry asks for credentials and none are set.
pub(crate) const NO_CREDENTIALS: &str = "the registry requires credentials and none are set";

/// A chart's repository in a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OciRepo {
    /// `https://host:port` (or `http://` with plain HTTP).
    pub base: String,
    /// `path/chart`.
    pub repository: String,
    /// `host:port/path/chart`, for messages.
    pub shown: String,
}

/// `oci://host[:port][/path]` + chart.
pub(crate) fn parse(repo_url: &str, chart: &str, plain_http: bool) -> Result<OciRepo, ChartError> {
    let refuse = |reason: &'static str| ChartError::UnsupportedUrl {
        url: crate::redact(repo_url, &[]),
        reason: reason.into(),
    };
    let rest = repo_url
        .strip_prefix("oci://")
        .ok_or_else(|| refuse("not an oci:// URL"))?;
    let rest = rest.trim_end_matches('/');
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() || host.contains('@') {
        return Err(refuse("an oci:// URL needs a host and no credentials"));
    }
    let valid = |s: &str| {
        !s.is_empty()
            && s.split('/').all(|p| {
                !p.is_empty()
                    && p != "."
                    && p != ".."
                    && p.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
            })
    };
    if !path.is_empty() && !valid(path) {
        return Err(refuse(
            "the repository path must be lower-case letters, digits, '.', '_', '-' and '/'",
        ));
    }
    if !valid(chart) || chart.contains('/') {
        return Err(refuse(
            "the chart name must be lower-case letters, digits, '.', '_' and '-'",
        ));
    }
    let repository = if path.is_empty() {
        chart.to_string()
    } else {
        format!("{path}/{chart}")
    };
    OciRepo::new(host, repository, plain_http)
}

impl OciRepo {
    /// `repository` (already checked) on registry `host[:port]`, over HTTPS or plain HTTP.
    pub(crate) fn new(host: &str, repository: String, plain_http: bool) -> Result<OciRepo, ChartError> {
        let scheme = if plain_http { "http" } else { "https" };
        let base = format!("{scheme}://{host}");
        check_url(&format!("{base}/v2/"))?;
        Ok(OciRepo {
            shown: format!("{host}/{repository}"),
            base,
            repository,
        })
    }
}

/// A manifest's chart layer.
pub(crate) struct ChartLayer {
    /// Lower-case hex SHA-256.
    pub digest: String,
    pub size: u64,
}

/// What worked last per registry repository (`Authorization` to reuse).
#[derive(Default)]
pub(crate) struct AuthCache {
    by_repo: Mutex<HashMap<String, Auth>>,
}

impl AuthCache {
    fn get(&self, key: &str) -> Option<Auth> {
        self.lock().get(key).cloned()
    }
    fn set(&self, key: &str, auth: Auth) {
        self.lock().insert(key.to_string(), auth);
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Auth>> {
        match self.by_repo.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// A client for one chart repository in a registry.
pub(crate) struct Registry<'a> {
    pub http: &'a Http,
    pub creds: &'a Credentials,
    pub repo: &'a OciRepo,
    pub auth: &'a AuthCache,
}

#[derive(Deserialize)]
struct TagList {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    #[serde(default)]
    media_type: Option<String>,
    config: Descriptor,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    #[serde(default)]
    size: u64,
}

impl Registry<'_> {
    fn error(&self, detail: impl Into<String>) -> ChartError {
        ChartError::Oci {
            reference: self.repo.shown.clone(),
            detail: detail.into(),
        }
    }

    /// Every tag of the repository (following `Link: <…>; rel="next"` pages).
    pub(crate) async fn tags(&self) -> Result<Vec<String>, ChartError> {
        self.tags_paged(None, usize::MAX).await
    }

    /// Every tag of the repository, asking for pages of `page_size` (`n=`) when set, and refusing
    /// more than `max_tags` tags or [`MAX_TAG_PAGES`] pages. A `next` page must be on the registry's
    /// own origin (credentials go nowhere else).
    pub(crate) async fn tags_paged(&self, page_size: Option<u32>, max_tags: usize) -> Result<Vec<String>, ChartError> {
        let mut url = format!("{}/v2/{}/tags/list", self.repo.base, self.repo.repository);
        if let Some(n) = page_size {
            url.push_str(&format!("?n={n}"));
        }
        let home = Origin::of(&check_url(&url)?);
        let mut tags = Vec::new();
        for _ in 0..MAX_TAG_PAGES {
            let answer = self.get(&url, None, JSON_LIMIT, "tag list").await?;
            let list: TagList =
                serde_json::from_slice(&answer.body).map_err(|e| self.error(format!("invalid tag list: {e}")))?;
            tags.extend(list.tags.unwrap_or_default());
            if tags.len() > max_tags {
                return Err(self.error(format!("more than {max_tags} tags")));
            }
            match next_link(&answer) {
                Some(next) => {
                    url = super::http::join(&url, &next);
                    if Origin::of(&check_url(&url)?) != home {
                        return Err(self.error(format!("the next page of tags is on another server: {url}")));
                    }
                }
                None => return Ok(tags),
            }
        }
        Err(self.error(format!("more than {MAX_TAG_PAGES} pages of tags")))
    }

    /// The chart layer of `tag`'s manifest, after checking it is a Helm chart.
    pub(crate) async fn chart_layer(&self, tag: &str) -> Result<ChartLayer, ChartError> {
        let url = format!("{}/v2/{}/manifests/{tag}", self.repo.base, self.repo.repository);
        let answer = self.get(&url, Some(MANIFEST), JSON_LIMIT, "OCI manifest").await?;
        let content_type = media_type(&answer);
        let at = format!("{}:{tag}", self.repo.shown);
        let wrong = |what: &str, found: &str, expected: &str| ChartError::Oci {
            reference: at.clone(),
            detail: format!("not a Helm chart: {what} media type is {found:?}, expected {expected:?}"),
        };
        if let Some(ct) = content_type.as_deref()
            && ct != MANIFEST
        {
            return Err(wrong("manifest", ct, MANIFEST));
        }
        let manifest: Manifest = serde_json::from_slice(&answer.body).map_err(|e| ChartError::Oci {
            reference: at.clone(),
            detail: format!("invalid manifest: {e}"),
        })?;
        if let Some(mt) = manifest.media_type.as_deref()
            && mt != MANIFEST
        {
            return Err(wrong("manifest", mt, MANIFEST));
        }
        if manifest.config.media_type != HELM_CONFIG {
            return Err(wrong("config", &manifest.config.media_type, HELM_CONFIG));
        }
        let layer = manifest
            .layers
            .iter()
            .find(|l| HELM_LAYERS.contains(&l.media_type.as_str()))
            .ok_or_else(|| {
                let found: Vec<&str> = manifest.layers.iter().map(|l| l.media_type.as_str()).collect();
                ChartError::Oci {
                    reference: at.clone(),
                    detail: format!(
                        "not a Helm chart: no layer of type {:?} (layers: {found:?})",
                        HELM_LAYERS[0]
                    ),
                }
            })?;
        let digest = layer
            .digest
            .strip_prefix("sha256:")
            .filter(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| ChartError::Oci {
                reference: at.clone(),
                detail: format!("unsupported layer digest {:?} (sha256 only)", layer.digest),
            })?;
        Ok(ChartLayer {
            digest: digest.to_ascii_lowercase(),
            size: layer.size,
        })
    }

    /// The URL of a blob.
    pub(crate) fn blob_url(&self, digest: &str) -> String {
        format!("{}/v2/{}/blobs/sha256:{digest}", self.repo.base, self.repo.repository)
    }

    /// GET `url` from the registry, answering an authentication challenge once. Any status but 2xx
    /// is an error.
    pub(crate) async fn get(
        &self,
        url: &str,
        accept: Option<&str>,
        limit: u64,
        what: &'static str,
    ) -> Result<Response, ChartError> {
        self.send(Method::GET, url, accept, limit, what).await
    }

    /// [`Registry::get`] with another method (`HEAD`).
    pub(crate) async fn send(
        &self,
        method: Method,
        url: &str,
        accept: Option<&str>,
        limit: u64,
        what: &'static str,
    ) -> Result<Response, ChartError> {
        let origin = Origin::of(&check_url(url)?);
        let key = format!("{}/{}", self.repo.base, self.repo.repository);
        let mut auth = self.auth.get(&key);
        for attempt in 0..2 {
            let headers = accept
                .and_then(|a| HeaderValue::from_str(a).ok())
                .map(|v| vec![(header::ACCEPT, v)])
                .unwrap_or_default();
            let answer = self
                .http
                .send(
                    method.clone(),
                    self.creds,
                    &self.repo.base,
                    Get {
                        url,
                        headers,
                        auth: auth.as_ref().zip(origin.as_ref()),
                        limit,
                        what,
                    },
                )
                .await?;
            if answer.status.is_success() {
                if let Some(a) = auth {
                    self.auth.set(&key, a);
                }
                return Ok(answer);
            }
            if answer.status == StatusCode::UNAUTHORIZED && attempt == 0 {
                let challenge = answer
                    .headers
                    .get(header::WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                auth = Some(self.answer_challenge(challenge).await?);
                continue;
            }
            return Err(status_error(url, answer.status));
        }
        Err(status_error(url, StatusCode::UNAUTHORIZED))
    }

    async fn answer_challenge(&self, challenge: &str) -> Result<Auth, ChartError> {
        let (scheme, params) = parse_challenge(challenge);
        match scheme.to_ascii_lowercase().as_str() {
            "bearer" => self.token(&params).await,
            _ => Auth::basic(self.creds).ok_or_else(|| self.error(NO_CREDENTIALS)),
        }
    }

    /// A token from the challenge's realm.
    async fn token(&self, params: &HashMap<String, String>) -> Result<Auth, ChartError> {
        let realm = params
            .get("realm")
            .ok_or_else(|| self.error("Bearer challenge without a realm"))?;
        let mut url = realm.clone();
        let mut sep = if url.contains('?') { '&' } else { '?' };
        for key in ["service", "scope"] {
            if let Some(v) = params.get(key) {
                url.push_str(&format!("{sep}{key}={}", encode(v)));
                sep = '&';
            }
        }
        let realm_uri = check_url(&url)?;
        let origin = Origin::of(&realm_uri);
        // The registry's credentials go to a token realm on the registry's own host only: a realm
        // elsewhere (named by whoever answers as the registry) is asked for an anonymous token.
        let registry = Origin::of(&check_url(&self.repo.base)?);
        let same_host = matches!((&origin, &registry), (Some(realm), Some(registry)) if realm.same_host(registry));
        let basic = Auth::basic(self.creds).filter(|_| same_host);
        if !same_host && Auth::basic(self.creds).is_some() {
            tracing::warn!(registry = %self.repo.shown, realm = %crate::redact(realm, &[]), "token realm on another host: asked without the registry's credentials");
        }
        let answer = self
            .http
            .get(
                self.creds,
                &self.repo.base,
                Get {
                    url: &url,
                    headers: Vec::new(),
                    auth: basic.as_ref().zip(origin.as_ref()),
                    limit: 1 << 20,
                    what: "registry token",
                },
            )
            .await?;
        if !answer.status.is_success() {
            return Err(status_error(realm, answer.status));
        }
        #[derive(Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token =
            serde_json::from_slice(&answer.body).map_err(|e| self.error(format!("invalid token answer: {e}")))?;
        token
            .token
            .or(token.access_token)
            .filter(|t| !t.is_empty())
            .map(Auth::Bearer)
            .ok_or_else(|| self.error("the token answer holds no token"))
    }
}

/// `Scheme k="v", k2=v2` → (`Scheme`, {k: v, k2: v2}). Quoted values may hold commas.
fn parse_challenge(header: &str) -> (String, HashMap<String, String>) {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    let mut params = HashMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            value = chars.by_ref().take_while(|c| *c != ',').collect();
        }
        params.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    (scheme.to_string(), params)
}

/// Percent-encode a query value (everything but RFC 3986's unreserved characters).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// An answer's `Content-Type` without parameters.
pub(crate) fn media_type(answer: &Response) -> Option<String> {
    answer
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or(v).trim().to_string())
}

/// The `rel="next"` target of a `Link` header.
fn next_link(answer: &Response) -> Option<String> {
    let link = answer.headers.get(header::LINK)?.to_str().ok()?;
    if !link.contains("rel=\"next\"") {
        return None;
    }
    let start = link.find('<')? + 1;
    let end = link[start..].find('>')? + start;
    Some(link[start..end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges() {
        let (scheme, p) = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(scheme, "Bearer");
        assert_eq!(p["realm"], "https://auth.example/token");
        assert_eq!(p["service"], "registry.example");
        assert_eq!(p["scope"], "repository:a/b:pull,push");
        let (scheme, p) = parse_challenge(r#"Basic realm="Registry Realm""#);
        assert_eq!((scheme.as_str(), p["realm"].as_str()), ("Basic", "Registry Realm"));
        assert_eq!(encode("repository:a/b:pull"), "repository%3Aa%2Fb%3Apull");
    }

    #[test]
    fn references() {
        let r = parse("oci://127.0.0.1:5000/charts/", "demo", true).expect("valid");
        assert_eq!(
            (r.base.as_str(), r.repository.as_str()),
            ("http://127.0.0.1:5000", "charts/demo")
        );
        assert_eq!(
            parse("oci://reg.example", "demo", false).expect("valid").base,
            "https://reg.example"
        );
        for (url, chart) in [
            ("oci://u:p@reg/x", "demo"),
            ("oci://reg/../x", "demo"),
            ("oci://reg/x", "../demo"),
            ("oci://reg/x", "De mo"),
            ("https://reg/x", "demo"),
        ] {
            let err = parse(url, chart, false)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(!err.is_empty() && !err.contains("u:p"), "{url} {chart}: {err}");
        }
    }
}
