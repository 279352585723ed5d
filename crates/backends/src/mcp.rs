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
use joch_core::mcp::McpServerSpec;
use joch_core::{
    Backend, CallError, ErrorCode, Invocation, McpServer, ToolBackend, ToolDiscovery, ToolFailure,
};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};

mod progress;

use progress::ProgressRoutes;

/// How long opening a connection (spawn or HTTP, then the MCP handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

type Client = RunningService<RoleClient, ProgressRoutes>;

/// The `mcp` backend: calls tools of upstream MCP servers and lists them.
#[derive(Default)]
pub struct McpClients {
    /// One slot per server (`namespace/name`); the slot's lock makes
    /// concurrent first calls share one connection instead of racing.
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Connection>>>>>,
    /// Where every connection's progress notifications go.
    progress: ProgressRoutes,
}

struct Connection {
    /// The transport settings it was opened with; a change reopens it.
    spec: McpServerSpec,
    client: Arc<Client>,
}

impl McpClients {
    /// A backend with no connections yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn slot(&self, server: &McpServer) -> Arc<tokio::sync::Mutex<Option<Connection>>> {
        let key = format!("{}/{}", server.metadata.namespace, server.metadata.name);
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(key).or_default().clone()
    }

    /// The live connection to `server`, opened if there is none, if it
    /// closed, or if the server's transport settings changed.
    async fn client(&self, server: &McpServer) -> Result<Arc<Client>, CallError> {
        let slot = self.slot(server);
        let mut slot = slot.lock().await;
        if let Some(live) = slot.as_ref() {
            let same = live.spec.stdio == server.spec.stdio && live.spec.http == server.spec.http;
            if same && !live.client.peer().is_transport_closed() {
                return Ok(live.client.clone());
            }
        }
        if let Some(stale) = slot.take() {
            stale.client.cancellation_token().cancel();
        }
        let client = Arc::new(connect(server, self.progress.clone()).await?);
        *slot = Some(Connection {
            spec: server.spec.clone(),
            client: client.clone(),
        });
        Ok(client)
    }

    /// Drops the connection to `server` (if it is still `client`), so the
    /// next use opens a fresh one: after a transport error or a timeout the
    /// session may be gone upstream.
    async fn forget(&self, server: &McpServer, client: &Arc<Client>) {
        let slot = self.slot(server);
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

async fn connect(server: &McpServer, progress: ProgressRoutes) -> Result<Client, CallError> {
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
            command
                .args(&stdio.args)
                .envs(&stdio.env)
                .kill_on_drop(true);
            let (transport, _) = TokioChildProcess::builder(command)
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(|e| unavailable(format!("cannot start {:?}: {e}", stdio.command)))?;
            progress
                .clone()
                .serve(transport)
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
            for (header, value) in plain.chain(secrets) {
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
            progress
                .serve(transport)
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
        let client = self.client(server).await?;
        let request = CallToolRequestParams::new(backend.tool.clone())
            .with_arguments(invocation.args.clone());
        let timeout = Duration::from_millis(server.spec.timeout_ms);
        let outcome = match invocation.chunks {
            None => tokio::time::timeout(timeout, client.call_tool(request)).await,
            // Someone watches this call: pass on the progress the server
            // reports against the request's token as it comes.
            Some(sink) => {
                tokio::time::timeout(
                    timeout,
                    call_reporting_progress(&client, &self.progress, request, sink),
                )
                .await
            }
        };
        let answer = match outcome {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => return Err(self.failed(server, &client, e).await),
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
}

#[async_trait]
impl ToolDiscovery for McpClients {
    async fn list_tools(&self, server: &McpServer) -> Result<Vec<Value>, ToolFailure> {
        let client = self.client(server).await?;
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

/// `tools/call`, passing each progress notification the server sends for
/// it to `sink` while it runs. (rmcp gives every request its own progress
/// token, so the request is sent first and its token routed then; a report
/// sent before that is missed, which costs a chunk, never the result.)
async fn call_reporting_progress(
    client: &Client,
    routes: &ProgressRoutes,
    params: CallToolRequestParams,
    sink: &dyn joch_core::OutputChunks,
) -> Result<CallToolResult, ServiceError> {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = client
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await?;
    let (_route, mut progress) = routes.route(&handle.progress_token);
    let response = handle.await_response();
    tokio::pin!(response);
    let response = loop {
        tokio::select! {
            response = &mut response => break response,
            Some(chunk) = progress.recv() => sink.chunk(chunk),
        }
    };
    while let Ok(chunk) = progress.try_recv() {
        sink.chunk(chunk);
    }
    match response? {
        ServerResult::CallToolResult(result) => Ok(result),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}
