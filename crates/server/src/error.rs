//! The API's error answer: a status code and `{"error": "message"}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error answered to an API client.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, for a person.
    pub message: String,
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// 404 for `what`.
    pub fn not_found(what: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::NOT_FOUND, format!("{what} not found"))
    }

    /// 400 with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 502 for a failed request to the Kubernetes API.
    pub fn kube(doing: &str, err: &kube::Error) -> Self {
        let status = match err {
            kube::Error::Api(s) if s.code == 404 => StatusCode::NOT_FOUND,
            kube::Error::Api(s) if s.code == 409 => StatusCode::CONFLICT,
            _ => StatusCode::BAD_GATEWAY,
        };
        Self::new(
            status,
            format!("{doing}: {}", capstan_compare::describe_kube_error(err)),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(serde_json::json!({"error": self.message}))).into_response()
    }
}
