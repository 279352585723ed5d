//! `tools/call` and `tools/list` served in the HTTP request's own task
//! (issue 19, item 7): on a session and without one, the call is recorded
//! as through rmcp, its progress rides its own stream under the client's
//! token, and a refusal is worded as rmcp words it. rmcp's session worker
//! numbers the events of a request's stream (`id:`); the direct path has
//! no events to resume, which tells the two apart.

use futures_util::StreamExt;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, rest_tool};
use crate::mcp_sessions::{ACCEPT, Session, endpoint, messages, post};
use crate::policies::apply_policy;
use crate::replicas::approve_the_pending_call;

fn call(id: u64, tool: &str, meta: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": {"n": 1}, "_meta": meta}})
}

/// Whether rmcp's session worker served the stream: it numbers its
/// events (joch's ids then carry its number, position `w<n>/<stream>`); a
/// call served directly has one id, its priming event's (position `d`).
fn by_worker(text: &str) -> bool {
    text.lines()
        .filter_map(|l| l.strip_prefix("id:"))
        .any(|id| id.trim().split('.').nth(2) != Some("d"))
}

/// A session whose worker runs: its first request re-creates the worker,
/// which learns of its client a moment later (rmcp runs the handler of
/// `notifications/initialized` in a task of its own), and rmcp serves the
/// requests that come before. So: until a listing is served directly.
pub(crate) async fn warm(joch: &Joch, client: &str, capabilities: Value) -> Session {
    let session = Session::open_declaring(joch, client, capabilities).await;
    for id in 1..=100 {
        let listing = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {}});
        let answer = post(joch, Some(&session.id), &listing).await;
        assert_eq!(answer.status(), StatusCode::OK);
        let text = answer.text().await.unwrap();
        if !by_worker(&text) {
            return session;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the session's requests are never served directly");
}

async fn ticket_tool(joch: &Joch, webhook: &Webhook) {
    joch.create_tool(rest_tool(
        "ticket.create",
        &format!("{}/echo", webhook.base),
        json!({"level": "external_write"}),
    ))
    .await;
}

/// Call names (`mcp-` and 32 hex digits) as `mcp-*`: two calls' answers compare.
fn redacted(value: &Value) -> Value {
    match value {
        Value::String(text) => {
            let mut out = String::new();
            let mut rest = text.as_str();
            while let Some(at) = rest.find("mcp-") {
                out.push_str(&rest[..at + 4]);
                rest = &rest[at + 4..];
                let hex = rest.chars().take_while(char::is_ascii_hexdigit).count();
                if hex == 32 {
                    out.push('*');
                    rest = &rest[hex..];
                }
            }
            out.push_str(rest);
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(redacted).collect()),
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), redacted(v))).collect(),
        other => other.clone(),
    }
}

#[tokio::test]
async fn a_session_call_served_directly_is_recorded_with_its_session_and_agent() {
    let (joch, webhook) = (Joch::start().await, Webhook::start().await);
    ticket_tool(&joch, &webhook).await;
    let session = warm(&joch, "direct agent", json!({})).await;

    let answer = post(
        &joch,
        Some(&session.id),
        &call(7, "ticket.create", json!({})),
    )
    .await;
    assert_eq!(answer.status(), StatusCode::OK);
    let text = answer.text().await.unwrap();
    assert!(!by_worker(&text), "not served directly: {text}");
    let answer = messages(&text).pop().expect("an answer");
    assert_eq!(answer["id"], 7, "{answer}");
    assert_ne!(answer["result"]["isError"], true, "{answer}");

    let (_, calls) = joch.get(&format!("/v1/namespaces/{NS}/toolcalls")).await;
    let recorded = &calls["items"][0];
    let execution = format!("mcp-{}", session.id);
    assert_eq!(
        recorded["spec"]["executionRef"]["name"],
        execution.as_str(),
        "{recorded}"
    );
    assert_eq!(
        recorded["spec"]["agentRef"]["name"], "direct-agent",
        "{recorded}"
    );
    assert_eq!(recorded["status"]["phase"], "Succeeded", "{recorded}");
}

#[tokio::test]
async fn progress_of_a_direct_call_waiting_for_a_person_rides_its_own_stream() {
    let (joch, webhook) = (Joch::start().await, Webhook::start().await);
    ticket_tool(&joch, &webhook).await;
    apply_policy(
        &joch,
        "people-approve",
        json!({"version": "1", "rules": [
            {"when": {"tool.name": "ticket.create"}, "require": {"approval": "human"}}
        ]}),
    )
    .await;
    let session = warm(&joch, "waiter", json!({})).await;
    let request = call(3, "ticket.create", json!({"progressToken": "mine-1"}));
    let answer = post(&joch, Some(&session.id), &request).await;
    assert_eq!(answer.status(), StatusCode::OK);
    let mut body = answer.bytes_stream();
    let mut text = String::new();
    let mut approved = false;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline, body.next()).await {
        text.push_str(&String::from_utf8_lossy(&chunk));
        let seen = messages(&text);
        let waiting = seen
            .iter()
            .find(|m| m["method"] == "notifications/progress");
        if let (Some(progress), false) = (waiting, approved) {
            assert_eq!(progress["params"]["progressToken"], "mine-1", "{progress}");
            approve_the_pending_call(&joch, "alice").await;
            approved = true;
        }
        if seen.iter().any(|m| m["id"] == 3) {
            break;
        }
    }
    assert!(approved, "no progress while the call waited: {text}");
    assert!(!by_worker(&text), "not served directly: {text}");
    let answer = messages(&text).into_iter().find(|m| m["id"] == 3);
    let answer = answer.unwrap_or_else(|| panic!("no answer: {text}"));
    assert_ne!(answer["result"]["isError"], true, "{answer}");
}

/// A 2026-07-28 request of `method` as rmcp's client sends it; `accept`
/// with a weight sends it through rmcp.
async fn stateless(joch: &Joch, accept: &str, method: &str, params: Value) -> Response {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let mut request = joch
        .http
        .post(endpoint(joch))
        .header("accept", accept)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = params["name"].as_str() {
        request = request.header("mcp-name", name);
    }
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": params});
    request.json(&body).send().await.unwrap()
}

#[tokio::test]
async fn direct_answers_are_rmcps_answers_refusals_included() {
    let (joch, webhook) = (Joch::start().await, Webhook::start().await);
    ticket_tool(&joch, &webhook).await;
    let weighted = "application/json, text/event-stream;q=0.9";
    for (method, params) in [
        ("tools/call", json!({"name": "no.such", "arguments": {}})),
        ("tools/list", json!({})),
    ] {
        let direct = stateless(&joch, ACCEPT, method, params.clone()).await;
        let by_rmcp = stateless(&joch, weighted, method, params).await;
        assert_eq!(direct.status(), by_rmcp.status(), "{method}");
        let kind = |r: &Response| r.headers()["content-type"].to_str().unwrap().to_owned();
        assert_eq!(kind(&direct), "application/json", "{method}");
        assert_eq!(kind(&direct), kind(&by_rmcp), "{method}");
        let direct: Value = direct.json().await.unwrap();
        let by_rmcp: Value = by_rmcp.json().await.unwrap();
        assert_eq!(redacted(&direct), redacted(&by_rmcp), "{method}");
    }

    // On sessions: a client that takes elicitation is served by rmcp.
    let plain = warm(&joch, "plain", json!({})).await;
    let asking = warm(&joch, "asking", json!({"elicitation": {}})).await;
    let mut answers = Vec::new();
    for session in [&plain, &asking] {
        let answer = post(&joch, Some(&session.id), &call(9, "no.such", json!({}))).await;
        let text = answer.text().await.unwrap();
        answers.push((by_worker(&text), messages(&text).pop().expect("an answer")));
    }
    let [(false, direct), (true, by_rmcp)] = &answers[..] else {
        panic!("not one direct and one through rmcp: {answers:?}")
    };
    assert_eq!(direct["result"]["isError"], true, "{direct}");
    assert_eq!(redacted(direct), redacted(by_rmcp));
}

#[tokio::test]
async fn a_stateless_client_that_hangs_up_mid_call_cancels_it_upstream() {
    use crate::mcp_surface::peers::{Docs, a_call_runs, newest_settled, start_docs_with};
    let docs = Docs::default();
    let url = start_docs_with(docs.clone()).await;
    let joch = Joch::start().await;
    crate::mcp::apply(&joch, crate::mcp::server("docs", &url, json!({}))).await;
    // A raw connection, so that hanging up is certain.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let params = json!({"name": "docs.wait", "arguments": {}, "_meta": meta});
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params});
    let body = body.to_string();
    let addr = joch.base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /v1/namespaces/{NS}/mcp HTTP/1.1\r\nhost: {addr}\r\naccept: {ACCEPT}\r\n\
         content-type: application/json\r\nmcp-protocol-version: 2026-07-28\r\n\
         mcp-method: tools/call\r\nmcp-name: docs.wait\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut socket, request.as_bytes())
        .await
        .unwrap();
    let running = a_call_runs(&joch).await;
    assert!(running, "the call never ran");
    // The client goes away before its answer.
    drop(socket);
    let settled = newest_settled(&joch).await;
    assert_eq!(settled["status"]["phase"], "Failed", "{settled}");
    assert_eq!(settled["status"]["error"]["code"], "cancelled", "{settled}");
    let told = docs.cancelled.load(std::sync::atomic::Ordering::SeqCst);
    assert!(told, "the upstream was not told");
}
