//! A session's `tools/call` stream that drops before its answer, resumed
//! with `Last-Event-ID` (Streamable HTTP resumability, 2025-11-25 SSE
//! polling): the answer comes on the resumed stream, from the replica that
//! ran the call or any other, and the call ran once. An event id the
//! session did not give (another session's, altered, made up) is refused
//! and carries nothing.

use std::time::Duration;

use futures_util::StreamExt;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, assert_error, rest_tool};
use crate::mcp_sessions::{ACCEPT, Session, endpoint, messages};
use crate::replicas::fresh_database;

/// POSTs a `tools/call` of `tool` on `session` and reads its stream only
/// up to the first event id, then drops it: the id the client resumes with.
async fn call_and_drop(joch: &Joch, session: &Session, id: u64, tool: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": tool, "arguments": {"n": id}}});
    let response = joch
        .http
        .post(endpoint(joch))
        .header("accept", ACCEPT)
        .header("mcp-session-id", &session.id)
        .json(&body)
        .send()
        .await
        .expect("post the call");
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline, stream.next()).await {
        text.push_str(&String::from_utf8_lossy(&chunk));
        let first = text.lines().find_map(|l| l.strip_prefix("id:"));
        if let Some(first) = first {
            assert!(
                text.contains("retry:"),
                "the priming event says when to come back: {text}"
            );
            return first.trim().to_owned();
        }
    }
    panic!("the call's stream carried no event id: {text}");
}

/// `GET` with `Last-Event-ID: last` on `session`.
async fn resume(joch: &Joch, session: &Session, last: &str) -> Response {
    joch.http
        .get(endpoint(joch))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session.id)
        .header("last-event-id", last)
        .send()
        .await
        .expect("resume the stream")
}

/// The answer to request `id` on a resumed stream, which ends with it.
async fn resumed_answer(joch: &Joch, session: &Session, last: &str, id: u64) -> Value {
    let response = resume(joch, session, last).await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = tokio::time::timeout(Duration::from_secs(30), response.text())
        .await
        .expect("the resumed stream ends once it has carried the answer")
        .expect("read the resumed stream");
    messages(&text)
        .into_iter()
        .find(|m| m["id"] == json!(id))
        .unwrap_or_else(|| panic!("no answer to {id} on the resumed stream: {text}"))
}

/// The calls of tool `tool`, from the REST API.
async fn calls_of(joch: &Joch, tool: &str) -> Vec<Value> {
    let (status, list) = joch
        .get(&format!("/v1/namespaces/{NS}/toolcalls?tool={tool}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["items"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_dropped_call_stream_resumes_with_its_answer_and_the_call_runs_once() {
    let joch = Joch::start().await;
    let webhook = Webhook::start().await;
    let url = format!("{}/slow-record", webhook.base);
    joch.create_tool(rest_tool("slow", &url, json!({"level": "local_write"})))
        .await;
    // A client that takes nothing from joch (its calls are served
    // directly), and one that takes elicitation (rmcp's worker serves
    // them); the resumed stream is the worker's, or the record's.
    let clients = [
        ("plain", json!({}), ".d."),
        ("asking", json!({"elicitation": {}}), ".w"),
    ];
    for (n, (client, capabilities, position)) in clients.into_iter().enumerate() {
        let session = crate::mcp_direct::warm(&joch, client, capabilities).await;
        let id = 10 + n as u64;
        let last = call_and_drop(&joch, &session, id, "slow").await;
        assert!(last.starts_with("jc1."), "{last}");
        assert!(last.contains(position), "{client}: {last}");
        let answer = resumed_answer(&joch, &session, &last, id).await;
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        assert_eq!(
            answer["result"]["structuredContent"]["stored"], true,
            "{answer}"
        );
        // Asked again with the same id, the answer is the same: read, not run.
        let again = resumed_answer(&joch, &session, &last, id).await;
        assert_eq!(again["result"], answer["result"]);
    }
    // Each call ran once, and its record settled.
    assert_eq!(webhook.recorded().len(), 2, "{:?}", webhook.recorded());
    let calls = calls_of(&joch, "slow").await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    for call in &calls {
        assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
    }
}

#[tokio::test]
async fn an_event_id_the_session_did_not_give_is_refused_and_carries_nothing() {
    let joch = Joch::start().await;
    let webhook = Webhook::start().await;
    let url = format!("{}/slow-record", webhook.base);
    joch.create_tool(rest_tool("slow", &url, json!({"level": "local_write"})))
        .await;
    let owner = Session::open(&joch, "owner").await;
    let other = Session::open(&joch, "other").await;
    let last = call_and_drop(&joch, &owner, 1, "slow").await;

    // Another session of the same caller, with the owner's id.
    let mut refused = vec![last.clone()];
    // The owner's id altered: another call, another request, no signature.
    let parts: Vec<&str> = last.split('.').collect();
    assert_eq!(parts.len(), 5, "{last}");
    refused.push(format!(
        "jc1.mcp-someone-else.{}.{}.{}",
        parts[2], parts[3], parts[4]
    ));
    refused.push(format!("jc1.{}.{}.n2.{}", parts[1], parts[2], parts[4]));
    refused.push(format!("jc1.{}.{}.{}.", parts[1], parts[2], parts[3]));
    refused.push("jc1.made-up".to_owned());
    for id in &refused {
        let response = resume(&joch, &other, id).await;
        let status = response.status();
        let body: Value = response.json().await.expect("a JSON refusal");
        assert_error(&(status, body), StatusCode::NOT_FOUND, "unknown_event_id");
    }
    for id in &refused[1..] {
        let response = resume(&joch, &owner, id).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{id}");
    }
    // The owner's own id still resumes its call.
    let answer = resumed_answer(&joch, &owner, &last, 1).await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(webhook.recorded().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_stream_dropped_on_one_replica_resumes_on_another() {
    let Some(store) = fresh_database("mcp_resume").await else {
        return;
    };
    let mut a = crate::replicas::replica(&store).await;
    let b = crate::replicas::replica(&store).await;
    let webhook = Webhook::start().await;
    let url = format!("{}/slow-record", webhook.base);
    a.create_tool(rest_tool("slow", &url, json!({"level": "local_write"})))
        .await;
    let session = Session::open(&a, "roaming").await;
    let last = call_and_drop(&a, &session, 3, "slow").await;
    // B holds nothing of the stream: the answer is the call's record.
    let answer = resumed_answer(&b, &session, &last, 3).await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["stored"], true,
        "{answer}"
    );
    a.kill();
    let calls = calls_of(&b, "slow").await;
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["status"]["phase"], "Succeeded");
    assert_eq!(webhook.recorded().len(), 1);
}

#[tokio::test]
async fn a_resumed_stream_waits_for_a_call_a_person_decides() {
    let joch = Joch::start().await;
    joch.create_tool(json!({"metadata": {"name": "refund"}, "spec": {
        "description": "", "inputSchema": {"type": "object"},
        "sideEffects": {"requiresApproval": true}, "backend": {"type": "noop"}}}))
        .await;
    let session = Session::open(&joch, "patient").await;
    session.request(&joch, 1, "tools/list", json!({})).await;
    let last = call_and_drop(&joch, &session, 2, "refund").await;
    // The id names the call: the Approval has its name.
    let call = last.split('.').nth(1).expect("the call's name").to_owned();
    // Recorded and waiting, though its client dropped the stream at once.
    let path = format!("/v1/namespaces/{NS}/toolcalls/{call}");
    let mut phase = Value::Null;
    for _ in 0..250 {
        phase = joch.get(&path).await.1["status"]["phase"].clone();
        if phase == "AwaitingApproval" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(phase, "AwaitingApproval");
    let waiting = {
        let (joch, session, last) = (&joch, &session, last.clone());
        async move { resumed_answer(joch, session, &last, 2).await }
    };
    let approve = async {
        // The resumed stream is open and waiting when the person decides.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (status, decided) = joch
            .send(
                reqwest::Method::POST,
                &format!("/v1/namespaces/{NS}/approvals/{call}/approve"),
                Some(json!({"approvedBy": "alice"})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{decided}");
    };
    let (answer, ()) = tokio::join!(waiting, approve);
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let record = joch.get_call(&call).await;
    assert_eq!(record["status"]["phase"], "Succeeded", "{record}");
}
