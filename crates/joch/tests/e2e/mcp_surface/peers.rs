//! The parts of the MCP surface tests: an upstream (the official Rust SDK)
//! with resources, prompts and tools that ask, withdraw, wait and touch
//! (which updates `note://a`, and says so in a log message after the call);
//! a client that answers; and readers of what joch recorded.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use reqwest::StatusCode;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ContentBlock, ElicitRequestParams, ElicitResult, ElicitationAction, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, Implementation, ListPromptsResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleClient, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{
    StreamableHttpClientTransport, StreamableHttpServerConfig, StreamableHttpService,
};
use rmcp::{ClientHandler, ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

use crate::harness::{Joch, NS};

/// Two resources, a prompt, and tools: `ask` asks its client's user (a
/// form), `ask_url` sends them to a page, `withdraw` asks and withdraws
/// the question, `wait` waits to be cancelled (and notes that it was).
#[derive(Clone, Default)]
pub(crate) struct Docs {
    pub(crate) cancelled: Arc<std::sync::atomic::AtomicBool>,
    /// Set when `wait` starts.
    pub(crate) waiting: Arc<std::sync::atomic::AtomicBool>,
    /// Set by `touch`: the tool `late` is listed from then on.
    late: Arc<std::sync::atomic::AtomicBool>,
}

impl ServerHandler for Docs {
    fn get_info(&self) -> ServerConfig {
        let capabilities: ServerCapabilities = serde_json::from_value(
            json!({"tools": {}, "resources": {"subscribe": true, "listChanged": true},
                                          "prompts": {"listChanged": true}}),
        )
        .unwrap();
        ServerConfig::new(capabilities)
    }

    /// Written for a session (it asks during a call, takes
    /// `resources/subscribe`, notifies outside any stream it was asked
    /// for), so it speaks the versions whose `initialize` opens one: rmcp
    /// refuses a request during a call on 2026-07-28 ("return
    /// InputRequiredResult instead"). joch's default `auto` falls back.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        let known = ProtocolVersion::KNOWN_VERSIONS.iter();
        Cow::Owned(known.filter(|v| v.has_initialize()).cloned().collect())
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resources =
            json!([{"uri": "note://a", "name": "a"}, {"uri": "secret://b", "name": "b"}]);
        Ok(ListResourcesResult::with_all_items(
            serde_json::from_value(resources).unwrap(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri.starts_with("gone://") {
            // As servers before SEP-2164 say it.
            return Err(ErrorData::resource_not_found("no such resource", None));
        }
        let text = format!("contents of {}", request.uri);
        let result: ReadResourceResult =
            serde_json::from_value(json!({"contents": [{"uri": request.uri, "text": text}]}))
                .unwrap();
        Ok(result.into())
    }

    async fn subscribe(
        &self,
        _: rmcp::model::SubscribeRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn list_prompts(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let prompt = serde_json::from_value(json!({"name": "greet"})).unwrap();
        Ok(ListPromptsResult::with_all_items(vec![prompt]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let text = format!("hello from {}", request.name);
        let result: GetPromptResult = serde_json::from_value(json!({"messages": [
            {"role": "user", "content": {"type": "text", "text": text}}]}))
        .unwrap();
        Ok(result.into())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let late = self.late.load(std::sync::atomic::Ordering::SeqCst);
        let names = ["ask", "ask_url", "withdraw", "wait", "touch", "late"];
        let tools = names[..names.len() - usize::from(!late)]
            .iter()
            .map(|name| {
                serde_json::from_value(json!({"name": name, "inputSchema": {"type": "object"},
                                         "annotations": {"readOnlyHint": true}}))
                .unwrap()
            });
        Ok(ListToolsResult::with_all_items(tools.collect()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "wait" {
            self.waiting
                .store(true, std::sync::atomic::Ordering::SeqCst);
            tokio::select! {
                () = context.ct.cancelled() => self.cancelled.store(true, std::sync::atomic::Ordering::SeqCst),
                () = tokio::time::sleep(std::time::Duration::from_secs(10)) => {}
            }
            return Ok(CallToolResult::success(vec![ContentBlock::text("waited")]).into());
        }
        // `touch` changes `note://a` and the prompt list.
        if request.name == "touch" {
            let updated = serde_json::from_value(json!({"uri": "note://a"})).unwrap();
            context.peer.notify_resource_updated(updated).await.unwrap();
            // Said once the call is over: a message outside any call goes
            // to the sessions that set a log level.
            let peer = context.peer.clone();
            #[allow(deprecated)] // logging: 2025-11-25's, which the front relays
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                let said = json!({"level": "info", "data": "touched note://a"});
                let _ = peer
                    .notify_logging_message(serde_json::from_value(said).unwrap())
                    .await;
            });
            context.peer.notify_prompt_list_changed().await.unwrap();
            self.late.store(true, std::sync::atomic::Ordering::SeqCst);
            context.peer.notify_tool_list_changed().await.unwrap();
            return Ok(CallToolResult::success(vec![ContentBlock::text("touched")]).into());
        }
        if request.name == "withdraw" {
            let question = serde_json::from_value(json!({"method": "elicitation/create",
                "params": {"mode": "form", "message": "Wait?",
                           "requestedSchema": {"type": "object", "properties": {}}}}));
            let handle = context
                .peer
                .send_request_with_option(
                    question.unwrap(),
                    rmcp::service::PeerRequestOptions::no_options(),
                )
                .await
                .unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let cancel =
                serde_json::from_value(json!({"requestId": handle.id, "reason": "never mind"}));
            context
                .peer
                .notify_cancelled(cancel.unwrap())
                .await
                .unwrap();
            return Ok(CallToolResult::success(vec![ContentBlock::text("withdrawn")]).into());
        }
        let question = match request.name.as_ref() {
            "ask_url" => ElicitRequestParams::UrlElicitationParams {
                meta: None,
                message: "Open the page".to_owned(),
                url: "https://example.com/consent".to_owned(),
                elicitation_id: "e-1".to_owned(),
            },
            _ => ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: "Proceed?".to_owned(),
                requested_schema: serde_json::from_value(
                    json!({"type": "object", "properties": {}}),
                )
                .unwrap(),
            },
        };
        let asked = context.peer.create_elicitation(question).await;
        let said = match asked {
            Ok(answer) => format!("answered {:?}", answer.action),
            Err(e) => format!("refused: {e}"),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(said)]).into())
    }
}

pub(crate) async fn start_docs() -> String {
    start_docs_with(Docs::default()).await
}

pub(crate) async fn start_docs_with(docs: Docs) -> String {
    serve(docs).await
}

/// Serves `handler` over streamable HTTP on loopback; its URL.
pub(crate) async fn serve<H: ServerHandler + Clone + Send + Sync + 'static>(handler: H) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().route_service("/mcp", service);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// A client that accepts every question (of the modes it declared in
/// `elicitation`, none by default), except `Wait?`, which it holds until
/// it is withdrawn.
#[derive(Clone, Default)]
pub(crate) struct User {
    elicitation: Option<Value>,
    /// What an accepted form answers with.
    content: Option<Value>,
    pub(crate) asked: Arc<Mutex<Vec<String>>>,
}

impl User {
    pub(crate) fn declaring(elicitation: Value) -> Self {
        User {
            elicitation: Some(elicitation),
            ..User::default()
        }
    }

    /// Accepting forms with `content`.
    pub(crate) fn answering(mut self, content: Value) -> Self {
        self.content = Some(content);
        self
    }

    pub(crate) async fn heard(&self, what: &str) -> bool {
        for _ in 0..100 {
            if self.asked.lock().unwrap().iter().any(|a| a == what) {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        false
    }
}

impl ClientHandler for User {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities = match &self.elicitation {
            Some(modes) => serde_json::from_value(json!({"elicitation": modes})).unwrap(),
            None => ClientCapabilities::default(),
        };
        ClientConfig::new(capabilities, Implementation::new("user", "1"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let message = match request {
            ElicitRequestParams::FormElicitationParams { message, .. } => message,
            ElicitRequestParams::UrlElicitationParams { message, .. } => message,
            _ => String::new(),
        };
        self.asked.lock().unwrap().push(message.clone());
        if message == "Wait?" {
            tokio::select! {
                () = context.ct.cancelled() => self.asked.lock().unwrap().push("withdrawn".to_owned()),
                () = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
            }
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        }
        let accepted = ElicitResult::new(ElicitationAction::Accept);
        Ok(match &self.content {
            Some(content) => accepted.with_content(content.clone()),
            None => accepted,
        })
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.note(format!("updated {}", params.uri));
    }

    async fn on_prompt_list_changed(&self, _: rmcp::service::NotificationContext<RoleClient>) {
        self.note("prompts changed".to_owned());
    }
}

impl User {
    fn note(&self, what: String) {
        self.asked.lock().unwrap().push(what);
    }
}

/// The text of `tool`'s result, called by `client`.
pub(crate) async fn answer<H: ClientHandler>(
    client: &rmcp::service::RunningService<RoleClient, H>,
    tool: &str,
) -> String {
    let result = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()))
        .await
        .unwrap();
    let result = serde_json::to_value(&result).unwrap();
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

pub(crate) async fn connect(
    joch: &Joch,
    user: User,
) -> rmcp::service::RunningService<RoleClient, User> {
    let url = format!("{}/v1/namespaces/{NS}/mcp", joch.base);
    user.serve(StreamableHttpClientTransport::from_uri(url))
        .await
        .unwrap()
}

/// Every `mcp_exchange` event of the namespace's calls.
pub(crate) async fn exchanges(joch: &Joch) -> Vec<Value> {
    let mut exchanges = Vec::new();
    for call in calls(joch).await {
        let execution = call["spec"]["executionRef"]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        let (_, events) = joch
            .get(&format!(
                "/v1/namespaces/{NS}/executions/{execution}/events"
            ))
            .await;
        for event in events["items"].as_array().cloned().unwrap_or_default() {
            if event["type"] == "mcp_exchange" && !exchanges.contains(&event["data"]) {
                exchanges.push(event["data"].clone());
            }
        }
    }
    exchanges
}

pub(crate) async fn calls(joch: &Joch) -> Vec<Value> {
    let (status, list) = joch.get(&format!("/v1/namespaces/{NS}/toolcalls")).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// Waits (up to 2 s) until a call of the namespace runs.
pub(crate) async fn a_call_runs(joch: &Joch) -> bool {
    for _ in 0..100 {
        if calls(joch)
            .await
            .iter()
            .any(|c| c["status"]["phase"] == "Running")
        {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    false
}

/// The newest call once it no longer runs (or after 3 s, as it stands).
pub(crate) async fn newest_settled(joch: &Joch) -> Value {
    let mut newest = Value::Null;
    for _ in 0..150 {
        newest = calls(joch).await.first().cloned().unwrap_or_default();
        if newest["status"]["phase"] != "Running" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    newest
}
