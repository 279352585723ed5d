//! What an approval binds (docs/policies.md, "What an approval binds"):
//! the call runs with the arguments a person approved, every `modify` the
//! record lists applied; a deny published while it waits wins; a tool
//! replaced while it waits sends it back for a new decision; the record
//! keeps the digest of what ran; and an MCP 2026-07-28 retry that asks
//! something else than its `requestState`'s call is refused.

use reqwest::{Method, StatusCode};
use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, rest_tool, wait_for_phase};
use crate::mcp_stateless::{approved_writes, stateless, ticket};
use crate::policies::apply_policy;
use joch_tools::ToolExecutor;

const TOOL: &str = "payments.send";

/// A payments tool posting to `path` of `webhook`, whose calls a person
/// approves (policy `people-approve`, version `v1`).
async fn setup(path: &str) -> (Webhook, Joch) {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    joch.create_tool(payments(&webhook, path)).await;
    apply_policy(&joch, "people-approve", approve_policy("v1", false)).await;
    (webhook, joch)
}

fn payments(webhook: &Webhook, path: &str) -> Value {
    rest_tool(
        TOOL,
        &format!("{}{path}", webhook.base),
        json!({"level": "external_write"}),
    )
}

/// Policy `people-approve` at `version`: payments wait for a person, or
/// (`frozen`) are denied.
fn approve_policy(version: &str, frozen: bool) -> Value {
    let rule = if frozen {
        json!({"when": {"tool.name": TOOL}, "action": {"deny": {"reason": "payments are frozen"}}})
    } else {
        json!({"when": {"tool.name": TOOL}, "require": {"approval": "human"}})
    };
    json!({"version": version, "rules": [rule]})
}

/// Calls the tool with `input` without waiting: the call waits for a person.
async fn deferred(joch: &Joch, name: &str, input: Value) -> Value {
    let call =
        json!({"metadata": {"name": name}, "spec": {"toolRef": {"name": TOOL}, "input": input}});
    let (status, body) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/toolcalls?wait=false"),
            Some(call),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"]["phase"], "AwaitingApproval", "{body}");
    approval(joch, name).await
}

async fn approval(joch: &Joch, name: &str) -> Value {
    let (status, approval) = joch
        .get(&format!("/v1/namespaces/{NS}/approvals/{name}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    approval
}

async fn approve(joch: &Joch, name: &str) -> Value {
    let (status, decided) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/approvals/{name}/approve"),
            Some(json!({"approvedBy": "alice"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    decided
}

async fn replace(joch: &Joch, plural: &str, name: &str, mut resource: Value) -> Value {
    let path = format!("/v1/namespaces/{NS}/{plural}/{name}");
    let (_, current) = joch.get(&path).await;
    resource["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    let (status, replaced) = joch.send(Method::PUT, &path, Some(resource)).await;
    assert_eq!(status, StatusCode::OK, "{replaced}");
    replaced
}

#[tokio::test]
async fn an_approved_call_runs_the_modified_arguments_it_was_approved_with() {
    let (webhook, joch) = setup("/record").await;
    apply_policy(
        &joch,
        "test-mode",
        json!({"version": "m1", "rules": [{"when": {"tool.name": TOOL},
            "action": {"modify": {"set": {"testMode": true}, "remove": ["memo"]}}}]}),
    )
    .await;
    let sent = json!({"amount": 10, "to": "alice", "memo": "lunch"});
    let waiting = deferred(&joch, "pay-modified", sent.clone()).await;
    let modified = json!({"amount": 10, "to": "alice", "testMode": true});
    // The person sees what would run, and the Approval binds it.
    assert_eq!(waiting["spec"]["payload"]["input"], modified, "{waiting}");
    let binding = &waiting["spec"]["binding"];
    let digest = binding["digest"].as_str().expect("a bound digest");
    let names: Vec<&str> = (binding["policies"].as_array().unwrap().iter())
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["people-approve", "test-mode"], "{binding}");

    let decided = approve(&joch, "pay-modified").await;
    assert_eq!(decided["status"]["decidedUnder"], binding["policies"]);
    let call = wait_for_phase(&joch, "pay-modified", "Succeeded").await;
    assert_eq!(
        webhook.recorded()[0]["body"],
        modified,
        "the modification is real"
    );
    assert_eq!(call["spec"]["input"], modified, "{call}");
    assert_eq!(call["status"]["originalInput"], sent, "{call}");
    assert_eq!(call["status"]["runDigest"], digest, "{call}");
    assert_ne!(call["status"]["checksum"], digest, "{call}");
    let modifies = (call["status"]["hookDecisions"].as_array().unwrap().iter())
        .filter(|d| d["decision"] == "modify")
        .count();
    assert_eq!(modifies, 1, "listed once, applied: {call}");

    // A call nobody had to approve records the digest of what ran too.
    let path = format!("/v1/namespaces/{NS}/policies/people-approve");
    let (status, _) = joch.send(Method::DELETE, &path, None).await;
    assert!(status.is_success(), "{status}");
    let (status, plain) = joch.call(TOOL, json!({"amount": 1, "to": "bob"})).await;
    assert_eq!(status, StatusCode::CREATED, "{plain}");
    assert_eq!(
        plain["status"]["runDigest"].as_str().map(str::len),
        Some(64),
        "{plain}"
    );
}

#[tokio::test]
async fn a_deny_published_while_a_call_waits_wins_over_its_approval() {
    let (webhook, joch) = setup("/record").await;
    deferred(&joch, "pay-frozen", json!({"amount": 10, "to": "alice"})).await;
    let frozen = json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Policy",
        "metadata": {"name": "people-approve"}, "spec": approve_policy("v2", true)});
    replace(&joch, "policies", "people-approve", frozen).await;

    let decided = approve(&joch, "pay-frozen").await;
    let under = json!([{"name": "people-approve", "version": "v2"}]);
    assert_eq!(decided["status"]["decidedUnder"], under, "{decided}");
    let call = wait_for_phase(&joch, "pay-frozen", "Denied").await;
    let deny = (call["status"]["hookDecisions"].as_array().unwrap().iter())
        .find(|d| d["decision"] == "deny")
        .unwrap_or_else(|| panic!("the deny is recorded: {call}"));
    assert_eq!(deny["policyVersion"], "v2", "{call}");
    assert!(call["status"]["runDigest"].is_null(), "nothing ran: {call}");
    assert_eq!(webhook.recorded().len(), 0, "nothing ran");
}

#[tokio::test]
async fn a_tool_replaced_while_its_call_waits_goes_back_for_a_new_decision() {
    // Version 1 posts to /echo (not recorded), version 2 to /record.
    let (webhook, joch) = setup("/echo").await;
    let asked = deferred(&joch, "pay-retooled", json!({"amount": 10, "to": "alice"})).await;
    let first = asked["spec"]["binding"]["toolVersion"].clone();
    let replaced = replace(&joch, "tools", TOOL, payments(&webhook, "/record")).await;
    let second = replaced["metadata"]["resourceVersion"].clone();
    assert_ne!(first, second);

    let again = approve(&joch, "pay-retooled").await;
    assert_eq!(again["status"]["phase"], "Pending", "{again}");
    assert_eq!(again["spec"]["binding"]["toolVersion"], second, "{again}");
    let superseded = &again["spec"]["payload"]["superseded"];
    assert_eq!(superseded["by"], "alice", "{again}");
    assert!(
        superseded["because"].as_str().unwrap().contains("changed"),
        "{again}"
    );
    let call = joch.get_call("pay-retooled").await;
    assert_eq!(call["status"]["phase"], "AwaitingApproval", "{call}");
    assert_eq!(
        webhook.hits(),
        0,
        "the new definition did not run unapproved"
    );

    approve(&joch, "pay-retooled").await;
    let call = wait_for_phase(&joch, "pay-retooled", "Succeeded").await;
    assert_eq!(call["status"]["toolVersion"], second, "{call}");
    assert_eq!(
        webhook.recorded().len(),
        1,
        "the approved definition ran once"
    );
}

fn refused_as_invalid_params(answer: Result<CallToolResponse, ServiceError>) -> String {
    match answer {
        Err(ServiceError::McpError(e)) if e.code.0 == -32602 => e.message.to_string(),
        other => panic!("not -32602: {other:?}"),
    }
}

fn state_of(answer: CallToolResponse) -> String {
    let CallToolResponse::InputRequired(asked) = answer else {
        panic!("not input_required: {answer:?}")
    };
    asked.request_state.expect("a requestState")
}

#[tokio::test]
async fn a_retry_asking_other_arguments_than_its_request_state_is_refused() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    approved_writes(&joch, &webhook, json!({})).await;
    let client = stateless(&joch, ()).await;
    let first = state_of(client.call_tool_once(ticket(10)).await.unwrap());
    let second = state_of(client.call_tool_once(ticket(20)).await.unwrap());
    let name = first.strip_prefix("toolcall/").unwrap();
    approve(&joch, name).await;
    // Approved, it runs on its caller's retry (docs/mcp.md), not before.
    wait_for_phase(&joch, name, "AwaitingApproval").await;
    assert_eq!(webhook.recorded().len(), 0, "{:?}", webhook.recorded());

    // Other arguments with the approved call's state; the other pending
    // call's arguments with it: refused, and nothing runs.
    let changed = refused_as_invalid_params(
        client
            .call_tool_once(ticket(9999).with_request_state(first.clone()))
            .await,
    );
    assert!(changed.contains("arguments"), "{changed}");
    refused_as_invalid_params(
        client
            .call_tool_once(ticket(20).with_request_state(first.clone()))
            .await,
    );
    let mut other_tool = CallToolRequestParams::new("other").with_request_state(first.clone());
    other_tool.arguments = Some(Default::default());
    refused_as_invalid_params(client.call_tool_once(other_tool).await);
    assert_eq!(webhook.recorded().len(), 0, "{:?}", webhook.recorded());

    // The same request runs the approved call; the other still waits.
    let done = client
        .call_tool_once(ticket(10).with_request_state(first))
        .await
        .unwrap();
    assert!(
        matches!(done, CallToolResponse::Complete(ref r) if r.is_error == Some(false)),
        "{done:?}"
    );
    assert_eq!(webhook.recorded().len(), 1, "{:?}", webhook.recorded());
    assert_eq!(webhook.recorded()[0]["body"], json!({"n": 10}));
    let other = joch
        .get_call(second.strip_prefix("toolcall/").unwrap())
        .await;
    assert_eq!(other["status"]["phase"], "AwaitingApproval", "{other}");
}

/// The library: the embedded gateway's approval checks the policies in
/// force as REST does, and the engine's resume refuses another request.
#[tokio::test]
async fn the_library_binds_approvals_as_the_server_does() {
    let webhook = Webhook::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gateway = joch_tools::EmbeddedGateway::open(dir.path().join("agent.db"), NS)
        .await
        .unwrap();
    gateway
        .apply_manifest(payments(&webhook, "/record"))
        .await
        .unwrap();
    let policy = |name, frozen| {
        json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Policy",
        "metadata": {"name": name}, "spec": approve_policy("v1", frozen)})
    };
    gateway
        .apply_manifest(policy("people-approve", false))
        .await
        .unwrap();
    let call = joch_tools::ToolCall::new(TOOL)
        .with_param("amount", 10)
        .with_tool_call_id("lib-pay");
    let waiting = tokio::spawn({
        let gateway = gateway.clone();
        async move { gateway.execute_tool_call(&call).await }
    });
    let approval = loop {
        if let Some(approval) = gateway.pending_approvals().await.unwrap().pop() {
            break approval;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let name = approval.metadata.name.clone();

    let calls = gateway.engine().calls();
    let local = joch_engine::Principal::local();
    let other = json!({"amount": 9999});
    let retry = joch_engine::Retry {
        tool: TOOL,
        input: &other,
    };
    let refused = calls
        .resume(&local, NS, &name, retry, std::time::Duration::ZERO)
        .await;
    assert!(
        matches!(
            refused,
            Err(joch_engine::EngineError::Refused {
                code: joch_core::RefusalCode::ResumeMismatch,
                ..
            })
        ),
        "{refused:?}"
    );

    // A freeze published while the call waits.
    gateway
        .apply_manifest(policy("payments-frozen", true))
        .await
        .unwrap();
    gateway.approve(&name, "alice").await.unwrap();
    let outcome = waiting.await.unwrap().unwrap();
    assert_eq!(outcome.phase, joch_core::Phase::Denied, "{outcome:?}");
    assert_eq!(outcome.error.unwrap().message, "payments are frozen");
    assert_eq!(webhook.recorded().len(), 0, "nothing ran");
}

/// A 2026-07-28 client running its call as a task: the task waits while
/// its tool is replaced (back for a new decision, visible to `tasks/get`),
/// then a deny published meanwhile wins over the second approval.
#[tokio::test]
async fn a_task_waits_again_when_its_tool_changes_and_a_later_deny_wins() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    approved_writes(&joch, &webhook, json!({})).await;
    let client = crate::mcp_tasks::tasker(&joch).await;
    let id = match client.call_tool_once(ticket(7)).await.unwrap() {
        CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("not a task: {other:?}"),
    };
    wait_for_phase(&joch, &id, "AwaitingApproval").await;
    let tool = rest_tool(
        "ticket.create",
        &format!("{}/echo", webhook.base),
        json!({"level": "external_write"}),
    );
    replace(&joch, "tools", "ticket.create", tool).await;
    let again = approve(&joch, &id).await;
    assert_eq!(again["status"]["phase"], "Pending", "{again}");
    let task = client
        .get_task(rmcp::model::GetTaskParams::new(id.clone()))
        .await
        .unwrap();
    let status = serde_json::to_value(&task).unwrap();
    assert_ne!(status["status"], "completed", "{status}");

    let frozen = json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Policy",
        "metadata": {"name": "people-approve-writes"}, "spec": {"version": "2", "rules": [
            {"when": {"tool.name": "ticket.create"}, "action": {"deny": {"reason": "tickets are frozen"}}}]}});
    replace(&joch, "policies", "people-approve-writes", frozen).await;
    approve(&joch, &id).await;
    let call = wait_for_phase(&joch, &id, "Denied").await;
    assert_eq!(
        call["status"]["error"]["message"], "tickets are frozen",
        "{call}"
    );
    assert_eq!(webhook.hits(), 0, "neither definition ran");
    assert_eq!(webhook.recorded().len(), 0);
}
