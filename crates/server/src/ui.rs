//! The web UI, embedded in the binary at build time (see `build.rs`): `/` and every client-side
//! route answer `index.html`; `/ui/PATH` answers the file `ui/PATH`.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));

fn content_type(path: &str) -> &'static str {
    if path.rsplit('/').next() == Some("LICENSE") {
        return "text/plain; charset=utf-8";
    }
    match path.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" => "application/json",
        "txt" | "md" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

fn asset(path: &str) -> Option<&'static [u8]> {
    ASSETS.iter().find(|(p, _)| *p == path).map(|(_, b)| *b)
}

fn answer(path: &str) -> Response {
    match asset(path) {
        Some(bytes) => (
            [
                (header::CONTENT_TYPE, content_type(path)),
                (header::CACHE_CONTROL, "no-cache"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "not found").into_response(),
    }
}

/// `GET /ui/{*path}`.
pub async fn file(Path(path): Path<String>) -> Response {
    if path.split('/').any(|p| p == ".." || p.is_empty()) {
        return (StatusCode::BAD_REQUEST, "invalid path").into_response();
    }
    answer(&path)
}

/// `/` and client-side routes.
pub async fn index() -> Response {
    let mut response = answer("index.html");
    // The UI is never framed by another site.
    response
        .headers_mut()
        .insert(header::X_FRAME_OPTIONS, header::HeaderValue::from_static("DENY"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ui_is_embedded() {
        assert!(asset("index.html").is_some(), "ui/index.html must exist");
        assert_eq!(content_type("vendor/x.module.js"), "text/javascript; charset=utf-8");
        assert_eq!(content_type("vendor/lit-html/LICENSE"), "text/plain; charset=utf-8");
        assert!(asset("vendor/lit-html/lit-html.js").is_some());
        assert!(asset("vendor/lit-html/directives/repeat.js").is_some());
        // Only the type check reads these.
        assert!(asset("api.d.ts").is_none() && asset("tsconfig.json").is_none());
    }
}
