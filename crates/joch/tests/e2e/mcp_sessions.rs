//! MCP sessions (protocol versions before 2026-07-28) kept in the store:
//! any replica serves a session another opened, also after that one is
//! killed; an idle session holds no memory; sessions are capped per
//! principal with a JSON refusal, and closed by `DELETE` everywhere.

use std::time::Duration;

use futures_util::StreamExt;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, assert_error};
use crate::replicas::fresh_database;

pub(crate) const ACCEPT: &str = "application/json, text/event-stream";

/// A raw MCP client of one session, which may talk to any replica.
pub(crate) struct Session {
    pub(crate) id: String,
}

pub(crate) fn endpoint(joch: &Joch) -> String {
    format!("{}/v1/namespaces/{NS}/mcp", joch.base)
}

fn initialize(client: &str) -> Value {
    initialize_declaring(client, json!({}))
}

fn initialize_declaring(client: &str, capabilities: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": capabilities,
        "clientInfo": {"name": client, "version": "1"}}})
}

pub(crate) async fn post(joch: &Joch, session: Option<&str>, body: &Value) -> Response {
    let mut request = joch
        .http
        .post(endpoint(joch))
        .header("accept", ACCEPT)
        .json(body);
    if let Some(id) = session {
        request = request.header("mcp-session-id", id);
    }
    request.send().await.expect("post to the MCP endpoint")
}

impl Session {
    pub(crate) async fn open(joch: &Joch, client: &str) -> Session {
        Self::open_declaring(joch, client, json!({})).await
    }

    /// A session whose client declared `capabilities` at `initialize`.
    pub(crate) async fn open_declaring(joch: &Joch, client: &str, capabilities: Value) -> Session {
        let answer = post(joch, None, &initialize_declaring(client, capabilities)).await;
        assert_eq!(answer.status(), StatusCode::OK);
        let id = answer.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let body: Value = answer.json().await.expect("initialize answers JSON");
        assert_eq!(body["result"]["protocolVersion"], "2025-06-18", "{body}");
        let session = Session { id };
        let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let answer = post(joch, Some(&session.id), &done).await;
        assert_eq!(answer.status(), StatusCode::ACCEPTED);
        session
    }

    /// A request's answer, from a JSON or an SSE body.
    pub(crate) async fn request(&self, joch: &Joch, id: u64, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let answer = post(joch, Some(&self.id), &body).await;
        assert_eq!(answer.status(), StatusCode::OK, "{method} on {}", joch.base);
        let text = answer.text().await.unwrap();
        messages(&text)
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer to {method} in {text}"))
    }

    /// The session's notification stream (GET), resumed after `last` if given.
    async fn listen(&self, joch: &Joch, last: Option<&str>) -> Response {
        let mut request = joch
            .http
            .get(endpoint(joch))
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &self.id);
        if let Some(last) = last {
            request = request.header("last-event-id", last);
        }
        let response = request.send().await.expect("open the stream");
        assert_eq!(response.status(), StatusCode::OK);
        response
    }
}

/// The JSON-RPC messages of an SSE body (or the one of a JSON body).
pub(crate) fn messages(text: &str) -> Vec<Value> {
    if let Ok(one) = serde_json::from_str::<Value>(text) {
        return vec![one];
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

/// Reads `stream` until a message with `method` arrives; returns it and the
/// last event id seen.
async fn next_notification<B: AsRef<[u8]>>(
    stream: &mut (impl futures_util::Stream<Item = reqwest::Result<B>> + Unpin),
    method: &str,
) -> Option<String> {
    let mut text = String::new();
    let mut last_id = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline, stream.next()).await {
        text.push_str(&String::from_utf8_lossy(chunk.as_ref()));
        for line in text.lines() {
            if let Some(id) = line.strip_prefix("id:") {
                last_id = Some(id.trim().to_owned());
            }
        }
        if messages(&text).iter().any(|m| m["method"] == method) {
            return Some(last_id.unwrap_or_default());
        }
    }
    None
}

fn noop_tool(name: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {"description": "Does nothing.", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
    })
}

fn tool_names(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .expect("a tool list")
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_opened_on_one_replica_is_served_by_another_and_outlives_it() {
    let Some(store) = fresh_database("mcp_sessions").await else {
        return;
    };
    let mut a = crate::replicas::replica(&store).await;
    let b = crate::replicas::replica(&store).await;
    a.create_tool(noop_tool("first")).await;

    let session = Session::open(&a, "roaming").await;
    let listed = session.request(&b, 1, "tools/list", json!({})).await;
    assert_eq!(tool_names(&listed), ["first"]);
    let called = session
        .request(
            &b,
            2,
            "tools/call",
            json!({"name": "first", "arguments": {}}),
        )
        .await;
    assert_eq!(called["result"]["isError"], false, "{called}");

    // Notifications reach the stream the session opened on A, from a
    // change written through B.
    let mut stream = session.listen(&a, None).await.bytes_stream();
    // The session's tool watcher on A reads the list it starts from.
    tokio::time::sleep(Duration::from_millis(500)).await;
    b.create_tool(noop_tool("second")).await;
    let last = next_notification(&mut stream, "notifications/tools/list_changed")
        .await
        .expect("A's stream hears of B's new tool");

    // A dies; the stream resumes on B, which tells the client to list again.
    a.kill();
    drop(stream);
    let mut resumed = session.listen(&b, Some(&last)).await.bytes_stream();
    assert!(
        next_notification(&mut resumed, "notifications/tools/list_changed")
            .await
            .is_some(),
        "the resumed stream starts with a list_changed"
    );
    let listed = session.request(&b, 3, "tools/list", json!({})).await;
    assert_eq!(tool_names(&listed), ["first", "second"]);
    let called = session
        .request(
            &b,
            4,
            "tools/call",
            json!({"name": "second", "arguments": {}}),
        )
        .await;
    assert_eq!(called["result"]["isError"], false, "{called}");
    // B hears of a tool added while it serves the resumed stream.
    b.create_tool(noop_tool("third")).await;
    assert!(
        next_notification(&mut resumed, "notifications/tools/list_changed")
            .await
            .is_some()
    );

    // DELETE on B closes the session for every replica.
    let closed = b
        .http
        .delete(endpoint(&b))
        .header("mcp-session-id", &session.id)
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    let gone = post(
        &b,
        Some(&session.id),
        &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}),
    )
    .await;
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
    let body: Value = gone.json().await.unwrap();
    assert_eq!(body["code"], "session_not_found", "{body}");
}

#[tokio::test]
async fn sessions_are_capped_per_principal_with_a_json_refusal() {
    let joch = Joch::builder()
        .args(&["--max-mcp-sessions-per-principal", "2"])
        .start()
        .await;
    let first = Session::open(&joch, "one").await;
    let _second = Session::open(&joch, "two").await;
    let refused = post(&joch, None, &initialize("three")).await;
    let status = refused.status();
    let body: Value = refused.json().await.unwrap();
    assert_error(
        &(status, body),
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_mcp_sessions",
    );
    // Closing one makes room.
    let closed = joch
        .http
        .delete(endpoint(&joch))
        .header("mcp-session-id", &first.id)
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success());
    Session::open(&joch, "three").await;
}

/// Resident memory of a process, from /proc.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// An idle session holds nothing in memory: what opening sessions costs
/// is the store's (a row each) and the allocator's. Measured after a
/// warm-up, and with the default idle time, so that no expiry sweep runs
/// meanwhile (expiry: `mcp::an_idle_mcp_session_expires`; 10,000 sessions
/// and their expiry: `joch-bench --mcp-abandoned`, bench/RESULTS.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_that_initialize_and_leave_hold_no_memory() {
    const CLIENTS: usize = 2_000;
    let joch = Joch::start().await;
    let open = |n: usize| {
        let joch = &joch;
        futures_util::stream::iter(0..n)
            .map(move |i| async move { Session::open(joch, &format!("agent-{i}")).await.id })
            .buffer_unordered(16)
            .collect::<Vec<String>>()
    };
    open(1_000).await;
    let before = rss_kib(joch.pid());
    open(CLIENTS).await;
    let after = rss_kib(joch.pid());
    let per_session = (after.saturating_sub(before) * 1024) / CLIENTS as u64;
    assert!(
        per_session <= 16 * 1024,
        "{CLIENTS} sessions raised RSS from {before} KiB to {after} KiB: {per_session} bytes each"
    );
}

#[tokio::test]
async fn a_session_serves_only_the_principal_that_opened_it() {
    use crate::auth::{ROOT, token};
    let joch = Joch::builder().env("JOCH_ADMIN_TOKEN", ROOT).start().await;
    let alice = token(&joch, NS, "alice-bot", "agent").await;
    let bob = token(&joch, NS, "bob-bot", "agent").await;
    let as_ = |bearer: &str, session: Option<&str>, body: Value| {
        let mut request = joch
            .http
            .post(endpoint(&joch))
            .header("accept", ACCEPT)
            .bearer_auth(bearer)
            .json(&body);
        if let Some(id) = session {
            request = request.header("mcp-session-id", id);
        }
        request.send()
    };
    let opened = as_(&alice, None, initialize("alice")).await.unwrap();
    assert_eq!(opened.status(), StatusCode::OK);
    let id = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    // Bob holds Alice's session id: it is not his, and not named as hers.
    let stolen = as_(&bob, Some(&id), list.clone()).await.unwrap();
    assert_eq!(stolen.status(), StatusCode::NOT_FOUND);
    let body: Value = stolen.json().await.unwrap();
    assert_eq!(body["code"], "session_not_found", "{body}");
    let own = as_(&alice, Some(&id), list).await.unwrap();
    assert_eq!(own.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_session_recreated_after_a_restart_keeps_its_subscriptions_and_log_level() {
    let upstream = crate::mcp_surface::peers::start_docs().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("joch.db");
    let mut first = Joch::builder().db(&db).start().await;
    crate::mcp::apply(&first, crate::mcp::server("docs", &upstream, json!({}))).await;
    let session = Session::open(&first, "subscriber").await;
    let subscribed = session
        .request(
            &first,
            1,
            "resources/subscribe",
            json!({"uri": "docs.note://a"}),
        )
        .await;
    assert!(subscribed.get("result").is_some(), "{subscribed}");
    let level = session
        .request(&first, 2, "logging/setLevel", json!({"level": "info"}))
        .await;
    assert!(level.get("result").is_some(), "{level}");
    first.kill();

    // The session's worker is re-created by the next process, from its record.
    let second = Joch::builder().db(&db).start().await;
    session.request(&second, 3, "tools/list", json!({})).await;
    let mut stream = session.listen(&second, None).await.bytes_stream();
    // The stream is attached to the worker just after its headers answer.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, touched) = second.call("docs.touch", json!({})).await;
    assert!(status.is_success(), "{touched}");
    let heard = methods_heard(
        &mut stream,
        &["notifications/resources/updated", "notifications/message"],
    )
    .await;
    assert!(
        heard.contains(&"notifications/resources/updated".to_owned()),
        "the subscription outlived the process that took it: {heard:?}"
    );
    assert!(
        heard.contains(&"notifications/message".to_owned()),
        "the log level outlived the process that set it: {heard:?}"
    );
}

/// The methods of the notifications `stream` brings until each of `wanted`
/// came, or 20 seconds passed.
async fn methods_heard<B: AsRef<[u8]>>(
    stream: &mut (impl futures_util::Stream<Item = reqwest::Result<B>> + Unpin),
    wanted: &[&str],
) -> Vec<String> {
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let heard: Vec<String> = messages(&text)
            .iter()
            .filter_map(|m| m["method"].as_str().map(str::to_owned))
            .collect();
        if wanted.iter().all(|w| heard.iter().any(|h| h == w)) {
            return heard;
        }
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(chunk))) => text.push_str(&String::from_utf8_lossy(chunk.as_ref())),
            _ => return heard,
        }
    }
}
