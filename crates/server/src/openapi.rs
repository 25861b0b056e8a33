//! The OpenAPI document of the API, generated from the routes themselves ([`crate::api_routes`],
//! with aide): paths, parameters, request bodies and answers come from each handler's extractors and
//! answer types, whose JSON schemas are derived from the same Rust types that serialise them.
//!
//! The generated document is also committed as `openapi.json` beside this file, so that the web UI's
//! types can be generated from it without building the server; a test fails when the two differ
//! (`CAPSTAN_UPDATE_OPENAPI=1 cargo test -p capstan-server --lib openapi` rewrites it).

use std::sync::OnceLock;

use aide::openapi::{Info, OpenApi, ReferenceOr, SecurityScheme};
use axum::http::header;
use axum::response::IntoResponse;

/// The document before the routes are added: title, description and the ways to authenticate.
pub fn base() -> OpenApi {
    aide::generate::infer_responses(true);
    aide::generate::extract_schemas(true);
    aide::generate::on_error(|err| tracing::error!("generating the OpenAPI document: {err}"));
    let mut api = OpenApi {
        info: Info {
            title: "Capstan API".into(),
            version: "v1alpha1".into(),
            description: Some(
                "Capstan's HTTP API. Authenticate with the capstan_session cookie from POST /api/session \
                 (state-changing requests must then send X-CSRF-Token) or with an API token as \
                 Authorization: Bearer."
                    .into(),
            ),
            ..Info::default()
        },
        ..OpenApi::default()
    };
    let components = api.components.get_or_insert_with(Default::default);
    components.security_schemes.insert(
        "session".into(),
        ReferenceOr::Item(SecurityScheme::ApiKey {
            location: aide::openapi::ApiKeyLocation::Cookie,
            name: "capstan_session".into(),
            description: Some("The session cookie from POST /api/session or single sign-on.".into()),
            extensions: Default::default(),
        }),
    );
    components.security_schemes.insert(
        "token".into(),
        ReferenceOr::Item(SecurityScheme::Http {
            scheme: "bearer".into(),
            bearer_format: None,
            description: Some("An API token (`capstan account generate-token`).".into()),
            extensions: Default::default(),
        }),
    );
    api
}

/// The document of every route in [`crate::api_routes`].
pub fn document() -> OpenApi {
    let mut api = base();
    let _ = crate::api_routes().finish_api(&mut api);
    api
}

/// The document as served: pretty JSON, generated once.
pub fn json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        let mut text = serde_json::to_string_pretty(&document()).unwrap_or_else(|_| "{}".into());
        text.push('\n');
        text
    })
}

/// `GET /api/openapi.json`.
pub async fn serve() -> impl IntoResponse + aide::OperationOutput {
    Document
}

/// The answer of [`serve`].
pub struct Document;

impl IntoResponse for Document {
    fn into_response(self) -> axum::response::Response {
        ([(header::CONTENT_TYPE, "application/json")], json()).into_response()
    }
}

impl aide::OperationOutput for Document {
    type Inner = ();

    fn operation_response(
        _ctx: &mut aide::generate::GenContext,
        _operation: &mut aide::openapi::Operation,
    ) -> Option<aide::openapi::Response> {
        Some(aide::openapi::Response {
            description: "The OpenAPI 3.1 document".into(),
            ..Default::default()
        })
    }

    fn inferred_responses(
        ctx: &mut aide::generate::GenContext,
        operation: &mut aide::openapi::Operation,
    ) -> Vec<(Option<aide::openapi::StatusCode>, aide::openapi::Response)> {
        Self::operation_response(ctx, operation)
            .map(|r| (Some(aide::openapi::StatusCode::Code(200)), r))
            .into_iter()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_document_is_the_generated_one() {
        let committed_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/openapi.json");
        let generated = json();
        if std::env::var_os("CAPSTAN_UPDATE_OPENAPI").is_some() {
            std::fs::write(&committed_path, generated).expect("writing openapi.json");
        }
        let committed = std::fs::read_to_string(&committed_path).unwrap_or_default();
        assert!(
            committed == generated,
            "{} is not the generated document: run `CAPSTAN_UPDATE_OPENAPI=1 cargo test -p capstan-server --lib openapi`",
            committed_path.display()
        );
    }

    #[test]
    fn every_operation_has_a_summary_and_an_answer() {
        let doc: serde_json::Value = serde_json::from_str(json()).expect("JSON");
        let paths = doc["paths"].as_object().expect("paths");
        assert!(paths.len() >= 25, "{}", paths.len());
        for (path, item) in paths {
            for (method, op) in item.as_object().into_iter().flatten() {
                assert!(op["summary"].is_string(), "{method} {path} has no summary");
                let responses = op["responses"].as_object().map(|r| r.len()).unwrap_or(0);
                assert!(responses > 0, "{method} {path} documents no answer");
            }
        }
    }
}
