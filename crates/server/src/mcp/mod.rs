//! The MCP front: any MCP client calls a namespace's tools through joch.
//!
//! Streamable HTTP at `/v1/namespaces/{ns}/mcp` (or `/mcp` with a
//! `Joch-Namespace` header, default `default`); the same handler serves
//! stdio for `joch mcp`.

mod convert;
mod deferred;
mod direct;
mod elicit;
mod front;
mod handler;
mod listen;
mod methods;
mod outbox;
mod relay;
mod resume;
mod rounds;
mod sessions;
mod stateless;
mod surface;
mod tasks;

use std::sync::Arc;
use std::time::Duration;

use joch_engine::Engine;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

pub(crate) use front::{Front, serve};
pub use handler::{JochMcp, NAMESPACE_HEADER};
pub use methods::server_config;

/// The MCP endpoint's parts, to mount at the MCP paths with [`serve`].
/// `Host` was checked at the edge (`edge.rs`), for every route alike;
/// `public_url` prefixes the links joch gives clients (an Approval's).
pub(crate) fn front(
    engine: Engine,
    progress_every: Duration,
    max_body_bytes: usize,
    public_url: &str,
) -> Front {
    let idle = engine.mcp().session_limits().idle;
    let running = Arc::new(sessions::Running::default());
    let manager = Arc::new(sessions::Sessions::new(
        engine.clone(),
        idle,
        running.clone(),
    ));
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(max_body_bytes)
        .disable_allowed_hosts();
    let direct_config = config
        .clone()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    config.session_store = Some(Arc::new(sessions::Records {
        engine: engine.clone(),
        running: running.clone(),
    }));
    let factory = {
        let engine = engine.clone();
        let public_url: Arc<str> = public_url.trim_end_matches('/').into();
        let running = running.clone();
        move || {
            Ok(JochMcp::for_http(engine.clone(), progress_every)
                .with_public_url(public_url.clone())
                .serving_directly(running.clone()))
        }
    };
    let stateless = stateless::Stateless::new(factory().expect("joch's handler is made"));
    Front {
        sessions: StreamableHttpService::new(factory.clone(), manager.clone(), config),
        direct: StreamableHttpService::new(
            factory,
            Arc::new(NeverSessionManager::default()),
            direct_config,
        ),
        manager,
        engine,
        max_body_bytes,
        stateless,
        waiting: resume::Waiting::default(),
    }
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
    use crate::ApiWord;
    let code = match status {
        StatusCode::NOT_ACCEPTABLE => ApiWord::NotAcceptable,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiWord::UnsupportedMediaType,
        StatusCode::NOT_FOUND => ApiWord::SessionNotFound,
        StatusCode::METHOD_NOT_ALLOWED => ApiWord::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => ApiWord::PayloadTooLarge,
        StatusCode::FORBIDDEN => ApiWord::Forbidden,
        s if s.is_server_error() => ApiWord::Internal,
        _ => ApiWord::BadRequest,
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
