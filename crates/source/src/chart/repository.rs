//! A Helm repository's index, fetched at most once per repository per TTL and shared by every
//! caller: concurrent resolutions wait for the one request in flight, and a refresh is a conditional
//! request (`If-None-Match` / `If-Modified-Since`) whose `304 Not Modified` keeps the parsed index.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use capstan_http::StatusCode;
use capstan_http::header::{self, HeaderValue};

use super::error::ChartError;
use super::http::{Auth, Get, Http, Origin, check_url, status_error};
use super::index::{self, Index};
use crate::Credentials;

/// Counters of one repository.
#[derive(Default)]
pub(crate) struct Counters {
    pub index_requests: AtomicU64,
    pub index_not_modified: AtomicU64,
    pub archive_downloads: AtomicU64,
    pub tag_lists: AtomicU64,
    pub manifest_requests: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// One Helm repository: its index and validators.
pub(crate) struct HelmRepo {
    /// The repository URL without a trailing `/`.
    pub url: String,
    pub counters: Arc<Counters>,
    state: tokio::sync::Mutex<IndexState>,
}

#[derive(Default)]
struct IndexState {
    fetched: Option<Instant>,
    etag: Option<HeaderValue>,
    last_modified: Option<HeaderValue>,
    index: Option<Arc<Index>>,
}

impl HelmRepo {
    pub(crate) fn new(url: String, counters: Arc<Counters>) -> HelmRepo {
        HelmRepo {
            url,
            counters,
            state: tokio::sync::Mutex::new(IndexState::default()),
        }
    }

    /// `index.yaml`'s URL.
    pub(crate) fn index_url(&self) -> String {
        format!("{}/index.yaml", self.url)
    }

    /// The index, fetched if older than `ttl` (or if `force` and nobody fetched it since this call
    /// began).
    pub(crate) async fn index(
        &self,
        http: &Http,
        creds: &Credentials,
        ttl: Duration,
        force: bool,
        limits: (u64, usize),
    ) -> Result<Arc<Index>, ChartError> {
        let asked = Instant::now();
        let mut state = self.state.lock().await;
        if let (Some(fetched), Some(index)) = (state.fetched, &state.index) {
            let fresh = if force {
                fetched >= asked
            } else {
                fetched.elapsed() < ttl
            };
            if fresh {
                return Ok(index.clone());
            }
        }
        let url = self.index_url();
        let uri = check_url(&url)?;
        let origin = Origin::of(&uri);
        let auth = Auth::basic(creds);
        let mut headers = Vec::new();
        if state.index.is_some() {
            if let Some(etag) = &state.etag {
                headers.push((header::IF_NONE_MATCH, etag.clone()));
            }
            if let Some(lm) = &state.last_modified {
                headers.push((header::IF_MODIFIED_SINCE, lm.clone()));
            }
        }
        Counters::bump(&self.counters.index_requests);
        let answer = http
            .get(
                creds,
                &self.url,
                Get {
                    url: &url,
                    headers,
                    auth: auth.as_ref().zip(origin.as_ref()),
                    limit: limits.0,
                    what: "repository index",
                },
            )
            .await?;
        if answer.status == StatusCode::NOT_MODIFIED
            && let Some(index) = state.index.clone()
        {
            Counters::bump(&self.counters.index_not_modified);
            state.fetched = Some(Instant::now());
            return Ok(index);
        }
        if !answer.status.is_success() {
            return Err(status_error(&url, answer.status));
        }
        let max_entries = limits.1;
        let body = answer.body;
        let parsed = tokio::task::spawn_blocking(move || index::parse(&body, max_entries))
            .await
            .map_err(|e| ChartError::Index {
                repo: self.url.clone(),
                detail: format!("parsing stopped: {e}"),
            })?
            .map_err(|detail| ChartError::Index {
                repo: self.url.clone(),
                detail,
            })?;
        let index = Arc::new(parsed);
        state.etag = answer.headers.get(header::ETAG).cloned();
        state.last_modified = answer.headers.get(header::LAST_MODIFIED).cloned();
        state.index = Some(index.clone());
        state.fetched = Some(Instant::now());
        Ok(index)
    }
}
