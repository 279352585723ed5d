//! joch's own MCP endpoint, as clients meet it: upstream progress on the
//! client's progress token, an upstream's question refused rather than
//! answered for a user, idle sessions, JSON refusals, and the namespace a
//! request names. The upstream is `mcp.rs`'s real MCP server on loopback.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ProgressNotificationParam};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

use crate::harness::{Joch, NS};
use crate::mcp::{UpstreamServer, apply, server, tool};

#[tokio::test]
async fn upstream_progress_reaches_the_clients_progress_token() {
    let upstream =
        UpstreamServer::start(vec![tool("countdown", Some(json!({"readOnlyHint": true})))]).await;
    let joch = Joch::start().await;
    apply(&joch, server("up", &upstream.url, json!({}))).await;
    let watcher = Watcher::default();
    let client = watcher
        .clone()
        .serve(StreamableHttpClientTransport::from_uri(format!(
            "{}/v1/namespaces/{NS}/mcp",
            joch.base
        )))
        .await
        .unwrap();
    let result = client
        .call_tool(CallToolRequestParams::new("up.countdown"))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    // Notifications may trail the result by a moment.
    for _ in 0..100 {
        if watcher.progress.lock().unwrap().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // rmcp hands notifications to handlers concurrently, on joch's upstream
    // connection and in this client: each arrives, not necessarily in order.
    let mut seen = watcher.progress.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        ["1/3: step 1", "2/3: step 2", "3/3: step 3"],
        "{seen:?}"
    );
}

/// The same at 2026-07-28 (no session): the progress rides the call's
/// own response stream, before its result, though the call belongs to no
/// execution (whose timeline the chunks would also go to).
#[tokio::test]
async fn upstream_progress_reaches_a_stateless_clients_progress_token() {
    let upstream =
        UpstreamServer::start(vec![tool("countdown", Some(json!({"readOnlyHint": true})))]).await;
    let joch = Joch::start().await;
    apply(&joch, server("up", &upstream.url, json!({}))).await;
    let watcher = Watcher::default();
    let url = format!("{}/v1/namespaces/{NS}/mcp", joch.base);
    let discover = rmcp::ClientLifecycleMode::Discover {
        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
    };
    let client = rmcp::ClientServiceExt::serve_with_lifecycle(
        watcher.clone(),
        StreamableHttpClientTransport::from_uri(url),
        discover,
    )
    .await
    .unwrap();
    let result = client
        .call_tool(CallToolRequestParams::new("up.countdown"))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    for _ in 0..100 {
        if watcher.progress.lock().unwrap().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut seen = watcher.progress.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        ["1/3: step 1", "2/3: step 2", "3/3: step 3"],
        "{seen:?}"
    );
}

#[tokio::test]
async fn an_upstreams_question_is_refused_not_answered_for_a_user() {
    let upstream =
        UpstreamServer::start(vec![tool("ask", Some(json!({"readOnlyHint": true})))]).await;
    let joch = Joch::start().await;
    apply(&joch, server("up", &upstream.url, json!({}))).await;
    let (_, call) = joch.call("up.ask", json!({})).await;
    let text = call["status"]["output"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.starts_with("refused"),
        "no user declined anything: {call}"
    );
}

#[tokio::test]
async fn an_idle_mcp_session_expires() {
    let joch = Joch::builder()
        .args(&["--mcp-session-idle-seconds", "1"])
        .start()
        .await;
    let url = format!("{}/v1/namespaces/{NS}/mcp", joch.base);
    let post = |session: Option<String>, body: Value| {
        let mut request = joch
            .http
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(id) = session {
            request = request.header("mcp-session-id", id);
        }
        request.send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "idle", "version": "1"}}});
    let opened = post(None, init).await.unwrap();
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    // A client that went away without DELETE: its session is closed for it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let late = post(Some(session), list).await.unwrap();
    assert_eq!(late.status(), StatusCode::NOT_FOUND);
    let body: Value = late.json().await.unwrap();
    assert_eq!(body["code"], "session_not_found", "{body}");
}

#[tokio::test]
async fn the_mcp_endpoints_refusals_are_json_too() {
    let joch = Joch::start().await;
    let url = format!("{}/v1/namespaces/{NS}/mcp", joch.base);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    // No `Accept: application/json, text/event-stream`.
    let response = joch.http.post(&url).json(&ping).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_ACCEPTABLE);
    let body: Value = response.json().await.expect("a JSON error");
    assert_eq!(body["code"], "not_acceptable", "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    // A session that does not exist.
    let response = joch
        .http
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", "no-such-session")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_client_error());
    let body: Value = response.json().await.expect("a JSON error");
    assert!(body["code"].is_string(), "{body}");
}

#[tokio::test]
async fn the_mcp_endpoint_serves_the_namespace_named_by_path_or_header() {
    let joch = Joch::start().await;
    joch.create_tool(json!({
        "metadata": {"name": "nothing"},
        "spec": {"description": "Does nothing.", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
    }))
    .await;

    let names = |url: String, header: Option<&'static str>| async move {
        let mut config =
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                url,
            );
        if let Some(ns) = header {
            config = config.custom_headers(
                [(
                    reqwest::header::HeaderName::from_static("joch-namespace"),
                    reqwest::header::HeaderValue::from_static(ns),
                )]
                .into(),
            );
        }
        let client = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
        let tools = client.list_all_tools().await.unwrap();
        let called = client
            .call_tool(CallToolRequestParams::new("nothing"))
            .await
            .unwrap();
        client.cancel().await.unwrap();
        (
            tools
                .into_iter()
                .map(|t| t.name.to_string())
                .collect::<Vec<_>>(),
            called,
        )
    };
    let (by_path, called) = names(format!("{}/v1/namespaces/{NS}/mcp", joch.base), None).await;
    assert_eq!(by_path, ["nothing"]);
    assert_eq!(called.is_error, Some(false));
    assert_eq!(called.structured_content, Some(json!({})));
    let (by_header, _) = names(format!("{}/mcp", joch.base), Some(NS)).await;
    assert_eq!(by_header, ["nothing"]);
    let (elsewhere, unknown) = names(format!("{}/mcp", joch.base), None).await;
    assert!(elsewhere.is_empty(), "the default namespace has no tools");
    // Calling a tool that does not exist is a tool error the model can read.
    assert_eq!(unknown.is_error, Some(true));
    let text = unknown.content[0].as_text().unwrap().text.clone();
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["error"], "tool_not_found");
}

/// An MCP client that keeps the progress messages it is sent.
#[derive(Clone, Default)]
struct Watcher {
    progress: Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for Watcher {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::service::RoleClient>,
    ) {
        let message = params.message.unwrap_or_default();
        self.progress.lock().unwrap().push(message);
    }
}

#[tokio::test]
async fn a_call_outlasting_a_quiet_sessions_life_still_gets_its_answer() {
    // A session's worker and record end after `idle` without a message;
    // a call that runs longer keeps them (it pings the client).
    let webhook = crate::harness::Webhook::start().await;
    let joch = Joch::builder()
        .args(&["--mcp-session-idle-seconds", "1"])
        .start()
        .await;
    let slow = format!("{}/slow", webhook.base);
    let mut tool = crate::harness::rest_tool("slow.read", &slow, json!({"level": "read_only"}));
    tool["spec"]["backend"]["endpoint"]["timeoutMs"] = json!(10_000);
    joch.create_tool(tool).await;
    let client = crate::mcp_surface::peers::connect(&joch, Default::default()).await;
    let call = client.call_tool(CallToolRequestParams::new("slow.read"));
    let result = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the answer of a 3 s call on a session idle after 1 s")
        .unwrap();
    assert_eq!(result.is_error, Some(false), "{result:?}");
}
