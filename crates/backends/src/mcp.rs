//! Upstream MCP servers, through the official Rust SDK (`rmcp`): one live
//! connection per `McpServer`, opened on first use and opened again when
//! the server has gone away.
//!
//! A call is sent once. If the connection fails while the call is in
//! flight, the call fails: it may have run upstream, and only the engine
//! may decide whether to run it again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use joch_core::credential::{UpstreamCredentials, UpstreamRef};
use joch_core::mcp::{McpProtocol, McpServerSpec};
use joch_core::mcp_surface::{CallClient, ClientCapabilities, McpOperation};
use joch_core::{
    Backend, CallError, ErrorCode, Invocation, McpServer, ToolBackend, ToolDiscovery, ToolFailure,
};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};

mod handler;
mod progress;
mod rounds;
mod surface;
mod tasks;

use handler::{NoticeSink, Upstream};
use progress::ProgressRoutes;

/// How long opening a connection (spawn or HTTP, then the MCP handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

type Client = RunningService<RoleClient, Upstream>;

/// The `mcp` backend: calls tools of upstream MCP servers and lists them.
#[derive(Default)]
pub struct McpClients {
    /// One slot per server and set of capabilities declared upstream
    /// (`namespace/name#caps`); the slot's lock makes concurrent first
    /// calls share one connection instead of racing.
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Connection>>>>>,
    /// Where every connection's progress notifications go.
    progress: ProgressRoutes,
    /// Where notifications not about one call go.
    notices: NoticeSink,
    /// Where `spec.http.auth.oauth2` tokens come from.
    credentials: Option<Arc<dyn UpstreamCredentials>>,
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

    /// The `Authorization` header `server`'s `spec.http.auth` asks for now.
    async fn authorization(&self, server: &McpServer) -> Result<Option<String>, CallError> {
        let Some((http, auth)) = server
            .spec
            .http
            .as_ref()
            .and_then(|h| Some((h, h.auth.as_ref()?)))
        else {
            return Ok(None);
        };
        let upstream = UpstreamRef::mcp_server(&server.metadata.name);
        crate::oauth::authorization(
            auth,
            &server.metadata.namespace,
            &upstream,
            &http.url,
            self.credentials.as_deref(),
            // Tools are listed without a user: per-user tokens are for Endpoints.
            None,
        )
        .await
        .map(Some)
    }

    fn slot(
        &self,
        server: &McpServer,
        caps: ClientCapabilities,
    ) -> Arc<tokio::sync::Mutex<Option<Connection>>> {
        let key = format!(
            "{}/{}#{}{}{}",
            server.metadata.namespace,
            server.metadata.name,
            u8::from(caps.sampling),
            u8::from(caps.elicitation_form),
            u8::from(caps.elicitation_url)
        );
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(key).or_default().clone()
    }

    /// The live connection to `server` declaring `caps`, opened if there
    /// is none, if it closed, or if the server's transport settings changed.
    async fn client(
        &self,
        server: &McpServer,
        caps: ClientCapabilities,
    ) -> Result<Arc<Client>, CallError> {
        let authorization = self.authorization(server).await?;
        let slot = self.slot(server, caps);
        let mut slot = slot.lock().await;
        if let Some(live) = slot.as_ref() {
            let same = live.spec.stdio == server.spec.stdio
                && live.spec.http == server.spec.http
                && live.spec.protocol == server.spec.protocol
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
        };
        let client = Arc::new(connect(server, handler, authorization.as_deref()).await?);
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
        let caps = client.service().capabilities;
        let slot = self.slot(server, caps);
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

/// As `spec.protocol` says: `initialize` (the versions before
/// 2026-07-28), or `server/discover` first and 2026-07-28 if the server
/// speaks it, else `initialize`.
fn lifecycle(server: &McpServer) -> ClientLifecycleMode {
    match server.spec.protocol {
        McpProtocol::Legacy => ClientLifecycleMode::Initialize,
        McpProtocol::Auto => ClientLifecycleMode::Auto {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            legacy_version: None,
        },
    }
}

async fn connect(
    server: &McpServer,
    handler: Upstream,
    authorization: Option<&str>,
) -> Result<Client, CallError> {
    let lifecycle = lifecycle(server);
    let modern = !matches!(lifecycle, ClientLifecycleMode::Initialize);
    let first = handshake(server, handler.clone(), authorization, lifecycle).await;
    match first {
        // rmcp falls back to `initialize` when `server/discover` is refused
        // as unknown; a server that answers it naming only older versions
        // fails the handshake instead, and is spoken to with `initialize`.
        Err(_) if modern => {
            let legacy = ClientLifecycleMode::Initialize;
            handshake(server, handler, authorization, legacy).await
        }
        first => first,
    }
}

async fn handshake(
    server: &McpServer,
    handler: Upstream,
    authorization: Option<&str>,
    lifecycle: ClientLifecycleMode,
) -> Result<Client, CallError> {
    let name = &server.metadata.name;
    let unavailable = |what: String| {
        CallError::new(
            ErrorCode::McpUnavailable,
            format!("MCP server {name:?} cannot be reached: {what}"),
        )
    };
    let handshake = async {
        if let Some(stdio) = &server.spec.stdio {
            let mut command = tokio::process::Command::new(&stdio.command);
            // joch's own settings and secrets (JOCH_ADMIN_TOKEN, JOCH_VAULT_KEY,
            // the store's URL) are not the server's: it gets the rest of the
            // environment, and what its `spec.stdio.env` names.
            for (key, _) in std::env::vars_os() {
                if key.to_string_lossy().starts_with("JOCH_") {
                    command.env_remove(key);
                }
            }
            command
                .args(&stdio.args)
                .envs(&stdio.env)
                .kill_on_drop(true);
            let (transport, _) = TokioChildProcess::builder(command)
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(|e| unavailable(format!("cannot start {:?}: {e}", stdio.command)))?;
            handler
                .clone()
                .serve_with_lifecycle(transport, lifecycle.clone())
                .await
                .map_err(|e| unavailable(e.to_string()))
        } else if let Some(http) = &server.spec.http {
            let mut headers = HashMap::new();
            let secrets = http
                .secret_headers
                .iter()
                .map(|(header, source)| crate::secret(source).map(|value| (header, value)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(unavailable)?;
            let plain = http.headers.iter().map(|(h, v)| (h, v.clone()));
            let auth_header = "authorization".to_owned();
            let auth = authorization.map(|value| (&auth_header, value.to_owned()));
            for (header, value) in plain.chain(secrets).chain(auth) {
                let header = HeaderName::try_from(header.as_str())
                    .map_err(|e| unavailable(format!("header {header:?}: {e}")))?;
                let value = HeaderValue::try_from(value)
                    .map_err(|_| unavailable(format!("header {header}: value is not valid")))?;
                headers.insert(header, value);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(http.url.as_str())
                .custom_headers(headers);
            crate::outbound::check_url(&http.url).map_err(unavailable)?;
            let client = crate::outbound::client_builder()
                .build()
                .map_err(|e| unavailable(e.to_string()))?;
            let transport = StreamableHttpClientTransport::with_client(client, config);
            handler
                .serve_with_lifecycle(transport, lifecycle.clone())
                .await
                .map_err(|e| unavailable(e.to_string()))
        } else {
            Err(unavailable("the server names no transport".to_owned()))
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, handshake)
        .await
        .map_err(|_| {
            unavailable(format!(
                "no handshake within {} s",
                CONNECT_TIMEOUT.as_secs()
            ))
        })?
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
        let caps = invocation
            .client
            .map(|c| c.capabilities())
            .unwrap_or_default();
        let client = self.client(server, caps).await?;
        let timeout = Duration::from_millis(server.spec.timeout_ms);
        if backend.operation != McpOperation::CallTool {
            return self
                .read_or_get(
                    server,
                    &client,
                    backend.operation,
                    invocation.args,
                    invocation.client,
                )
                .await;
        }
        let request = CallToolRequestParams::new(backend.tool.clone())
            .with_arguments(invocation.args.clone());
        let running = call_tool(
            &client,
            &self.progress,
            request,
            invocation.chunks,
            invocation.client,
        );
        let answer = match tokio::time::timeout(timeout, running).await {
            Ok(Ok(result)) => result,
            Ok(Err(Ended::Cancelled)) => {
                return Err(CallError::new(
                    ErrorCode::Cancelled,
                    "the client cancelled the call; the server was told",
                ));
            }
            Ok(Err(Ended::Failed(e))) => return Err(self.failed(server, &client, e).await),
            Ok(Err(Ended::Refused(e))) => return Err(e),
            Err(_) => {
                return Err(self
                    .failed(server, &client, ServiceError::Timeout { timeout })
                    .await);
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
        };
        let client = self.client(server, everything).await?;
        let timeout = Duration::from_millis(server.spec.timeout_ms);
        let tools = match tokio::time::timeout(timeout, client.list_all_tools()).await {
            Ok(Ok(tools)) => tools,
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

/// How a `tools/call` ended without a result.
enum Ended {
    /// The client cancelled it; the server was sent `notifications/cancelled`.
    Cancelled,
    Failed(ServiceError),
    /// The server asked what could not be answered (`rounds.rs`).
    Refused(CallError),
}

impl From<ServiceError> for Ended {
    fn from(e: ServiceError) -> Self {
        Ended::Failed(e)
    }
}

/// `tools/call`, passing each progress notification the server sends for
/// it to `sink` while it runs, and what the server asks during it to
/// `caller`; if `caller` cancels, the server is told and the call ends.
/// (rmcp gives every request its own progress token, so the request is
/// sent first and its token routed then; a report sent before that is
/// missed, which costs a chunk, never the result.)
async fn call_tool(
    client: &Client,
    routes: &ProgressRoutes,
    mut params: CallToolRequestParams,
    sink: Option<&dyn joch_core::OutputChunks>,
    caller: Option<&Arc<dyn CallClient>>,
) -> Result<CallToolResult, Ended> {
    for _ in 0..rounds::MAX_ROUNDS {
        match call_once(client, routes, params.clone(), sink, caller).await? {
            ServerResult::CallToolResult(result) => return Ok(result),
            ServerResult::CreateTaskResult(created) => {
                return tasks::follow(client, created.task, sink, caller).await;
            }
            ServerResult::InputRequiredResult(asked) => {
                params = rounds::answered(params, asked, caller)
                    .await
                    .map_err(Ended::Refused)?;
            }
            _ => return Err(Ended::Failed(ServiceError::UnexpectedResponse)),
        }
    }
    Err(Ended::Refused(CallError::new(
        ErrorCode::McpError,
        format!(
            "the server still asked for input after {} rounds",
            rounds::MAX_ROUNDS
        ),
    )))
}

/// One `tools/call` request of a call: its result, or (2026-07-28) the
/// server's questions.
async fn call_once(
    client: &Client,
    routes: &ProgressRoutes,
    params: CallToolRequestParams,
    sink: Option<&dyn joch_core::OutputChunks>,
    caller: Option<&Arc<dyn CallClient>>,
) -> Result<ServerResult, Ended> {
    if let Some(caller) = caller {
        // Cancelled before it was sent: a server may ignore the cancellation
        // of a request it has not seen yet, so it is not sent at all.
        tokio::select! {
            biased;
            () = caller.cancelled() => return Err(Ended::Cancelled),
            () = std::future::ready(()) => {}
        }
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = client
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await?;
    let _call = caller.map(|c| client.service().route(&handle.id, c.clone()));
    let (_route, mut progress) = routes.route(&handle.progress_token);
    let (id, peer) = (handle.id.clone(), handle.peer.clone());
    let response = handle.await_response();
    tokio::pin!(response);
    let cancelled = async {
        match caller {
            Some(caller) => caller.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(cancelled);
    let response = loop {
        tokio::select! {
            response = &mut response => break response,
            Some(chunk) = progress.recv() => if let Some(sink) = sink { sink.chunk(chunk) },
            () = &mut cancelled => {
                let notice: Result<CancelledNotificationParam, _> = serde_json::from_value(
                    json!({"requestId": id, "reason": "the client cancelled the call"}),
                );
                if let Ok(notice) = notice {
                    let _ = peer.notify_cancelled(notice).await;
                }
                return Err(Ended::Cancelled);
            }
        }
    };
    while let Ok(chunk) = progress.try_recv() {
        if let Some(sink) = sink {
            sink.chunk(chunk);
        }
    }
    Ok(response?)
}
