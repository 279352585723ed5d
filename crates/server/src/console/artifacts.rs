//! A call's artifacts on its page: media shown (images, audio, video),
//! text previewed by a range read of its first bytes, anything else
//! offered as a download; and `/ui/artifacts/{id}/content`, the bytes (with
//! range reads), served so that an artifact can never run script in the
//! console's origin (`Content-Security-Policy: sandbox`, `nosniff`).

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use joch_core::ToolCall;
use joch_core::artifact::{ArtifactRef, ByteRange};
use joch_engine::Engine;
use maud::{Markup, html};

use super::viewer::Viewer;
use crate::extract::Path;
use crate::{ApiError, AppState};

/// Bytes of a text artifact shown on the call's page.
const PREVIEW: u64 = 4096;

fn is_text(media_type: &str) -> bool {
    media_type.starts_with("text/")
        || media_type.contains("json")
        || media_type.contains("xml")
        || media_type.contains("yaml")
}

/// The call's artifacts, each with what can be shown of it.
pub(crate) async fn section(
    engine: &Engine,
    viewer: &Viewer,
    call: &ToolCall,
) -> Result<Markup, ApiError> {
    let mut items = Vec::new();
    for a in &call.status.artifacts {
        let preview = if is_text(&a.media_type) && a.size > 0 {
            let range = ByteRange {
                start: 0,
                end: a.size.min(PREVIEW) - 1,
            };
            let (_, bytes) = engine
                .artifacts()
                .read(&viewer.principal, &viewer.namespace, &a.id, Some(range))
                .await?;
            Some(String::from_utf8_lossy(&bytes).into_owned())
        } else {
            None
        };
        items.push(item(viewer, a, preview));
    }
    Ok(html! {
        @if !items.is_empty() {
            h2 { "Artifacts" }
            @for i in items { (i) }
        }
    })
}

fn item(viewer: &Viewer, a: &ArtifactRef, preview: Option<String>) -> Markup {
    let url = format!("/ui/artifacts/{}/content?ns={}", a.id, viewer.namespace);
    let label = format!("{} artifact, {} bytes", a.media_type, a.size);
    let kind = a.media_type.split('/').next().unwrap_or_default();
    html! {
        div.card data-artifact=(a.id) {
            p { strong { (a.media_type) } " · " (a.size) " bytes · " (a.reason) " · " code { (&a.id[..a.id.len().min(12)]) } }
            @match (kind, preview) {
                ("image", _) if a.media_type != "image/svg+xml" => img src=(url) alt=(label) style="max-width:100%";
                ("audio", _) => audio controls src=(url) aria-label=(label) {}
                ("video", _) => video controls src=(url) aria-label=(label) style="max-width:100%" {}
                (_, Some(text)) => {
                    pre aria-label=(label) { (text) }
                    @if a.size > PREVIEW { p.note { "The first " (PREVIEW) " bytes of " (a.size) "." } }
                }
                _ => {}
            }
            p { a href=(url) download { "Download" } " · " a href=(url) target="_blank" rel="noopener" { "Open" } }
        }
    }
}

/// The artifact's bytes (a `Range` header reads part of them).
pub(crate) async fn content(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let mut response = crate::api::artifacts::content_of(
        &state,
        &viewer.principal,
        &viewer.namespace,
        &id,
        &headers,
    )
    .await?;
    let out = response.headers_mut();
    out.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox"),
    );
    out.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    Ok(response)
}
