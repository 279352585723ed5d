//! The MCP front: any MCP client calls a namespace's tools through joch.
//!
//! Streamable HTTP at `/v1/namespaces/{ns}/mcp` (or `/mcp` with a
//! `Joch-Namespace` header, default `default`); the same handler serves
//! stdio for `joch mcp`.

mod convert;
mod elicit;
mod handler;

use std::sync::Arc;
use std::time::Duration;

use joch_engine::Engine;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

pub use handler::{JochMcp, NAMESPACE_HEADER, server_config};

/// The streamable HTTP service, to mount at the MCP paths. `allowed_hosts`
/// guards against DNS rebinding (empty: any `Host`).
pub(crate) fn http_service(
    engine: Engine,
    allowed_hosts: &[String],
    progress_every: Duration,
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
        Arc::new(LocalSessionManager::default()),
        config,
    )
}
