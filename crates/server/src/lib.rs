//! joch-server: the HTTP API over the engine.
//!
//! Handlers extract, make one engine call and map the answer; they hold no
//! SQL and no policy. Every failure is an [`ApiError`] rendered as
//! `{"code", "message", "details"}` with a stable snake_case `code`, bodies
//! included: joch's own body extractor turns malformed JSON or YAML, a wrong
//! `apiVersion`/`kind` and an oversized body into structured 4xx answers.
#![warn(missing_docs)]

pub(crate) mod api;
mod auth;
mod console;
mod discovery;
pub mod edge;
mod error;
mod extract;
mod hooks;
pub mod mcp;
mod streams;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use joch_engine::Engine;

pub use discovery::resource_audiences;
pub use error::{ApiCode, ApiError, ApiWord};

/// HTTP settings, each with a documented default.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest request body accepted, in bytes (default 4 MiB); larger is 413.
    pub max_body_bytes: usize,
    /// Host names joch answers to besides the loopback names and IP
    /// addresses, against DNS rebinding (`*`: any); see [`edge`].
    pub allowed_hosts: Vec<String>,
    /// Origins (`https://ops.example`) whose pages may send joch requests
    /// that change something, besides joch's own (default none).
    pub allowed_origins: Vec<String>,
    /// What `GET /metrics` serves (Prometheus text), to the operator only
    /// once authentication is on; none: no such route.
    pub metrics: Option<Metrics>,
    /// How often an MCP call waiting for approval sends the client a
    /// progress notification (default 1 s).
    pub mcp_progress_every: Duration,
    /// joch's base URL as its clients reach it: the resource its
    /// protected-resource metadata and 401 challenges name (default
    /// `http://127.0.0.1:7070`).
    pub public_url: String,
    /// The authorization servers (the JWT issuer) that metadata names as
    /// the ones to get a token from (default none).
    pub authorization_servers: Vec<String>,
    /// Most long-lived answers (event follows, MCP requests and streams)
    /// one principal may have open at once (default 256; all
    /// unauthenticated callers count as one); beyond it, 429
    /// `too_many_streams`.
    pub max_streams_per_principal: usize,
    /// How long a console session lasts after sign-in (default 8 h).
    pub console_session_ttl: Duration,
    /// The console's client at the JWT issuer, for "Sign in with" it
    /// (OpenID Connect; default none: token sign-in only).
    pub console_oidc: Option<OidcClient>,
}

/// The console as a client of the identity provider (OpenID Connect,
/// authorization code with PKCE). Its redirect URI is
/// `{public_url}/ui/signin/oidc/callback`.
#[derive(Debug, Clone)]
pub struct OidcClient {
    /// The issuer, whose `/.well-known/openid-configuration` names the
    /// endpoints; its ID tokens are verified with the JWT settings' keys.
    pub issuer: String,
    /// The console's `client_id` (the ID token's `aud`).
    pub client_id: String,
    /// The client secret, for a confidential client (sent with HTTP Basic).
    pub client_secret: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 * 1024 * 1024,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            metrics: None,
            mcp_progress_every: Duration::from_secs(1),
            public_url: "http://127.0.0.1:7070".to_owned(),
            authorization_servers: Vec::new(),
            max_streams_per_principal: 256,
            console_session_ttl: Duration::from_secs(8 * 60 * 60),
            console_oidc: None,
        }
    }
}

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The call path and resource operations.
    pub engine: Engine,
    /// HTTP settings.
    pub config: Arc<ServerConfig>,
    /// Long-lived answers open, by principal.
    pub(crate) streams: Arc<streams::Streams>,
    /// The console's OpenID provider's discovery document, kept a while.
    pub(crate) discoveries: Arc<console::Discoveries>,
}

/// Renders the process's metrics as Prometheus text.
#[derive(Clone)]
pub struct Metrics(pub Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics(..)")
    }
}

/// The whole API as a router, ready to serve or to mount in a test;
/// `extra` routes (the demo's webhooks) are served behind the same edge.
pub fn router(engine: Engine, config: ServerConfig, extra: Router) -> Router {
    let limit = config.max_body_bytes;
    let edge = Arc::new(edge::Edge::new(
        &config.allowed_hosts,
        &config.allowed_origins,
    ));
    let mcp = Arc::new(mcp::front(
        engine.clone(),
        config.mcp_progress_every,
        limit,
        &config.public_url,
    ));
    let state = AppState {
        engine,
        config: Arc::new(config),
        streams: Arc::default(),
        discoveries: Arc::default(),
    };
    let mcp = Router::new()
        .route("/mcp", axum::routing::any(mcp::serve))
        .route("/v1/namespaces/{ns}/mcp", axum::routing::any(mcp::serve))
        .with_state(mcp)
        .layer(axum::middleware::map_response(mcp::json_errors))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            streams::limit,
        ));
    api::routes()
        .merge(discovery::routes())
        .merge(console::routes(state.clone()))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state.clone())
        .merge(mcp)
        .layer(axum::middleware::from_fn_with_state(state, auth::authorize))
        .merge(extra)
        .layer(axum::middleware::from_fn_with_state(edge, edge::guard))
        .layer(axum::middleware::from_fn(error::log_server_errors))
}
