//! Cancelling a running call, on any replica: an MCP task (rmcp's client,
//! protocol 2026-07-28 with the tasks extension) running against a slow
//! upstream (the official Rust SDK) is cancelled through `tasks/cancel`, on
//! the replica running it or another; a webhook call through REST. The
//! upstream is told, and the call's record settles cancelled, once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, ProtocolVersion,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt};
use serde_json::json;

use crate::audit::chained;
use crate::harness::{Joch, NS, Webhook, rest_tool, wait_for_hits, wait_for_phase};
use crate::mcp::{apply, server};
use crate::mcp_surface::peers::{Docs, start_docs_with};
use crate::replicas::{fresh_database, replica};

/// A 2026-07-28 client that runs its calls as tasks.
#[derive(Clone, Default)]
pub(crate) struct Tasker;

impl ClientHandler for Tasker {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_tasks().build(),
            Implementation::new("e2e-tasker", "1"),
        )
    }
}

pub(crate) async fn tasker(joch: &Joch) -> RunningService<RoleClient, Tasker> {
    let url = format!("{}/v1/namespaces/{NS}/mcp", joch.base);
    let discover = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    Tasker
        .serve_with_lifecycle(StreamableHttpClientTransport::from_uri(url), discover)
        .await
        .expect("server/discover")
}

/// Starts `docs.wait` (which waits 10 s to be cancelled) as a task, and
/// returns its id once it runs upstream.
async fn running_wait(
    joch: &Joch,
    docs: &Docs,
    client: &RunningService<RoleClient, Tasker>,
) -> String {
    let id = match client
        .call_tool_once(CallToolRequestParams::new("docs.wait"))
        .await
        .unwrap()
    {
        CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("not a task: {other:?}"),
    };
    wait_for_phase(joch, &id, "Running").await;
    assert!(
        set(&docs.waiting).await,
        "the call never reached the upstream"
    );
    id
}

async fn set(flag: &AtomicBool) -> bool {
    for _ in 0..100 {
        if flag.load(Ordering::SeqCst) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The call's task says cancelled, and its record settled once, cancelled.
async fn assert_cancelled_once(joch: &Joch, client: &RunningService<RoleClient, Tasker>, id: &str) {
    let task = client.get_task(GetTaskParams::new(id)).await.unwrap();
    let task = serde_json::to_value(task).unwrap();
    assert_eq!(task["status"], "cancelled", "{task}");
    let call = joch.get_call(id).await;
    assert_eq!(call["status"]["phase"], "Failed", "{call}");
    assert_eq!(call["status"]["error"]["code"], "cancelled", "{call}");
    let settled: Vec<_> = chained(joch, id)
        .await
        .into_iter()
        .filter(|phase| !matches!(phase.as_str(), "Pending" | "Running"))
        .collect();
    assert_eq!(settled, ["Failed"], "settled once");
}

#[tokio::test]
async fn a_running_task_is_cancelled_upstream_and_settles_cancelled_once() {
    let docs = Docs::default();
    let url = start_docs_with(docs.clone()).await;
    let joch = Joch::start().await;
    apply(&joch, server("docs", &url, json!({}))).await;
    let client = tasker(&joch).await;
    let id = running_wait(&joch, &docs, &client).await;

    client
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .unwrap();
    assert!(set(&docs.cancelled).await, "the upstream was not told");
    assert_cancelled_once(&joch, &client, &id).await;
}

#[tokio::test]
async fn a_running_webhook_call_cancelled_through_rest_drops_its_request() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    // The first call hangs for 30 s.
    let hangs = format!("{}/hang-first", webhook.base);
    joch.create_tool(rest_tool(
        "slow.read",
        &hangs,
        json!({"level": "read_only"}),
    ))
    .await;
    let (status, call) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/toolcalls?wait=false"),
            Some(json!({"spec": {"toolRef": {"name": "slow.read"}, "input": {}}})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{call}");
    let name = call["metadata"]["name"].as_str().unwrap().to_owned();
    wait_for_phase(&joch, &name, "Running").await;

    let cancel = format!("/v1/namespaces/{NS}/toolcalls/{name}/cancel");
    let started = std::time::Instant::now();
    let (status, cancelled) = joch.send(Method::POST, &cancel, None).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"]["phase"], "Failed", "{cancelled}");
    assert_eq!(
        cancelled["status"]["error"]["code"], "cancelled",
        "{cancelled}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "not dropped");
    // Cancelling it again answers it as it stands; an unknown call is 404.
    let (status, again) = joch.send(Method::POST, &cancel, None).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again, cancelled);
    let missing = format!("/v1/namespaces/{NS}/toolcalls/nope/cancel");
    let (status, body) = joch.send(Method::POST, &missing, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["code"], "toolcall_not_found", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_running_on_one_replica_is_cancelled_through_another() {
    let Some(store) = fresh_database("mcp_task_cancel").await else {
        return;
    };
    let docs = Docs::default();
    let url = start_docs_with(docs.clone()).await;
    let (a, b) = tokio::join!(replica(&store), replica(&store));
    apply(&a, server("docs", &url, json!({}))).await;
    let client_a = tasker(&a).await;
    let id = running_wait(&a, &docs, &client_a).await;
    let replica_a = a.get_call(&id).await["status"]["replica"].clone();

    let client_b = tasker(&b).await;
    client_b
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .unwrap();
    assert!(set(&docs.cancelled).await, "the upstream was not told");
    assert_cancelled_once(&b, &client_b, &id).await;
    let call = b.get_call(&id).await;
    assert_eq!(call["status"]["replica"], replica_a, "settled by A: {call}");
    // Through REST on B, the settled call answers as it stands.
    let cancel = format!("/v1/namespaces/{NS}/toolcalls/{id}/cancel");
    let (status, again) = b.send(Method::POST, &cancel, None).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["status"]["error"]["code"], "cancelled", "{again}");
}

#[tokio::test]
async fn only_the_agent_that_made_a_call_or_an_admin_may_cancel_it() {
    use crate::auth::{ROOT, token};
    let webhook = Webhook::start().await;
    let joch = Joch::builder().env("JOCH_ADMIN_TOKEN", ROOT).start().await;
    let hangs = format!("{}/hang-first", webhook.base);
    let tools = format!("/v1/namespaces/{NS}/tools");
    let tool = rest_tool("slow.read", &hangs, json!({"level": "read_only"}));
    let (status, _) = joch.send_as(ROOT, Method::POST, &tools, Some(tool)).await;
    assert!(status.is_success(), "{status}");
    let (maker, other) = (
        token(&joch, NS, "bot-a", "agent").await,
        token(&joch, NS, "bot-b", "agent").await,
    );
    let calls = format!("/v1/namespaces/{NS}/toolcalls?wait=false");
    let body = json!({"spec": {"toolRef": {"name": "slow.read"}, "input": {}}});
    let (status, call) = joch.send_as(&maker, Method::POST, &calls, Some(body)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{call}");
    let name = call["metadata"]["name"].as_str().unwrap().to_owned();
    wait_for_hits(&webhook, 1).await;

    let cancel = format!("/v1/namespaces/{NS}/toolcalls/{name}/cancel");
    let refused = joch.send_as(&other, Method::POST, &cancel, None).await;
    crate::harness::assert_error(&refused, StatusCode::FORBIDDEN, "forbidden");
    let path = format!("/v1/namespaces/{NS}/toolcalls/{name}");
    let (_, still) = joch.send_as(ROOT, Method::GET, &path, None).await;
    assert_ne!(still["status"]["phase"], "Failed", "not cancelled: {still}");
    let (status, cancelled) = joch.send_as(ROOT, Method::POST, &cancel, None).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(
        cancelled["status"]["error"]["code"], "cancelled",
        "{cancelled}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_whose_replica_died_is_settled_cancelled_by_the_survivor_not_run_again() {
    let Some(store) = fresh_database("mcp_task_cancel_dead").await else {
        return;
    };
    let docs = Docs::default();
    let url = start_docs_with(docs.clone()).await;
    let (mut a, b) = tokio::join!(replica(&store), replica(&store));
    apply(&a, server("docs", &url, json!({}))).await;
    let client_a = tasker(&a).await;
    let id = running_wait(&a, &docs, &client_a).await;
    drop(client_a);
    a.kill();

    // B marks it; B, reaping A's calls once A's lease lapses, settles it.
    let client_b = tasker(&b).await;
    client_b
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .unwrap();
    let call = wait_for_phase(&b, &id, "Failed").await;
    assert_eq!(call["status"]["error"]["code"], "cancelled", "{call}");
    assert_eq!(call["status"]["attempts"], 1, "not run again: {call}");
    assert_cancelled_once(&b, &client_b, &id).await;
}
