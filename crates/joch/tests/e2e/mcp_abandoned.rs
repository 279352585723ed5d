//! No side effect the agent does not know of: a call a policy defers to a
//! person, made by a 2026-07-28 client that is not running it as a task,
//! was answered `input_required` and may never come back. Approved, it
//! runs only when that client retries it; never retried, it ends
//! `TimedOut` (`not_retried`) at the retry deadline its answer stated,
//! never run. A client running the call as a task keeps the durable task:
//! its call runs on approval.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use rmcp::model::{CallToolResponse, GetTaskParams};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook};
use crate::mcp_stateless::{Plain, Tasker, approved_writes, stateless, ticket};

/// The call `name` once `done` holds of it.
async fn call_when(joch: &Joch, name: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..200 {
        let call = joch.get_call(name).await;
        if done(&call) {
            return call;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("call {name} never got there: {}", joch.get_call(name).await)
}

async fn approve(joch: &Joch, name: &str) -> Value {
    let path = format!("/v1/namespaces/{NS}/approvals/{name}/approve");
    let (status, approval) = joch
        .send(Method::POST, &path, Some(json!({"approvedBy": "alice"})))
        .await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    approval
}

/// A first `tools/call` of `ticket.create` deferred: its answer, and the
/// call's name.
async fn deferred<H: rmcp::ClientHandler>(
    client: &rmcp::service::RunningService<rmcp::RoleClient, H>,
    n: u64,
) -> (rmcp::model::InputRequiredResult, String) {
    let CallToolResponse::InputRequired(first) = client.call_tool_once(ticket(n)).await.unwrap()
    else {
        panic!("not input_required")
    };
    let state = first.request_state.clone().expect("a requestState");
    let name = state.strip_prefix("toolcall/").expect("a call").to_owned();
    (first, name)
}

#[tokio::test]
async fn an_approved_call_never_retried_never_runs_and_ends_at_the_stated_deadline() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    approved_writes(&joch, &webhook, json!({"timeoutSeconds": 2})).await;
    let client = stateless(&joch, Plain).await;
    let (first, name) = deferred(&client, 1).await;

    // The answer says by when the client must retry: the deadline, plus as
    // long again as the approval's timeout (2 s here).
    let retry_by = first.meta.as_ref().unwrap()["joch.dev/retryBy"]
        .as_str()
        .expect("a retryBy")
        .to_owned();
    let approval = approve(&joch, &name).await;
    assert_eq!(approval["status"]["phase"], "Approved", "{approval}");
    let deadline = approval["status"]["deadline"].as_str().unwrap();
    let (deadline, retry_by_at) = (instant(deadline), instant(&retry_by));
    assert_eq!(
        (retry_by_at - deadline).num_milliseconds(),
        2000,
        "{retry_by}"
    );

    // Approved, not retried: it waits, and nothing ran.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = joch.get_call(&name).await;
    assert_eq!(waiting["status"]["phase"], "AwaitingApproval", "{waiting}");
    assert_eq!(webhook.recorded().len(), 0, "approval alone runs nothing");

    // At the retry deadline it ends, never run, saying why.
    let ended = call_when(&joch, &name, |c| c["status"]["phase"] != "AwaitingApproval").await;
    assert_eq!(ended["status"]["phase"], "TimedOut", "{ended}");
    assert_eq!(ended["status"]["error"]["code"], "not_retried", "{ended}");
    assert!(ended["status"].get("startedAt").is_none(), "{ended}");
    let settled = instant(ended["status"]["completedAt"].as_str().unwrap());
    assert!(
        settled >= retry_by_at,
        "settled {settled} before {retry_by}"
    );
    assert_eq!(webhook.recorded().len(), 0, "it never ran");

    // A late retry hears that outcome, and still nothing runs.
    let late = ticket(1).with_request_state(format!("toolcall/{name}"));
    let CallToolResponse::Complete(late) = client.call_tool_once(late).await.unwrap() else {
        panic!("not complete")
    };
    assert_eq!(late.is_error, Some(true), "{late:?}");
    assert!(format!("{late:?}").contains("did not retry"), "{late:?}");
    assert_eq!(webhook.recorded().len(), 0);
}

#[tokio::test]
async fn a_retry_runs_the_approved_call_once_whether_it_comes_before_or_after_the_decision() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    approved_writes(&joch, &webhook, json!({})).await;
    let client = stateless(&joch, Plain).await;

    // Retried after the approval: the retry runs it.
    let (_, after) = deferred(&client, 1).await;
    approve(&joch, &after).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(webhook.recorded().len(), 0, "not before the retry");
    let retry = ticket(1).with_request_state(format!("toolcall/{after}"));
    let CallToolResponse::Complete(done) = client.call_tool_once(retry.clone()).await.unwrap()
    else {
        panic!("the retry after the approval still waits")
    };
    assert_eq!(done.is_error, Some(false), "{done:?}");
    let CallToolResponse::Complete(again) = client.call_tool_once(retry).await.unwrap() else {
        panic!("not complete")
    };
    assert_eq!(again.structured_content, done.structured_content);
    assert_eq!(webhook.recorded().len(), 1, "ran once, for two retries");

    // A retry waiting when the person decides: it runs it at once.
    let (_, during) = deferred(&client, 2).await;
    let retry = ticket(2).with_request_state(format!("toolcall/{during}"));
    let waiting = tokio::spawn({
        let client = stateless(&joch, Plain).await;
        async move { client.call_tool_once(retry).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    approve(&joch, &during).await;
    let answer = waiting.await.unwrap();
    let CallToolResponse::Complete(done) = answer else {
        panic!("the waiting retry was not answered with the outcome: {answer:?}")
    };
    assert_eq!(done.is_error, Some(false), "{done:?}");
    assert_eq!(webhook.recorded().len(), 2);
    let call = joch.get_call(&during).await;
    assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
    assert_eq!(call["spec"]["runsOn"], "retry", "{call}");
    assert_eq!(call["spec"]["approval"]["approvedBy"], "alice", "{call}");
}

#[tokio::test]
async fn a_task_clients_call_runs_on_approval_and_an_abandoned_one_can_be_cancelled() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    approved_writes(&joch, &webhook, json!({})).await;

    // A task runs on approval, with no retry.
    let tasker = stateless(&joch, Tasker).await;
    let CallToolResponse::Task(created) = tasker.call_tool_once(ticket(1)).await.unwrap() else {
        panic!("not a task")
    };
    let id = created.task.task_id;
    approve(&joch, &id).await;
    let call = call_when(&joch, &id, |c| c["status"]["phase"] == "Succeeded").await;
    assert!(call["spec"].get("runsOn").is_none(), "{call}");
    let task = tasker.get_task(GetTaskParams::new(&id)).await.unwrap();
    let task = serde_json::to_value(task).unwrap();
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(webhook.recorded().len(), 1);

    // Approved and not retried, the caller may still cancel it: never run.
    let client = stateless(&joch, Plain).await;
    let (_, name) = deferred(&client, 2).await;
    approve(&joch, &name).await;
    let cancel = format!("/v1/namespaces/{NS}/toolcalls/{name}/cancel");
    let (status, cancelled) = joch.send(Method::POST, &cancel, None).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"]["phase"], "Failed", "{cancelled}");
    assert_eq!(cancelled["status"]["error"]["code"], "cancelled");
    let retry = ticket(2).with_request_state(format!("toolcall/{name}"));
    let CallToolResponse::Complete(late) = client.call_tool_once(retry).await.unwrap() else {
        panic!("not complete")
    };
    assert_eq!(late.is_error, Some(true), "{late:?}");
    assert_eq!(webhook.recorded().len(), 1, "the cancelled call never ran");

    // REST has no retry: a call that would wait for one is refused.
    let body = json!({"spec": {"toolRef": {"name": "ticket.create"}, "input": {"n": 3}, "runsOn": "retry"}});
    let path = format!("/v1/namespaces/{NS}/toolcalls");
    let (status, refused) = joch.send(Method::POST, &path, Some(body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["code"], "bad_request", "{refused}");
}

fn instant(text: &str) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::parse_from_rfc3339(text).expect("an RFC 3339 instant")
}
