//! `joch mcp`: joch as a stdio MCP server, for clients that start their
//! tools as processes (Claude Desktop, IDEs, agent SDKs' stdio transports).
//!
//! By default it is a thin proxy to a running joch's streamable HTTP
//! endpoint, so every call lands in that server's ledger. With `--db` it
//! runs the engine in-process on that SQLite file instead (no server needed;
//! don't point a running server at the same file).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use joch_server::mcp::JochMcp;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig,
    ClientRequest, ElicitRequestParams, ElicitResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerConfig, ServerResult,
};
use rmcp::service::{
    ElicitationMode, NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient,
    RoleServer,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, ServerHandler, ServiceExt};
use serde_json::json;

use crate::cli::{ClientArgs, McpAction, McpArgs};
use crate::client::Client;

pub async fn run(client: &ClientArgs, args: McpArgs) -> anyhow::Result<()> {
    match args.action {
        Some(McpAction::Accept { mcp_server, tool }) => {
            accept(client, &args.namespace, &mcp_server, tool).await
        }
        None => match &args.db {
            Some(db) => embedded(db, args.namespace).await,
            None => proxy(client, &args.namespace).await,
        },
    }
}

async fn accept(
    client: &ClientArgs,
    namespace: &str,
    server: &str,
    tool: Option<String>,
) -> anyhow::Result<()> {
    let body = json!({"tool": tool});
    let path = format!("/v1/namespaces/{namespace}/mcpservers/{server}/accept");
    let answer = Client::new(client)?
        .expect_ok(reqwest::Method::POST, &path, Some(&body))
        .await?;
    let accepted = tool.map_or_else(|| "every held tool".to_owned(), |t| format!("{server}.{t}"));
    println!("accepted the current definition of {accepted}");
    if let Some(tools) = answer.pointer("/status/tools").and_then(|t| t.as_object()) {
        for (name, state) in tools {
            let held = state.get("quarantined").and_then(|q| q.as_bool()) == Some(true);
            println!(
                "  {server}.{name}: {}",
                if held { "quarantined" } else { "ok" }
            );
        }
    }
    Ok(())
}

async fn embedded(db: &std::path::Path, namespace: String) -> anyhow::Result<()> {
    let joch = joch_tools::open_engine(
        &joch_tools::StoreLocation::Sqlite(db.to_owned()),
        joch_engine::EngineConfig::default(),
        joch_engine::Workers::default(),
    )
    .await?;
    let engine = joch.engine().clone();
    let handler = JochMcp::for_stdio(
        engine,
        namespace,
        joch_engine::Principal::local(),
        Duration::from_secs(1),
    );
    let session = handler
        .serve(rmcp::transport::io::stdio())
        .await
        .context("MCP handshake on stdio failed")?;
    session.waiting().await.context("MCP session failed")?;
    joch.shutdown().await?;
    Ok(())
}

async fn proxy(client: &ClientArgs, namespace: &str) -> anyhow::Result<()> {
    let url = format!(
        "{}/v1/namespaces/{namespace}/mcp",
        client.server.trim_end_matches('/')
    );
    let downstream = Arc::new(OnceLock::new());
    let tokens = Arc::new(Mutex::new(HashMap::new()));
    let forwarder = Forwarder {
        downstream: downstream.clone(),
        tokens: tokens.clone(),
    };
    // The proxy acts as the token's holder: joch's server applies that
    // principal's rules (its tool selector, separation of duties).
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
    if let Some(token) = &client.token {
        config = config.auth_header(token.clone());
    }
    let upstream = forwarder
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .with_context(|| format!("cannot reach joch's MCP endpoint at {url}"))?;
    let proxy = Proxy {
        upstream: upstream.peer().clone(),
        downstream,
        tokens,
    };
    let running = proxy
        .serve(rmcp::transport::io::stdio())
        .await
        .context("MCP handshake on stdio failed")?;
    running.waiting().await.context("MCP session failed")?;
    let _ = upstream.cancel().await;
    Ok(())
}

/// Progress tokens of calls in flight: the one joch's server sees (rmcp
/// mints its own) to the one the stdio client chose.
type Tokens = Arc<Mutex<HashMap<String, rmcp::model::ProgressToken>>>;

/// The stdio side: answers the client by asking the server.
struct Proxy {
    upstream: Peer<RoleClient>,
    downstream: Arc<OnceLock<Peer<RoleServer>>>,
    tokens: Tokens,
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        joch_server::mcp::server_config()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.upstream.list_all_tools().await.map_err(unreachable)?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut meta = context.meta.clone();
        // The server sees the proxy as its client: name the real one.
        if meta.get("joch.dev/agent").is_none() {
            if let Some(client) = context.client_info() {
                meta.insert("joch.dev/agent".to_owned(), json!(client.name));
            }
        }
        let wanted = meta.get_progress_token();
        let handle = self
            .upstream
            .send_request_with_option(
                ClientRequest::CallToolRequest(CallToolRequest::new(request)),
                PeerRequestOptions::no_options().with_meta(meta),
            )
            .await
            .map_err(unreachable)?;
        let key = handle.progress_token.0.to_string();
        if let Some(wanted) = wanted {
            lock(&self.tokens).insert(key.clone(), wanted);
        }
        let answer = handle.await_response().await;
        lock(&self.tokens).remove(&key);
        match answer.map_err(unreachable)? {
            ServerResult::CallToolResult(result) => Ok(result.into()),
            other => Err(ErrorData::internal_error(
                format!("joch answered tools/call with {other:?}"),
                None,
            )),
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let _ = self.downstream.set(context.peer.clone());
    }
}

/// The HTTP side: passes the server's notifications on to the stdio client.
struct Forwarder {
    downstream: Arc<OnceLock<Peer<RoleServer>>>,
    tokens: Tokens,
}

impl ClientHandler for Forwarder {
    fn get_info(&self) -> ClientConfig {
        // Declared before the stdio client has said what it supports (the
        // proxy connects first); a question it cannot take is refused below,
        // and joch then leaves the approval to the usual approvers.
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("joch-mcp-proxy", env!("CARGO_PKG_VERSION")),
        )
    }

    /// Passes the server's question (a call waiting for the user, see
    /// `joch_server::mcp`) on to the stdio client, when it can take one.
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let peer = self
            .downstream
            .get()
            .filter(|p| {
                p.supported_elicitation_modes()
                    .contains(&ElicitationMode::Form)
            })
            .ok_or_else(|| {
                ErrorData::invalid_request("the stdio client does not take elicitation", None)
            })?;
        peer.create_elicitation(request).await.map_err(|e| {
            ErrorData::internal_error(format!("the stdio client did not answer: {e}"), None)
        })
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let wanted = lock(&self.tokens)
            .get(&params.progress_token.0.to_string())
            .cloned();
        if let (Some(token), Some(peer)) = (wanted, self.downstream.get()) {
            let mut forwarded = ProgressNotificationParam::new(token, params.progress);
            forwarded.total = params.total;
            forwarded.message = params.message;
            let _ = peer.notify_progress(forwarded).await;
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(peer) = self.downstream.get() {
            let _ = peer.notify_tool_list_changed().await;
        }
    }
}

fn unreachable(e: rmcp::ServiceError) -> ErrorData {
    ErrorData::internal_error(format!("cannot reach the joch server: {e}"), None)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
