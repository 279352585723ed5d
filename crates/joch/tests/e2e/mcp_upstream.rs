//! Protocol 2026-07-28 towards an upstream server (the official Rust SDK),
//! negotiated with `spec.protocol: auto`: a server that speaks it is
//! spoken to in it, and its `input_required` question reaches the client
//! that made the call (or ends the call, recorded, for a client that
//! cannot answer); a server that does not is spoken to as before.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, InputRequiredResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use serde_json::json;

use crate::harness::{Joch, NS};
use crate::mcp::{apply, server};
use crate::mcp_surface::peers::{User, answer, calls, connect, exchanges};

/// A server whose tool `greet` asks the caller's name (`input_required`
/// in 2026-07-28; a session's `elicitation/create` before it), and which
/// notes the protocol version of each call and each answer it got.
#[derive(Clone)]
struct Greeter {
    versions: Option<Vec<ProtocolVersion>>,
    heard: Arc<Mutex<Vec<String>>>,
}

impl Greeter {
    fn new(versions: Option<Vec<ProtocolVersion>>) -> Self {
        Greeter {
            versions,
            heard: Arc::default(),
        }
    }

    fn heard(&self) -> Vec<String> {
        self.heard.lock().unwrap().clone()
    }
}

impl ServerHandler for Greeter {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        match &self.versions {
            Some(versions) => Cow::Owned(versions.clone()),
            None => Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS),
        }
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool = json!({"name": "greet", "inputSchema": {"type": "object"},
                          "annotations": {"readOnlyHint": true}});
        Ok(ListToolsResult::with_all_items(vec![
            serde_json::from_value(tool).unwrap(),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let version = context.protocol_version().map(|v| v.to_string());
        self.note(format!("call {}", version.unwrap_or_default()));
        let question = json!({"mode": "form", "message": "Your name?", "requestedSchema":
            {"type": "object", "properties": {"name": {"type": "string"}}}});
        let stateless = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let answer = if !stateless {
            // Before 2026-07-28: a request on the call's stream.
            let params = serde_json::from_value(question).unwrap();
            match context.peer.create_elicitation(params).await {
                Ok(answer) => serde_json::to_value(answer).unwrap(),
                Err(e) => {
                    return Ok(
                        CallToolResult::error(vec![ContentBlock::text(e.to_string())]).into(),
                    );
                }
            }
        } else if let Some(answers) = &request.input_responses {
            assert_eq!(request.request_state.as_deref(), Some("asked-once"));
            answers["name"].clone()
        } else {
            let asked = json!({"name": {"method": "elicitation/create", "params": question}});
            let asked = serde_json::from_value(asked).unwrap();
            let mut result = InputRequiredResult::from_input_requests(asked);
            result.request_state = Some("asked-once".to_owned());
            return Ok(result.into());
        };
        self.note(format!("answer {answer}"));
        let text = format!(
            "hello {}",
            answer["content"]["name"].as_str().unwrap_or("?")
        );
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

impl Greeter {
    fn note(&self, what: String) {
        self.heard.lock().unwrap().push(what);
    }
}

async fn start(greeter: Greeter) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let service = StreamableHttpService::new(
        move || Ok(greeter.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().route_service("/mcp", service);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// A user who answers every form with the name `ada`.
fn ada() -> User {
    User::declaring(json!({"form": {}})).answering(json!({"name": "ada"}))
}

#[tokio::test]
async fn an_upstream_of_2026_07_28_asks_through_input_required_and_the_caller_answers() {
    let greeter = Greeter::new(None);
    let joch = Joch::start().await;
    apply(
        &joch,
        server(
            "greeter",
            &start(greeter.clone()).await,
            json!({"protocol": "auto"}),
        ),
    )
    .await;

    let user = ada();
    let client = connect(&joch, user.clone()).await;
    assert_eq!(answer(&client, "greeter.greet").await, "hello ada");
    assert_eq!(*user.asked.lock().unwrap(), ["Your name?"]);
    let heard = greeter.heard();
    assert_eq!(heard[0], "call 2026-07-28", "{heard:?}");
    assert_eq!(heard.len(), 3, "asked, then answered: {heard:?}");
    let exchanges = exchanges(&joch).await;
    assert_eq!(exchanges.len(), 1, "{exchanges:?}");
    assert_eq!(exchanges[0]["method"], "elicitation/create");
    assert_eq!(exchanges[0]["relayed"], true, "{exchanges:?}");

    // A client that takes no elicitation: the call ends, recorded; the
    // server gets no answer nobody gave.
    let incapable = connect(&joch, User::default()).await;
    let refused = incapable
        .call_tool(CallToolRequestParams::new("greeter.greet"))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let failed = calls(&joch)
        .await
        .into_iter()
        .find(|c| c["status"]["phase"] == "Failed");
    let failed = failed.expect("a failed call");
    assert_eq!(
        failed["status"]["error"]["code"], "client_incapable",
        "{failed}"
    );
    assert_eq!(greeter.heard().len(), 4, "one more call, never answered");
}

#[tokio::test]
async fn an_upstream_before_2026_07_28_is_spoken_to_as_before_with_auto_or_by_default() {
    let legacy = Greeter::new(Some(vec![ProtocolVersion::V_2025_11_25]));
    let modern = Greeter::new(None);
    let joch = Joch::start().await;
    let auto = json!({"protocol": "auto"});
    apply(&joch, server("old", &start(legacy.clone()).await, auto)).await;
    apply(
        &joch,
        server("new", &start(modern.clone()).await, json!({})),
    )
    .await;
    let (_, stored) = joch
        .get(&format!("/v1/namespaces/{NS}/mcpservers/old"))
        .await;
    assert_eq!(stored["spec"]["protocol"], "auto", "{stored}");

    let client = connect(&joch, ada()).await;
    assert_eq!(answer(&client, "old.greet").await, "hello ada");
    assert_eq!(answer(&client, "new.greet").await, "hello ada");
    assert_eq!(legacy.heard()[0], "call 2025-11-25", "{:?}", legacy.heard());
    assert_eq!(
        modern.heard()[0],
        "call 2025-11-25",
        "the default stays: {:?}",
        modern.heard()
    );
}
