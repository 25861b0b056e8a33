//! The API's error answer: a status code and `{"error": "message"}`.

use aide::generate::GenContext;
use aide::openapi::Operation;
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
        Self::new(status, format!("{doing}: {}", capstan_kube::describe_kube_error(err)))
    }
}

/// The body of every error answer.
#[derive(Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ErrorBody {
    /// What went wrong, for a person.
    pub error: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // A render or secret-store error may quote a secret value: none leaves in an answer.
        let error = capstan_redact::scrub(&self.message);
        (self.status, Json(ErrorBody { error })).into_response()
    }
}

impl aide::OperationOutput for ApiError {
    type Inner = ErrorBody;

    fn operation_response(ctx: &mut GenContext, operation: &mut Operation) -> Option<aide::openapi::Response> {
        let mut response = Json::<ErrorBody>::operation_response(ctx, operation)?;
        response.description = "An error: `{\"error\": message}`".into();
        Some(response)
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<aide::openapi::StatusCode>, aide::openapi::Response)> {
        // The statuses every endpoint may answer; each endpoint's own are added where it is routed.
        Self::operation_response(ctx, operation)
            .map(|r| (Some(aide::openapi::StatusCode::Range(4)), r))
            .into_iter()
            .collect()
    }
}
