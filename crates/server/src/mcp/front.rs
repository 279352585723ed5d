//! The MCP endpoint: what joch decides about sessions before rmcp serves
//! the request.
//!
//! - `initialize` is answered statelessly; when the version agreed on is
//!   before 2026-07-28, the engine then opens a session (capped per
//!   namespace and per principal) whose id goes back in `Mcp-Session-Id`:
//!   opening a session starts nothing in memory.
//! - A request naming a session is admitted if the session is open and
//!   the caller's (else 404 `session_not_found`, the same for another's
//!   session as for none); its worker is re-created here if need be.
//! - The client's `notifications/initialized` is acknowledged at once: a
//!   re-created worker is sent its own.
//! - `DELETE` closes the session in the store, for every replica.
//! - Requests of 2026-07-28 and later have no session: rmcp serves them.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, request::Parts};
use axum::response::{IntoResponse, Response};
use joch_core::names::validate_namespace;
use joch_engine::{Action, Engine, EngineError, McpSession, Principal, principal_key};
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use serde::Deserialize;
use serde_json::Value;

use super::direct;
use super::handler::{JochMcp, NAMESPACE_HEADER};
use super::resume;
use super::sessions::{Known, Sessions};
use super::stateless::{self, Stateless};
use crate::ApiError;
use crate::ApiWord;
use rmcp::model::GetExtensions;

/// The first protocol version without sessions.
const STATELESS_VERSION: &str = "2026-07-28";
const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

/// The MCP endpoint's parts.
pub(crate) struct Front {
    pub(crate) engine: Engine,
    /// rmcp with joch's session manager: requests of open sessions.
    pub(crate) sessions: StreamableHttpService<JochMcp, Sessions>,
    /// rmcp without sessions, answering `initialize` in JSON.
    pub(crate) direct: StreamableHttpService<JochMcp, NeverSessionManager>,
    pub(crate) manager: Arc<Sessions>,
    pub(crate) max_body_bytes: usize,
    /// What serves stateless requests without rmcp's tasks (`direct.rs`).
    pub(crate) stateless: Stateless,
    /// Resumed call streams waiting for their call here (`resume.rs`).
    pub(crate) waiting: resume::Waiting,
}

/// What joch reads of a JSON-RPC message before passing it on.
#[derive(Deserialize)]
struct Peek {
    method: Option<String>,
    #[serde(default)]
    params: Value,
}

/// The MCP endpoint (`/mcp`, `/v1/namespaces/{ns}/mcp`).
pub(crate) async fn serve(State(front): State<Arc<Front>>, request: Request) -> Response {
    match front.route(request).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

impl Front {
    async fn route(&self, request: Request) -> Result<Response, ApiError> {
        let by = request
            .extensions()
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    ApiWord::Unauthenticated,
                    "no principal",
                )
            })?;
        let namespace = namespace_of(&request)?;
        // The MCP endpoint is a calling surface: the gate's first question.
        joch_engine::may_in(&by, &namespace, &Action::CallTool)?;
        let stateless = request
            .headers()
            .get(VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v >= STATELESS_VERSION);
        if stateless {
            // No session to route by: the JSON answer of a request whose
            // first message ends it is one write, no SSE framing.
            if request.method() == Method::POST {
                return self.stateless(request).await;
            }
            return Ok(self.direct.handle(request).await.map(Body::new));
        }
        let id = request
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match id {
            Some(id) => self.in_session(request, &id, &by, &namespace).await,
            None if request.method() == Method::POST => {
                self.without_session(request, &by, &namespace).await
            }
            None => Ok(self.pass(request).await),
        }
    }

    /// A stateless POST: a hot request rmcp would take is served here
    /// (`direct.rs`, `stateless.rs`), any other goes to rmcp.
    async fn stateless(&self, request: Request) -> Result<Response, ApiError> {
        let length = request
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        let small = length.is_some_and(|n| n <= self.max_body_bytes);
        if !small || !stateless::plain(request.headers()) {
            tracing::trace!(small, headers = ?request.headers(), "to rmcp: not plain");
            return Ok(self.direct.handle(request).await.map(Body::new));
        }
        let (parts, bytes) = self.buffer(request).await?;
        let message = serde_json::from_slice(&bytes).ok().map(direct::hot_request);
        let Some(Ok(mut request)) = message else {
            tracing::trace!("to rmcp: not hot");
            return Ok(self.stateless_by_rmcp(parts, bytes).await);
        };
        if !stateless::consistent(&parts.headers, &request) {
            tracing::trace!(headers = ?parts.headers, "to rmcp: not consistent");
            return Ok(self.stateless_by_rmcp(parts, bytes).await);
        }
        request.request.extensions_mut().insert(parts);
        let served = self.stateless.served();
        if !direct::eligible(&served, &request, false).await {
            // The head inserted above, taken back for rmcp.
            let parts = stateless::parts_of(&mut request).ok_or_else(|| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ApiWord::Internal,
                    "the request's head was lost",
                )
            })?;
            return Ok(self.stateless_by_rmcp(parts, bytes).await);
        }
        let ct = tokio_util::sync::CancellationToken::new();
        Ok(stateless::respond(direct::serve(
            served,
            request,
            ct,
            direct::Disconnect::Cancels,
        ))
        .await)
    }

    async fn stateless_by_rmcp(&self, parts: Parts, bytes: Bytes) -> Response {
        let request = Request::from_parts(parts, Body::from(bytes));
        self.direct.handle(request).await.map(Body::new)
    }

    async fn pass(&self, request: Request) -> Response {
        self.sessions.handle(request).await.map(Body::new)
    }

    /// A POST without a session: `initialize` opens one.
    async fn without_session(
        &self,
        request: Request,
        by: &Principal,
        namespace: &str,
    ) -> Result<Response, ApiError> {
        let (parts, bytes) = self.buffer(request).await?;
        let peek = serde_json::from_slice::<Peek>(&bytes).ok();
        let Some(initialize) = peek.filter(|p| p.method.as_deref() == Some("initialize")) else {
            return Ok(self
                .pass(Request::from_parts(parts, Body::from(bytes)))
                .await);
        };
        let answer = self
            .direct
            .handle(Request::from_parts(parts, Body::from(bytes)))
            .await;
        if answer.status() != StatusCode::OK {
            return Ok(answer.map(Body::new));
        }
        let (mut answer, body) = answer.into_parts();
        let body = axum::body::to_bytes(Body::new(body), usize::MAX)
            .await
            .map_err(|e| {
                ApiError::new(StatusCode::BAD_GATEWAY, ApiWord::Internal, e.to_string())
            })?;
        // The version agreed on, not the one asked for, says whether the
        // client will use a session.
        let agreed = serde_json::from_slice::<Value>(&body).ok().and_then(|v| {
            v.pointer("/result/protocolVersion")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        if agreed.is_some_and(|v| v.as_str() < STATELESS_VERSION) {
            let id = self
                .engine
                .mcp()
                .open_session(by, namespace, initialize.params)
                .await
                .map_err(session_error)?;
            let id = HeaderValue::from_str(&id).map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ApiWord::Internal,
                    e.to_string(),
                )
            })?;
            answer.headers.insert(SESSION_HEADER, id);
        }
        Ok(Response::from_parts(answer, Body::from(body)))
    }

    /// A request naming a session.
    async fn in_session(
        &self,
        request: Request,
        id: &str,
        by: &Principal,
        namespace: &str,
    ) -> Result<Response, ApiError> {
        let (known, touch) = self.manager.known(id, &principal_key(by), namespace);
        if let Some(session) = touch {
            self.touch(session);
        }
        if request.method() == Method::DELETE {
            self.engine
                .mcp()
                .close_session(by, namespace, id)
                .await
                .map_err(session_error)?;
            return Ok(self.pass(request).await);
        }
        if let Some(last) = resumes_call(&request) {
            return self.resume(&last, id, by, namespace).await;
        }
        if matches!(known, Known::Hot) {
            return Ok(self.pass(request).await);
        }
        let session = self
            .engine
            .mcp()
            .session(by, namespace, id)
            .await
            .map_err(session_error)?;
        if session.last_seen_ms < chrono::Utc::now().timestamp_millis() - self.touch_every_ms() {
            self.touch(session);
        }
        if request.method() != Method::POST {
            return Ok(self.pass(request).await);
        }
        let (parts, bytes) = self.buffer(request).await?;
        let initialized = serde_json::from_slice::<Peek>(&bytes)
            .is_ok_and(|p| p.method.as_deref() == Some("notifications/initialized"));
        if initialized {
            return Ok(StatusCode::ACCEPTED.into_response());
        }
        Ok(self
            .pass(Request::from_parts(parts, Body::from(bytes)))
            .await)
    }

    /// A `GET` with the `Last-Event-ID` of a call's stream (`resume.rs`):
    /// the rest of the stream from the session's worker here, else the
    /// call's answer from its record. An id this session did not give is
    /// `404 unknown_event_id`.
    async fn resume(
        &self,
        last: &str,
        id: &str,
        by: &Principal,
        namespace: &str,
    ) -> Result<Response, ApiError> {
        let session = self
            .engine
            .mcp()
            .session(by, namespace, id)
            .await
            .map_err(session_error)?;
        let signer = session.stream_signer();
        let parsed = resume::parse(last).flatten();
        let verified = parsed.and_then(|p| Some((p.verified(signer.as_ref()?)?, p)));
        let Some((ids, parsed)) = verified else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                ApiWord::UnknownEventId,
                "Last-Event-ID names no stream of this MCP session",
            ));
        };
        if session.last_seen_ms < chrono::Utc::now().timestamp_millis() - self.touch_every_ms() {
            self.touch(session);
        }
        if let Some(event) = &parsed.worker
            && let Some(rest) = self.manager.resume_worker(id, event, ids).await
        {
            return Ok(resume::respond(last, rest));
        }
        let rest = resume::from_record(
            self.engine.clone(),
            &self.waiting,
            by.clone(),
            namespace.to_owned(),
            parsed,
        );
        Ok(resume::respond(last, rest))
    }

    fn touch_every_ms(&self) -> i64 {
        (self.manager.idle().as_millis() / 4) as i64
    }

    /// Tells the store the session is in use, in the background; a session
    /// closed meanwhile loses its worker here.
    fn touch(&self, session: McpSession) {
        let engine = self.engine.clone();
        let manager = self.manager.clone();
        tokio::spawn(async move {
            let id = session.id.clone();
            match engine.mcp().touch_session(session).await {
                Err(EngineError::NotFound { .. }) => manager.drop_worker(&id).await,
                Err(e) => tracing::warn!(error = %e, "cannot record an MCP session's use"),
                Ok(()) => {}
            }
        });
    }

    async fn buffer(&self, request: Request) -> Result<(Parts, Bytes), ApiError> {
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, self.max_body_bytes)
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    ApiWord::PayloadTooLarge,
                    format!("the body is larger than {} bytes", self.max_body_bytes),
                )
            })?;
        Ok((parts, bytes))
    }
}

/// The `Last-Event-ID` of a `GET` that resumes a call's stream: one of
/// joch's call stream ids (`resume.rs`), not the notification stream's.
fn resumes_call(request: &Request) -> Option<String> {
    if request.method() != Method::GET {
        return None;
    }
    let last = request.headers().get("last-event-id")?.to_str().ok()?;
    resume::parse(last).map(|_| last.to_owned())
}

/// `/v1/namespaces/{ns}/mcp`, else the `Joch-Namespace` header, else `default`.
fn namespace_of(request: &Request) -> Result<String, ApiError> {
    let from_path = request
        .uri()
        .path()
        .strip_prefix("/v1/namespaces/")
        .and_then(|rest| rest.split('/').next());
    let from_header = || {
        request
            .headers()
            .get(NAMESPACE_HEADER)
            .and_then(|v| v.to_str().ok())
    };
    let namespace = from_path.or_else(from_header).unwrap_or("default");
    validate_namespace(namespace).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ApiWord::InvalidNamespace,
            e.to_string(),
        )
    })?;
    Ok(namespace.to_owned())
}

/// The engine's answers about sessions, as the MCP transport words them.
fn session_error(e: EngineError) -> ApiError {
    match e {
        EngineError::NotFound { .. } => ApiError::new(
            StatusCode::NOT_FOUND,
            ApiWord::SessionNotFound,
            "no open MCP session with this id: initialize a new one",
        ),
        EngineError::Refused { code, message } if code == joch_engine::TOO_MANY_SESSIONS => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message)
        }
        e => ApiError::from(e),
    }
}
