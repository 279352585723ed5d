//! The console's static files, embedded in the binary: htmx 2.0.11 and its
//! SSE extension 2.2.4 (both from the npm registry, BSD Zero Clause; see
//! `assets/LICENSES.txt`), and the console's own CSS and script.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::ApiError;
use crate::ApiWord;

const FILES: &[(&str, &str, &[u8])] = &[
    (
        "htmx.js",
        "text/javascript",
        include_bytes!("assets/htmx-2.0.11.min.js"),
    ),
    (
        "sse.js",
        "text/javascript",
        include_bytes!("assets/htmx-ext-sse-2.2.4.min.js"),
    ),
    (
        "console.js",
        "text/javascript",
        include_bytes!("assets/console.js"),
    ),
    (
        "console.css",
        "text/css",
        include_bytes!("assets/console.css"),
    ),
    (
        "LICENSES.txt",
        "text/plain; charset=utf-8",
        include_bytes!("assets/LICENSES.txt"),
    ),
];

/// `GET /ui/assets/{file}`.
pub(crate) async fn serve(Path(file): Path<String>) -> Response {
    match FILES.iter().find(|(name, _, _)| *name == file) {
        Some((_, mime, body)) => (
            [
                (header::CONTENT_TYPE, *mime),
                (header::CACHE_CONTROL, "public, max-age=3600"),
            ],
            *body,
        )
            .into_response(),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            ApiWord::NotFound,
            "no such console asset",
        )
        .into_response(),
    }
}
