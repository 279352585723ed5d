//! The MCP front: any MCP client calls a namespace's tools through joch.
//!
//! Streamable HTTP at `/v1/namespaces/{ns}/mcp` (or `/mcp` with a
//! `Joch-Namespace` header, default `default`); the same handler serves
//! stdio for `joch mcp`.

mod convert;
mod elicit;
mod handler;
mod methods;
mod relay;
mod surface;

use std::sync::Arc;
use std::time::Duration;

use joch_engine::Engine;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

pub use handler::{JochMcp, NAMESPACE_HEADER};
pub use methods::server_config;

/// The streamable HTTP service, to mount at the MCP paths. `allowed_hosts`
/// guards against DNS rebinding (empty: any `Host`).
pub(crate) fn http_service(
    engine: Engine,
    allowed_hosts: &[String],
    progress_every: Duration,
    idle: Duration,
    max_body_bytes: usize,
) -> StreamableHttpService<JochMcp, LocalSessionManager> {
    let mut config =
        StreamableHttpServerConfig::default().with_max_request_body_bytes(max_body_bytes);
    config = if allowed_hosts.is_empty() {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(allowed_hosts.iter().cloned())
    };
    StreamableHttpService::new(
        move || Ok(JochMcp::for_http(engine.clone(), progress_every)),
        Arc::new(sessions(idle)),
        config,
    )
}

/// Sessions that close after `idle` without a request.
fn sessions(idle: Duration) -> LocalSessionManager {
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(idle);
    manager
}

/// The MCP library answers transport-level refusals (a missing `Accept`,
/// a wrong content type, an unknown session) in plain text; joch's every
/// error is JSON `{code, message, details}`, so they are rewritten here.
pub(crate) async fn json_errors(response: axum::response::Response) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let code = match status {
        StatusCode::NOT_ACCEPTABLE => "not_acceptable",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::NOT_FOUND => "session_not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::FORBIDDEN => "forbidden",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    };
    let (_, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let message = String::from_utf8_lossy(&text).trim().to_owned();
    let message = if message.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("refused")
            .to_lowercase()
    } else {
        message
    };
    crate::ApiError::new(status, code, message).into_response()
}
