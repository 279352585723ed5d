//! Upstream MCP servers, through the official Rust SDK (`rmcp`): one live
//! connection per `McpServer` (per user, for a server taking each user's
//! own token: see `slots.rs`), opened on first use and opened again when
//! the server has gone away or the token changed.
//!
//! A call is sent once. If the connection fails while the call is in
//! flight, the call fails: it may have run upstream, and only the engine
//! may decide whether to run it again.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use joch_core::credential::{UpstreamCredentials, UpstreamRef};
use joch_core::mcp::{McpProtocol, McpServerSpec};
use joch_core::mcp_surface::{ClientCapabilities, McpOperation};
use joch_core::{
    Backend, CallError, ErrorCode, Invocation, McpServer, ToolBackend, ToolDiscovery, ToolFailure,
};
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService, ServiceError};
use serde_json::{Value, json};

mod call;
mod connect;
mod handler;
mod http;
mod listen;
mod progress;
mod rounds;
mod slots;
mod surface;
mod tasks;

pub use slots::MAX_USER_CONNECTIONS;

use call::{Ended, call_tool};
use connect::{Opened, auth_for, connect};
use handler::{NoticeSink, Upstream};
use progress::ProgressRoutes;

/// How long opening a connection (spawn or HTTP, then the MCP handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

type Client = RunningService<RoleClient, Upstream>;

/// The `mcp` backend: calls tools of upstream MCP servers and lists them.
#[derive(Default)]
pub struct McpClients {
    /// One slot per server, set of capabilities declared upstream and,
    /// for per-user servers, user (`namespace/name#caps@user`).
    slots: slots::Slots,
    /// Where every connection's progress notifications go.
    progress: ProgressRoutes,
    /// Where notifications not about one call go.
    notices: NoticeSink,
    /// Where `spec.http.auth.oauth2` tokens come from.
    credentials: Option<Arc<dyn UpstreamCredentials>>,
    /// The `subscriptions/listen` streams of servers of 2026-07-28.
    listeners: listen::Listeners,
    /// The `ttlMs` of each server's last tool listing (`namespace/name`).
    listed_ttls: std::sync::Mutex<std::collections::HashMap<String, Option<u64>>>,
}

struct Connection {
    /// The transport settings it was opened with; a change reopens it.
    spec: McpServerSpec,
    /// The `Authorization` it was opened with; a refreshed token reopens it.
    authorization: Option<String>,
    client: Arc<Client>,
}

impl McpClients {
    /// A backend with no connections yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same, getting OAuth tokens of servers from `credentials`.
    pub fn with_credentials(mut self, credentials: Arc<dyn UpstreamCredentials>) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// The same, keeping at most `max` per-user connections open
    /// (default [`MAX_USER_CONNECTIONS`]).
    pub fn with_user_connections(mut self, max: usize) -> Self {
        self.slots.max_user = max.max(1);
        self
    }

    /// The same, closing a per-user connection unused for `idle` (default
    /// 2 minutes; at least 100 ms).
    pub fn with_user_connection_idle(mut self, idle: std::time::Duration) -> Self {
        self.slots.idle = idle.max(std::time::Duration::from_millis(100));
        self
    }

    /// Which user's token a request to `server` made for `user` carries:
    /// `user` for a server taking per-user tokens, else none (joch's own).
    fn user_of<'u>(server: &McpServer, user: Option<&'u str>) -> Option<&'u str> {
        let per_user = server.spec.http.as_ref().and_then(|h| h.per_user());
        per_user.and(user)
    }

    /// The `Authorization` header a request to `server` for `user` carries
    /// now: `spec.http.auth`'s, with the user's own token on a per-user
    /// server; without a user there (listing tools), `spec.http.listAuth`'s.
    async fn authorization(
        &self,
        server: &McpServer,
        user: Option<&str>,
    ) -> Result<Option<String>, CallError> {
        let Some((http, auth, user)) = auth_for(server, user) else {
            return Ok(None);
        };
        let upstream = UpstreamRef::mcp_server(&server.metadata.name);
        crate::oauth::authorization(
            auth,
            &server.metadata.namespace,
            &upstream,
            &http.url,
            self.credentials.as_deref(),
            user,
        )
        .await
        .map(Some)
    }

    /// Marks the token `sent` for `user` as refused (the server answered
    /// 401), so that the next connection carries a new one; false when it
    /// is no OAuth token (a bearer secret: sending it again cannot help).
    async fn token_refused(
        &self,
        server: &McpServer,
        user: Option<&str>,
        sent: Option<&str>,
    ) -> bool {
        let oauth2 = auth_for(server, user).and_then(|(_, a, u)| Some((a.oauth2.as_ref()?, u)));
        let (Some((oauth2, user)), Some(sent), Some(credentials)) =
            (oauth2, sent, self.credentials.as_ref())
        else {
            return false;
        };
        let upstream = UpstreamRef::mcp_server(&server.metadata.name);
        let ns = &server.metadata.namespace;
        credentials.refused(ns, &upstream, oauth2, user, sent).await;
        true
    }

    fn key(server: &McpServer, caps: ClientCapabilities, user: Option<&str>) -> String {
        format!(
            "{}/{}#{}{}{}{}@{}",
            server.metadata.namespace,
            server.metadata.name,
            u8::from(caps.sampling),
            u8::from(caps.elicitation_form),
            u8::from(caps.elicitation_url),
            u8::from(caps.roots),
            user.unwrap_or_default()
        )
    }

    /// The live connection to `server` declaring `caps`, for `user` on a
    /// per-user server, opened if there is none, if it closed, or if the
    /// server's transport settings or the token changed.
    /// A connection refused with a 401 at its handshake is opened once
    /// more, with a new token.
    async fn client(
        &self,
        server: &McpServer,
        caps: ClientCapabilities,
        user: Option<&str>,
    ) -> Result<Arc<Client>, CallError> {
        let user = Self::user_of(server, user);
        let client = match self.open(server, caps, user).await {
            Err(Opened::Refused(sent, _))
                if self.token_refused(server, user, Some(&sent)).await =>
            {
                let again = self.open(server, caps, user).await;
                again.map_err(Opened::into_error)
            }
            other => other.map_err(Opened::into_error),
        }?;
        // A server without sessions says what changed on a stream of its
        // own, opened on a connection that carries no user's token.
        if user.is_none() && listen::sessionless(&client) {
            self.listeners.ensure(server, &client);
        }
        Ok(client)
    }

    async fn open(
        &self,
        server: &McpServer,
        caps: ClientCapabilities,
        user: Option<&str>,
    ) -> Result<Arc<Client>, Opened> {
        let authorization = self.authorization(server, user).await?;
        let slot = self
            .slots
            .get(Self::key(server, caps, user), user.is_some())?;
        let mut slot = slot.lock().await;
        if let Some(live) = slot.as_ref() {
            let same = slots::same_transport(&live.spec, &server.spec)
                && live.authorization == authorization;
            if same && !live.client.peer().is_transport_closed() {
                return Ok(live.client.clone());
            }
        }
        if let Some(stale) = slot.take() {
            stale.client.cancellation_token().cancel();
        }
        let handler = Upstream {
            progress: self.progress.clone(),
            calls: Arc::default(),
            capabilities: caps,
            tasks: server.spec.protocol == McpProtocol::Auto,
            notices: self.notices.clone(),
            server: (
                server.metadata.namespace.clone(),
                server.metadata.name.clone(),
            ),
            user: user.map(str::to_owned),
            authorization: authorization.clone(),
            listed: Arc::default(),
        };
        let client = match connect(server, handler, authorization.as_deref()).await {
            Ok(client) => Arc::new(client),
            Err(e) if e.code == ErrorCode::UpstreamAuthFailed.as_str() => {
                return Err(match authorization {
                    Some(sent) => Opened::Refused(sent, e),
                    None => Opened::Failed(e),
                });
            }
            Err(e) => return Err(Opened::Failed(e)),
        };
        *slot = Some(Connection {
            spec: server.spec.clone(),
            authorization,
            client: client.clone(),
        });
        Ok(client)
    }

    /// Drops the connection to `server` (if it is still `client`), so the
    /// next use opens a fresh one: after a transport error or a timeout the
    /// session may be gone upstream.
    async fn forget(&self, server: &McpServer, client: &Arc<Client>) {
        let service = client.service();
        let key = Self::key(server, service.capabilities, service.user.as_deref());
        let Some(slot) = self.slots.existing(&key) else {
            return;
        };
        let mut slot = slot.lock().await;
        if slot
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(&c.client, client))
        {
            if let Some(stale) = slot.take() {
                stale.client.cancellation_token().cancel();
            }
        }
    }

    async fn failed(
        &self,
        server: &McpServer,
        client: &Arc<Client>,
        error: ServiceError,
    ) -> CallError {
        let name = &server.metadata.name;
        if error.auth_challenge().is_some() {
            self.forget(server, client).await;
            return CallError::new(
                ErrorCode::UpstreamAuthFailed,
                format!("MCP server {name:?} refused the request's authorization (HTTP 401)"),
            );
        }
        match error {
            ServiceError::McpError(e) => CallError {
                code: ErrorCode::McpError.as_str().to_owned(),
                message: format!("MCP server {name:?} refused the request: {}", e.message),
                details: Some(json!({"code": e.code.0, "data": e.data})),
            },
            ServiceError::Timeout { timeout } => {
                self.forget(server, client).await;
                CallError::new(
                    ErrorCode::BackendTimeout,
                    format!(
                        "MCP server {name:?} did not answer within {} ms",
                        timeout.as_millis()
                    ),
                )
            }
            other => {
                self.forget(server, client).await;
                CallError::new(
                    ErrorCode::McpUnavailable,
                    format!("MCP server {name:?} cannot be reached: {other}"),
                )
            }
        }
    }
}

#[async_trait]
impl ToolBackend for McpClients {
    fn kind(&self) -> &'static str {
        "mcp"
    }

    async fn invoke(&self, invocation: Invocation<'_>) -> Result<Value, ToolFailure> {
        let (Backend::Mcp(backend), Some(server)) =
            (&invocation.tool.spec.backend, invocation.mcp_server)
        else {
            return Err(CallError::new(
                ErrorCode::BackendMisconfigured,
                "an MCP tool was invoked without its server",
            ));
        };
        // What the upstream is told the client can answer; whether the
        // client answers by retrying is joch's business, not the upstream's.
        let caps = ClientCapabilities {
            rounds: false,
            ..invocation
                .client
                .map(|c| c.capabilities())
                .unwrap_or_default()
        };
        let user = invocation.upstream_user;
        let timeout = Duration::from_millis(server.spec.timeout_ms);
        let (mut refused_once, mut relisted) = (false, false);
        let answer = loop {
            let client = self.client(server, caps, user).await?;
            if backend.operation != McpOperation::CallTool {
                return self
                    .read_or_get(
                        server,
                        &client,
                        backend.operation,
                        invocation.args,
                        (invocation.client, invocation.input),
                    )
                    .await;
            }
            let schema = &invocation.tool.spec.input_schema;
            handler::learn_param_headers(&client, schema, timeout).await;
            let request = rounds::resumed(
                CallToolRequestParams::new(backend.tool.clone())
                    .with_arguments(invocation.args.clone()),
                invocation.input,
            );
            let running = call_tool(
                &client,
                &self.progress,
                request,
                invocation.chunks,
                invocation.client,
            );
            match tokio::time::timeout(timeout, running).await {
                Ok(Ok(result)) => break result,
                Ok(Err(Ended::Cancelled)) => {
                    return Err(CallError::new(
                        ErrorCode::Cancelled,
                        "the client cancelled the call; the server was told",
                    ));
                }
                // A 401 mid-session: the server did not take the call, so
                // it is sent once more, with a new token (refreshed; or
                // the user's consent is required again).
                Ok(Err(Ended::Failed(e))) if e.auth_challenge().is_some() && !refused_once => {
                    refused_once = true;
                    self.forget(server, &client).await;
                    let service = client.service();
                    let (who, sent) = (service.user.as_deref(), service.authorization.as_deref());
                    if !self.token_refused(server, who, sent).await {
                        return Err(self.failed(server, &client, e).await);
                    }
                }
                // The server found the call's `Mcp-Param-*` headers missing
                // or wrong (SEP-2243's -32020, answered before anything
                // runs): the connection lists the tools again, which tells
                // rmcp their schemas, and the call is sent once more.
                Ok(Err(Ended::Failed(ServiceError::McpError(e))))
                    if e.code.0 == handler::HEADER_MISMATCH && !relisted =>
                {
                    relisted = true;
                    handler::relearn_param_headers(&client, timeout).await;
                }
                Ok(Err(Ended::Failed(e))) => return Err(self.failed(server, &client, e).await),
                Ok(Err(Ended::Refused(e))) => return Err(e),
                Err(_) => {
                    return Err(self
                        .failed(server, &client, ServiceError::Timeout { timeout })
                        .await);
                }
            }
        };
        let result = serde_json::to_value(&answer).map_err(|e| {
            CallError::new(
                ErrorCode::McpError,
                format!("the server's result cannot be read: {e}"),
            )
        })?;
        if answer.is_error == Some(true) {
            return Err(CallError {
                code: ErrorCode::ToolError.as_str().to_owned(),
                message: first_text(&result)
                    .unwrap_or_else(|| "the tool reported an error".to_owned()),
                details: Some(result),
            });
        }
        Ok(result)
    }

    fn discovery(&self) -> Option<&dyn ToolDiscovery> {
        Some(self)
    }

    fn surface(&self) -> Option<&dyn joch_core::mcp_surface::McpSurface> {
        Some(self)
    }
}

#[async_trait]
impl ToolDiscovery for McpClients {
    /// Listed as a client that can relay everything: a server that offers
    /// some tools only to clients that sample or elicit lists them too (a
    /// call from a client that cannot goes over a connection that says
    /// so, and the server answers it as it sees fit).
    async fn list_tools(&self, server: &McpServer) -> Result<Vec<Value>, ToolFailure> {
        let everything = ClientCapabilities {
            sampling: true,
            elicitation_form: true,
            elicitation_url: true,
            roots: true,
            rounds: false,
        };
        let client = self.client(server, everything, None).await?;
        let timeout = Duration::from_millis(server.spec.timeout_ms);
        let listed = client.list_all_tools_with_cache_hint();
        let tools = match tokio::time::timeout(timeout, listed).await {
            Ok(Ok(listed)) => {
                let key = format!("{}/{}", server.metadata.namespace, server.metadata.name);
                self.listed_ttls
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, listed.ttl_ms);
                listed.items
            }
            Ok(Err(e)) => return Err(self.failed(server, &client, e).await),
            Err(_) => {
                return Err(self
                    .failed(server, &client, ServiceError::Timeout { timeout })
                    .await);
            }
        };
        tools
            .iter()
            .map(|tool| {
                serde_json::to_value(tool).map_err(|e| {
                    CallError::new(
                        ErrorCode::McpError,
                        format!("a listed tool cannot be read: {e}"),
                    )
                })
            })
            .collect()
    }

    fn listed_ttl_ms(&self, server: &McpServer) -> Option<u64> {
        let key = format!("{}/{}", server.metadata.namespace, server.metadata.name);
        let ttls = self.listed_ttls.lock().unwrap_or_else(|e| e.into_inner());
        ttls.get(&key).copied().flatten()
    }

    /// Closes the connections (and with them the sessions, which rmcp
    /// ends with a DELETE, and the `subscriptions/listen` stream) opened
    /// for a transport the server no longer has, or for a deleted server.
    /// A call still running on one fails (`mcp_unavailable`): its server
    /// is no longer the one configured.
    async fn server_changed(&self, namespace: &str, name: &str, current: Option<&McpServer>) {
        let prefix = format!("{namespace}/{name}#");
        let closed = self
            .slots
            .close_stale(&prefix, current.map(|s| &s.spec))
            .await;
        if current.is_none() {
            self.listeners.forget(&format!("{namespace}/{name}"));
        }
        if closed > 0 {
            tracing::debug!(
                server = name,
                closed,
                "MCP connections closed: the server changed"
            );
        }
    }
}

/// The first text block of a tool result, for `status.error.message`.
fn first_text(result: &Value) -> Option<String> {
    result
        .get("content")?
        .as_array()?
        .iter()
        .find(|block| block.get("type").and_then(Value::as_str) == Some("text"))
        .and_then(|block| block.get("text"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}
