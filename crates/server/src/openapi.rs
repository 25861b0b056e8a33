//! The OpenAPI 3 description of the API, served at `/api/openapi.json`. Kept by hand next to the
//! routes (a test checks that both list the same operations).

use axum::http::header;
use axum::response::IntoResponse;

/// The document.
pub const DOCUMENT: &str = include_str!("openapi.json");

/// `GET /api/openapi.json`.
pub async fn document() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT)
}
