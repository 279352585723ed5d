//! joch as an MCP client of an upstream speaking 2026-07-28 (the official
//! Rust SDK's server): the arguments a tool's input schema marks with
//! `x-mcp-header` reach the server as `Mcp-Param-*` headers (SEP-2243) on
//! whichever connection the call takes, and the server, which checks
//! them against the body, takes the call; one it refuses for them is sent
//! again after a new listing. Replacing an McpServer's
//! transport, or deleting it, closes joch's connections to it and ends
//! their sessions at once, not when a later call finds them stale, on
//! every replica.

use std::sync::{Arc, Mutex};

use axum::http::request::Parts;
use reqwest::{Method, StatusCode};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Map, Value, json};

use crate::harness::{Joch, NS};
use crate::mcp::{apply, server};
use crate::mcp_surface::peers::{User, connect, serve};
use crate::replicas::{fresh_database, replica};

/// Serves `route`, whose `region` and `note` are sent as headers; notes
/// the `Mcp-Param-*` headers of each call.
#[derive(Clone, Default)]
struct Router {
    heard: Arc<Mutex<Vec<Map<String, Value>>>>,
}

fn route() -> Tool {
    serde_json::from_value(json!({
        "name": "route",
        "annotations": {"readOnlyHint": true},
        "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "note": {"type": "string", "x-mcp-header": "Note"},
            "body": {"type": "string"},
        }, "required": ["region"]},
    }))
    .unwrap()
}

impl ServerHandler for Router {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    /// What the SDK's transport checks the `Mcp-Param-*` headers against.
    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == "route").then(route)
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![route()]))
    }

    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let parts = context.extensions.get::<Parts>().expect("an HTTP request");
        let params = parts
            .headers
            .iter()
            .filter(|(name, _)| name.as_str().starts_with("mcp-param-"))
            .map(|(name, value)| (name.to_string(), json!(value.to_str().unwrap())))
            .collect();
        self.heard.lock().unwrap().push(params);
        Ok(CallToolResult::success(vec![ContentBlock::text("routed")]).into())
    }
}

/// Calls `geo.route` with `arguments` as an MCP client of joch's (a new
/// connection) and checks the server took it.
async fn call_route(joch: &Joch, arguments: Value) {
    let client = connect(joch, User::default()).await;
    let result = client
        .call_tool(
            CallToolRequestParams::new("geo.route")
                .with_arguments(arguments.as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    let result = serde_json::to_value(result).unwrap();
    assert_eq!(result["content"][0]["text"], "routed", "{result}");
}

/// (It failed twice under load: the call went without its headers, as if
/// its connection had not learnt the tool's schema, and the server refused
/// it. joch now lists again and sends such a call once more: see
/// [`a_call_refused_for_its_mcp_param_headers_is_sent_again_after_a_new_listing`].)
#[tokio::test]
async fn marked_arguments_travel_as_mcp_param_headers_on_every_connection() {
    let router = Router::default();
    let joch = Joch::start().await;
    let url = serve(router.clone()).await;
    apply(&joch, server("geo", &url, json!({"protocol": "auto"}))).await;

    // joch listed the tools on a connection of its own; this client
    // declares other capabilities, so its call takes another connection.
    let arguments = json!({"region": "us-west1", "note": " padded ", "body": "b"});
    call_route(&joch, arguments).await;
    let heard = router.heard.lock().unwrap().clone();
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert_eq!(heard[0]["mcp-param-region"], "us-west1", "{heard:?}");
    // Leading and trailing spaces are base64 (SEP-2243's value encoding).
    assert_eq!(
        heard[0]["mcp-param-note"], "=?base64?IHBhZGRlZCA=?=",
        "{heard:?}"
    );
    assert!(!heard[0].contains_key("mcp-param-body"), "{heard:?}");
}

/// What the upstream's HTTP layer saw, in order: `list` for each
/// `tools/list`, `call` for each `tools/call`, `stripped` for the first
/// `tools/call`, whose `Mcp-Param-*` headers it removed (as a connection
/// that never learnt the tool's schema sends it).
#[derive(Clone, Default)]
struct Stripper {
    seen: Arc<Mutex<Vec<&'static str>>>,
}

async fn strip_first(
    axum::extract::State(stripper): axum::extract::State<Stripper>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let (mut parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let method = ["tools/list", "tools/call"]
        .into_iter()
        .find(|m| text.contains(&format!("\"{m}\"")));
    let stripped = {
        let mut seen = stripper.seen.lock().unwrap();
        let first_call = method == Some("tools/call") && !seen.contains(&"stripped");
        match method {
            Some("tools/list") => seen.push("list"),
            Some(_) if first_call => seen.push("stripped"),
            Some(_) => seen.push("call"),
            None => {}
        }
        first_call
    };
    if stripped {
        let params: Vec<_> = (parts.headers.keys())
            .filter(|name| name.as_str().starts_with("mcp-param-"))
            .cloned()
            .collect();
        for name in params {
            parts.headers.remove(name);
        }
    }
    let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    next.run(request).await
}

/// The server refuses a call whose `Mcp-Param-*` headers are missing
/// (SEP-2243's -32020, before the tool runs): joch lists the tools again on
/// that connection and sends the call once more, with its headers, and the
/// tool runs once.
#[tokio::test]
async fn a_call_refused_for_its_mcp_param_headers_is_sent_again_after_a_new_listing() {
    let (router, stripper) = (Router::default(), Stripper::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let service = StreamableHttpService::new(
        {
            let router = router.clone();
            move || Ok(router.clone())
        },
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let layer = axum::middleware::from_fn_with_state(stripper.clone(), strip_first);
    let app = axum::Router::new()
        .route_service("/mcp", service)
        .layer(layer);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let joch = Joch::start().await;
    apply(&joch, server("geo", &url, json!({"protocol": "auto"}))).await;

    call_route(&joch, json!({"region": "us-west1", "note": "n"})).await;
    let seen = stripper.seen.lock().unwrap().clone();
    let after = seen
        .iter()
        .position(|s| *s == "stripped")
        .expect("a call stripped");
    // joch's own listings may come at any time; one must come between.
    let rest = &seen[after + 1..];
    let resent = rest.iter().position(|s| *s == "call").expect("sent again");
    assert!(rest[..resent].contains(&"list"), "listed first: {seen:?}");
    assert_eq!(rest.iter().filter(|s| **s == "call").count(), 1, "{seen:?}");
    let heard = router.heard.lock().unwrap().clone();
    assert_eq!(heard.len(), 1, "the tool ran once: {heard:?}");
    assert_eq!(heard[0]["mcp-param-region"], "us-west1", "{heard:?}");
}

/// Serves `router` with sessions it can count; its URL.
async fn serve_counted(router: Router, sessions: Arc<LocalSessionManager>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let service = StreamableHttpService::new(
        move || Ok(router.clone()),
        sessions,
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().route_service("/mcp", service);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// Waits (up to 5 s) until the server holds `n` sessions; how many it holds.
async fn sessions_become(sessions: &LocalSessionManager, n: usize) -> usize {
    for _ in 0..250 {
        if sessions.sessions.read().await.len() == n {
            return n;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    sessions.sessions.read().await.len()
}

#[tokio::test]
async fn replacing_or_deleting_a_server_closes_its_connections_and_sessions() {
    let sessions = Arc::new(LocalSessionManager::default());
    let url = serve_counted(Router::default(), sessions.clone()).await;
    let joch = Joch::start().await;
    apply(&joch, server("geo", &url, json!({"protocol": "legacy"}))).await;
    // joch's listing connection, and the call's (other capabilities).
    let client = connect(&joch, User::default()).await;
    let arguments = json!({"region": "eu"}).as_object().unwrap().clone();
    let call = CallToolRequestParams::new("geo.route").with_arguments(arguments);
    client.call_tool(call.clone()).await.unwrap();
    assert_eq!(sessions_become(&sessions, 2).await, 2);

    // Another transport (a header more): the listing reconnects, and the
    // call's connection, for the old transport, is closed at once.
    let replaced = server(
        "geo",
        &url,
        json!({"protocol": "legacy", "http": {"url": url, "headers": {"x-v": "2"}}}),
    );
    let path = format!("/v1/namespaces/{NS}/mcpservers/geo");
    let (status, body) = joch.send(Method::PUT, &path, Some(replaced)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(sessions_become(&sessions, 1).await, 1);

    let (status, body) = joch.send(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        sessions_become(&sessions, 0).await,
        0,
        "every session ended"
    );
}

#[tokio::test]
async fn deleting_a_server_on_one_replica_closes_the_sessions_another_opened() {
    deleted_on_one_replica_closes_what_another_opened("mcp_client_delete", 0).await;
}

/// Deleted together, the servers are announced to the other replica many
/// to a notification: it closes what it holds for each it named.
#[tokio::test]
async fn deleting_many_servers_at_once_on_one_replica_closes_the_sessions_another_opened() {
    deleted_on_one_replica_closes_what_another_opened("mcp_client_delete_many", 9).await;
}

/// Replica b opens a session to `geo` through a call; a deletes `geo` and
/// `others` more servers at once; b must end its session.
async fn deleted_on_one_replica_closes_what_another_opened(database: &str, others: usize) {
    let Some(store) = fresh_database(database).await else {
        return;
    };
    let sessions = Arc::new(LocalSessionManager::default());
    let url = serve_counted(Router::default(), sessions.clone()).await;
    let (a, b) = tokio::join!(replica(&store), replica(&store));
    let names: Vec<String> = std::iter::once("geo".to_owned())
        .chain((0..others).map(|n| format!("geo{n}")))
        .collect();
    for name in &names {
        apply(&a, server(name, &url, json!({"protocol": "legacy"}))).await;
    }
    // Replica b calls: its own connection (and session) to the server.
    let client = connect(&b, User::default()).await;
    let arguments = json!({"region": "eu"}).as_object().unwrap().clone();
    let call = CallToolRequestParams::new("geo.route").with_arguments(arguments);
    client.call_tool(call).await.unwrap();
    assert!(
        sessions_become(&sessions, 2).await >= 2,
        "a's listing and b's call"
    );

    let deletes = names
        .iter()
        .map(|name| format!("/v1/namespaces/{NS}/mcpservers/{name}"));
    for (status, body) in a.send_each(Method::DELETE, deletes).await {
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    assert_eq!(
        sessions_become(&sessions, 0).await,
        0,
        "b heard of the deletion and ended its session"
    );
}
