//! `joch mcp`: joch as a stdio MCP server, for clients that start their
//! tools as processes (Claude Desktop, IDEs, agent SDKs' stdio transports).
//!
//! By default it is a thin proxy to a running joch's streamable HTTP
//! endpoint, so every call lands in that server's ledger. With `--db` it
//! runs the engine in-process on that SQLite file instead (no server needed;
//! don't point a running server at the same file).

// Logging is deprecated by SEP-2577 (protocol 2026-07-28) but is part of
// 2025-11-25, which joch serves.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use joch_server::mcp::JochMcp;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig,
    ClientRequest, CompleteRequestParams, CompleteResult, ElicitRequestParams, ElicitResult,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ServerConfig, ServerResult, SetLevelRequestParams, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{
    ElicitationMode, NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient,
    RoleServer,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

use crate::cli::{ClientArgs, McpAction, McpArgs};
use crate::client::Client;

mod surface;

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
    // Fail at once when joch is not there, before the stdio handshake.
    Client::new(client)?
        .send(reqwest::Method::GET, "/readyz", None)
        .await
        .with_context(|| format!("cannot reach joch at {}", client.server))?;
    let downstream = Arc::new(OnceLock::new());
    let tokens = Arc::new(Mutex::new(HashMap::new()));
    let (ready, upstream) = tokio::sync::watch::channel(None);
    let proxy = Proxy {
        upstream,
        downstream: downstream.clone(),
        tokens: tokens.clone(),
    };
    let running = proxy
        .serve(rmcp::transport::io::stdio())
        .await
        .context("MCP handshake on stdio failed")?;
    // joch is told the stdio client's own capabilities (sampling,
    // elicitation), so that it relays to it only what it can answer.
    let capabilities = running
        .peer()
        .peer_info()
        .map(|info| relayable(&info.capabilities))
        .unwrap_or_default();
    let forwarder = Forwarder {
        downstream,
        tokens,
        capabilities,
    };
    // The proxy acts as the token's holder: joch's server applies that
    // principal's rules (its tool selector, separation of duties).
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
    if let Some(token) = &client.token {
        config = config.auth_header(token.clone());
    }
    // rmcp's default client opens a connection per request; this one keeps
    // them alive (joch ends each answer's stream as soon as it is sent).
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let upstream = forwarder
        .serve(StreamableHttpClientTransport::with_client(http, config))
        .await
        .with_context(|| format!("cannot reach joch's MCP endpoint at {url}"))?;
    let _ = ready.send(Some(upstream.peer().clone()));
    running.waiting().await.context("MCP session failed")?;
    let _ = upstream.cancel().await;
    Ok(())
}

/// What of a client's capabilities the proxy passes on: sampling and
/// elicitation (with its modes).
fn relayable(capabilities: &ClientCapabilities) -> ClientCapabilities {
    let mut relayed = ClientCapabilities::default();
    relayed.sampling = capabilities.sampling.clone();
    relayed.elicitation = capabilities.elicitation.clone();
    relayed
}

/// Progress tokens of calls in flight: the one joch's server sees (rmcp
/// mints its own) to the one the stdio client chose.
type Tokens = Arc<Mutex<HashMap<String, rmcp::model::ProgressToken>>>;

/// The stdio side: answers the client by asking the server.
struct Proxy {
    /// The connection to joch, once it is open (right after the stdio
    /// handshake, whose capabilities it declares).
    upstream: tokio::sync::watch::Receiver<Option<Peer<RoleClient>>>,
    downstream: Arc<OnceLock<Peer<RoleServer>>>,
    tokens: Tokens,
}

impl Proxy {
    /// The connection to joch, waiting for it to open.
    async fn upstream(&self) -> Result<Peer<RoleClient>, ErrorData> {
        let mut open = self.upstream.clone();
        let closed = || ErrorData::internal_error("the connection to joch closed", None);
        let peer = open.wait_for(Option::is_some).await.map_err(|_| closed())?;
        peer.clone().ok_or_else(closed)
    }
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
        let tools = self
            .upstream()
            .await?
            .list_all_tools()
            .await
            .map_err(unreachable)?;
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
            .upstream()
            .await?
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

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.forward("resources/list", request).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.forward("resources/templates/list", request).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let result: ReadResourceResult = self.forward("resources/read", Some(request)).await?;
        Ok(result.into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward::<_, Value>("resources/subscribe", Some(request))
            .await
            .map(drop)
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward::<_, Value>("resources/unsubscribe", Some(request))
            .await
            .map(drop)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.forward("prompts/list", request).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let result: GetPromptResult = self.forward("prompts/get", Some(request)).await?;
        Ok(result.into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.forward("completion/complete", Some(request)).await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward::<_, Value>("logging/setLevel", Some(request))
            .await
            .map(drop)
    }
}

/// The HTTP side: passes the server's notifications on to the stdio client.
struct Forwarder {
    downstream: Arc<OnceLock<Peer<RoleServer>>>,
    tokens: Tokens,
    /// The stdio client's sampling and elicitation capabilities.
    capabilities: ClientCapabilities,
}

impl ClientHandler for Forwarder {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            self.capabilities.clone(),
            Implementation::new("joch-mcp-proxy", env!("CARGO_PKG_VERSION")),
        )
    }

    /// Passes an upstream's sampling request during a call on to the
    /// stdio client (joch sends it only if that client declared sampling).
    async fn create_message(
        &self,
        request: rmcp::model::CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, ErrorData> {
        let peer = self
            .downstream
            .get()
            .ok_or_else(|| ErrorData::invalid_request("the stdio client is not connected", None))?;
        peer.create_message(request).await.map_err(|e| {
            ErrorData::internal_error(format!("the stdio client did not answer: {e}"), None)
        })
    }

    /// Passes the server's question (a call waiting for the user, see
    /// `joch_server::mcp`, or an upstream's during a call) on to the stdio
    /// client, when it can take one.
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let mode = match &request {
            ElicitRequestParams::UrlElicitationParams { .. } => ElicitationMode::Url,
            _ => ElicitationMode::Form,
        };
        let peer = self
            .downstream
            .get()
            .filter(|p| p.supported_elicitation_modes().contains(&mode))
            .ok_or_else(|| {
                ErrorData::invalid_request("the stdio client does not take this question", None)
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

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let params = serde_json::to_value(params).unwrap_or_default();
        surface::pass_on(
            self.downstream.get(),
            "notifications/resources/updated",
            params,
        )
        .await;
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let method = "notifications/resources/list_changed";
        surface::pass_on(self.downstream.get(), method, Value::Null).await;
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let method = "notifications/prompts/list_changed";
        surface::pass_on(self.downstream.get(), method, Value::Null).await;
    }

    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let params = serde_json::to_value(params).unwrap_or_default();
        surface::pass_on(self.downstream.get(), "notifications/message", params).await;
    }
}

fn unreachable(e: rmcp::ServiceError) -> ErrorData {
    ErrorData::internal_error(format!("cannot reach the joch server: {e}"), None)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
