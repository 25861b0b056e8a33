//! Sending one payload: a POST with Capstan's HTTP client (no proxy from the environment, no
//! redirect followed), each attempt bounded by [`Retry::per_attempt`], retried with backoff while
//! the failure may pass (a 5xx, 408, 429, a timeout, a refused connection) and not when it will not
//! (another 4xx, a redirect). Error messages name the status or the cause, never the URL (a webhook
//! URL carries its token).

use std::time::Duration;

use capstan_http::{Bytes, HeaderName, HeaderValue, Method, Request, Uri, header};

/// How a delivery is attempted.
#[derive(Debug, Clone)]
pub struct Retry {
    /// The longest one attempt may take, connection included.
    pub per_attempt: Duration,
    /// The pauses before each retry (their number is the number of retries).
    pub backoff: Vec<Duration>,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            per_attempt: Duration::from_secs(10),
            backoff: vec![Duration::from_secs(1), Duration::from_secs(4), Duration::from_secs(16)],
        }
    }
}

/// Why a delivery failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// The destination answered an error status.
    #[error("the destination answered HTTP {status}{detail}")]
    Status {
        /// The status.
        status: u16,
        /// What its body said, cut short (prefixed with ": "), or empty.
        detail: String,
    },
    /// It answered a redirect, which is not followed (it could lead a token elsewhere).
    #[error("the destination answered a redirect (HTTP {status}), which is not followed")]
    Redirect {
        /// The status.
        status: u16,
    },
    /// No answer within the time limit.
    #[error("no answer within {0} s")]
    Timeout(u64),
    /// It could not be reached.
    #[error("the destination could not be reached: {0}")]
    Unreachable(String),
    /// The URL or a header cannot be used.
    #[error("{0}")]
    Invalid(String),
}

impl DeliveryError {
    /// Whether trying again later may succeed.
    pub fn retryable(&self) -> bool {
        match self {
            DeliveryError::Status { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            DeliveryError::Timeout(_) | DeliveryError::Unreachable(_) => true,
            DeliveryError::Redirect { .. } | DeliveryError::Invalid(_) => false,
        }
    }
}

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Attempts made.
    pub attempts: u32,
    /// Success, or the last attempt's failure.
    pub result: Result<(), DeliveryError>,
}

/// A parsed destination URL: only `http` and `https`, with a host.
pub fn destination(url: &str) -> Result<Uri, DeliveryError> {
    let uri: Uri = url
        .trim()
        .parse()
        .map_err(|_| DeliveryError::Invalid("the destination is not a URL".into()))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(h)) if !h.is_empty() => Ok(uri),
        _ => Err(DeliveryError::Invalid(
            "the destination must be an http:// or https:// URL with a host".into(),
        )),
    }
}

/// POST `body` (JSON) to `url` with `headers`, as [`Retry`] says.
pub async fn post(
    client: &capstan_http::Client,
    url: &Uri,
    headers: &[(HeaderName, HeaderValue)],
    body: Bytes,
    retry: &Retry,
) -> Outcome {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let result = once(client, url, headers, body.clone(), retry.per_attempt).await;
        let pause = match &result {
            Err(e) if e.retryable() => retry.backoff.get(attempts as usize - 1).copied(),
            _ => None,
        };
        match pause {
            Some(pause) => tokio::time::sleep(pause).await,
            None => return Outcome { attempts, result },
        }
    }
}

async fn once(
    client: &capstan_http::Client,
    url: &Uri,
    headers: &[(HeaderName, HeaderValue)],
    body: Bytes,
    limit: Duration,
) -> Result<(), DeliveryError> {
    let mut req = Request::new(Method::POST, url.clone())
        .header(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .header(header::USER_AGENT, HeaderValue::from_static("capstan-notifications"))
        .body(body);
    for (k, v) in headers {
        req = req.header(k.clone(), v.clone());
    }
    // The head, then at most 16 KiB of the body (an error page may be larger: its status decides).
    let exchange = async {
        let answer = client.send(req).await?;
        answer.read_cut(16 * 1024).await
    };
    let answer = match tokio::time::timeout(limit, exchange).await {
        Err(_) | Ok(Err(capstan_http::Error::Timeout { .. })) => return Err(DeliveryError::Timeout(limit.as_secs())),
        Ok(Err(e)) => return Err(DeliveryError::Unreachable(without(&capstan_http::chain(&e), url))),
        Ok(Ok(answer)) => answer,
    };
    let status = answer.status.as_u16();
    match status {
        200..=299 => Ok(()),
        300..=399 => Err(DeliveryError::Redirect { status }),
        _ => {
            let text = String::from_utf8_lossy(&answer.body);
            let text: String = text.trim().chars().take(200).collect();
            let detail = if text.is_empty() {
                String::new()
            } else {
                format!(": {}", capstan_redact::scrub(&without(&text, url)))
            };
            Err(DeliveryError::Status { status, detail })
        }
    }
}

/// `text` without the URL (or its path and query) in it.
fn without(text: &str, url: &Uri) -> String {
    let mut out = text.replace(&url.to_string(), "<destination>");
    if let Some(pq) = url.path_and_query().map(|p| p.as_str()).filter(|p| p.len() > 1) {
        out = out.replace(pq, "<destination>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_retried_only_when_they_may_pass() {
        let s = |status| DeliveryError::Status {
            status,
            detail: String::new(),
        };
        assert!(s(500).retryable() && s(503).retryable() && s(429).retryable());
        assert!(!s(404).retryable() && !s(401).retryable());
        assert!(!DeliveryError::Redirect { status: 302 }.retryable());
        assert!(DeliveryError::Timeout(10).retryable());
        assert!(destination("ftp://x/y").is_err());
        assert!(destination("not a url").is_err());
        assert!(destination("https://hooks.example/T/B/secret").is_ok());
        let url: Uri = "https://hooks.example/services/T0/B0/tok".parse().expect("uri");
        assert_eq!(
            without(
                "POST https://hooks.example/services/T0/B0/tok failed; /services/T0/B0/tok",
                &url
            ),
            "POST <destination> failed; <destination>"
        );
    }
}
