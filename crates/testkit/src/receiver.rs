//! A webhook receiver on a free loopback port (axum), answering every POST as told — 200, another
//! status, a redirect, or never (it hangs) — and keeping each request it got (path, headers, body)
//! for the test to read. Stopped when dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

/// How a [`Receiver`] answers.
#[derive(Debug, Clone)]
pub enum Answer {
    /// 200 with `{}`.
    Ok,
    /// This status, every time.
    Status(u16),
    /// 302 to this location.
    Redirect(String),
    /// Nothing, ever (the request is kept first).
    Hang,
}

/// A request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    /// Path and query.
    pub path: String,
    /// Headers, lower-case names.
    pub headers: BTreeMap<String, String>,
    /// The body.
    pub body: Vec<u8>,
}

impl Received {
    /// The body as JSON (Null when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// A running receiver.
pub struct Receiver {
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    got: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Start one answering `answer`.
    pub async fn start(answer: Answer) -> anyhow::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let kept = got.clone();
        let handler = move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let kept = kept.clone();
            let answer = answer.clone();
            async move {
                kept.lock().unwrap_or_else(|e| e.into_inner()).push(Received {
                    path: uri.path_and_query().map(|p| p.to_string()).unwrap_or_default(),
                    headers: headers
                        .iter()
                        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or_default().to_string()))
                        .collect(),
                    body: body.to_vec(),
                });
                let response: Response = match answer {
                    Answer::Ok => (StatusCode::OK, "{}").into_response(),
                    Answer::Status(s) => (
                        StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                        "receiver says no",
                    )
                        .into_response(),
                    Answer::Redirect(to) => (StatusCode::FOUND, [(header::LOCATION, to)]).into_response(),
                    Answer::Hang => {
                        std::future::pending::<()>().await;
                        StatusCode::OK.into_response()
                    }
                };
                response
            }
        };
        let app = axum::Router::new().fallback(axum::routing::post(handler));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Receiver { url, got, task })
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
