//! Hook mode: the agent runs its tools itself and asks joch before and
//! tells joch after, over the AOS guardian JSON-RPC endpoint (Claude Code's
//! HTTP hooks: `hooks_claude.rs`).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, wait_for_phase};
use crate::policies::apply_policy;

fn aos_path() -> String {
    format!("/v1/namespaces/{NS}/hooks/aos")
}

async fn rpc(joch: &Joch, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let (status, answer) = joch.send(Method::POST, &aos_path(), Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["id"], 7, "{answer}");
    answer
}

fn request(id: &str, tool: &str, inputs: Value) -> Value {
    json!({
        "toolCallRequest": {"executionId": id, "toolId": tool, "inputs": inputs},
        "reasoning": "The customer asked for a refund.",
        "context": {
            "agent": {"id": "support-triage", "name": "Support triage", "version": "1.2", "provider": {"name": "acme"}},
            "session": {"id": "sess-1"},
            "turnId": "69ef57b8-3993-440d-9493-523914f3f149",
            "stepId": "9263448a-186a-4c3b-abcf-443feb44a01e",
            "timestamp": "2026-05-10T10:35:00Z"
        }
    })
}

fn result(id: &str, output: Value) -> Value {
    json!({"toolCallResult": {"executionId": id, "toolId": "x", "result": output}})
}

async fn ticket_tool(joch: &Joch) {
    joch.create_tool(json!({
        "metadata": {"name": "zendesk.create_ticket"},
        "spec": {
            "description": "Open a ticket.",
            "inputSchema": {"type": "object", "properties": {"subject": {"type": "string"}, "priority": {"type": "string"}}},
            "sideEffects": {"level": "external_write"},
            "backend": {"type": "agent"}
        }
    }))
    .await;
}

#[tokio::test]
async fn an_aos_request_and_result_make_one_record_in_hook_mode() {
    let joch = Joch::start().await;
    ticket_tool(&joch).await;
    let inputs = json!([{"name": "subject", "value": "Refund for 12345"}, {"name": "priority", "value": "high"}]);
    let allowed = rpc(
        &joch,
        "steps/toolCallRequest",
        request("exec-1", "zendesk.create_ticket", inputs),
    )
    .await;
    assert_eq!(allowed["result"]["decision"], "allow", "{allowed}");

    // Between the two hooks the agent runs the tool: the record says so.
    let running = joch.get_call("exec-1").await;
    assert_eq!(running["status"]["phase"], "Running");
    assert_eq!(running["spec"]["mode"], "hook");
    assert_eq!(
        running["spec"]["input"],
        json!({"subject": "Refund for 12345", "priority": "high"})
    );
    assert_eq!(running["spec"]["agentRef"]["name"], "support-triage");
    assert_eq!(running["spec"]["executionRef"]["name"], "sess-1");
    assert_eq!(
        running["spec"]["hookContext"],
        json!({"aosTurnId": "69ef57b8-3993-440d-9493-523914f3f149", "aosStepId": "9263448a-186a-4c3b-abcf-443feb44a01e"})
    );
    assert_eq!(
        running["spec"]["context"]["reasoning"],
        "The customer asked for a refund."
    );
    assert_eq!(running["spec"]["sideEffects"]["level"], "external_write");

    let done = rpc(
        &joch,
        "steps/toolCallResult",
        result("exec-1", json!({"ticketId": 77123})),
    )
    .await;
    assert_eq!(done["result"]["decision"], "allow", "{done}");
    let call = joch.get_call("exec-1").await;
    assert_eq!(call["status"]["phase"], "Succeeded");
    assert_eq!(call["status"]["output"], json!({"ticketId": 77123}));
    assert_eq!(call["status"]["attempts"], 1);
    assert!(call["status"]["latencyMs"].is_u64());
    assert_eq!(crate::audit::chained(&joch, "exec-1").await, ["Succeeded"]);

    // Its execution's timeline shows it like any other call.
    let (_, events) = joch
        .get(&format!("/v1/namespaces/{NS}/executions/sess-1/events"))
        .await;
    let kinds: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.last(), Some(&"tool_completed"), "{events}");
    assert!(kinds.contains(&"policy_decision"), "{events}");

    // Reporting again changes nothing and answers the same.
    let again = rpc(
        &joch,
        "steps/toolCallResult",
        result("exec-1", json!({"ticketId": 1})),
    )
    .await;
    assert_eq!(again["result"]["decision"], "allow");
    assert_eq!(
        joch.get_call("exec-1").await["status"]["output"],
        json!({"ticketId": 77123})
    );
}

#[tokio::test]
async fn aos_decisions_carry_the_deciding_policy() {
    let joch = Joch::start().await;
    ticket_tool(&joch).await;
    apply_policy(
        &joch,
        "ticket-rules",
        json!({
            "version": "v3",
            "appliesTo": {"tools": ["zendesk.*"]},
            "rules": [
                {"name": "no-urgent", "when": {"input.priority": "urgent"}, "action": {"deny": {"reason": "urgent tickets go through the phone line"}}},
                {"name": "tag-low", "when": {"input.priority": "low"}, "action": {"modify": {"set": {"tags": ["low-priority"]}}}},
                {"name": "hide-email", "hook": "toolCallResult", "when": {"output.email": "*"}, "action": {"modify": {"redact": ["email"]}}}
            ]
        }),
    )
    .await;

    let denied = rpc(
        &joch,
        "steps/toolCallRequest",
        request(
            "exec-urgent",
            "zendesk.create_ticket",
            json!([{"name": "priority", "value": "urgent"}]),
        ),
    )
    .await;
    let verdict = &denied["result"];
    assert_eq!(verdict["decision"], "deny", "{denied}");
    assert_eq!(
        verdict["reason"],
        "urgent tickets go through the phone line"
    );
    assert_eq!(verdict["policyId"], "ticket-rules");
    assert_eq!(verdict["policyVersion"], "v3");
    assert_eq!(
        joch.get_call("exec-urgent").await["status"]["phase"],
        "Denied"
    );

    let modified = rpc(
        &joch,
        "steps/toolCallRequest",
        request(
            "exec-low",
            "zendesk.create_ticket",
            json!([{"name": "priority", "value": "low"}]),
        ),
    )
    .await;
    let verdict = &modified["result"];
    assert_eq!(verdict["decision"], "modify", "{modified}");
    let inputs = verdict["modifiedRequest"]["inputs"].as_array().unwrap();
    assert!(
        inputs.contains(&json!({"name": "tags", "value": ["low-priority"]})),
        "{verdict}"
    );
    assert_eq!(verdict["modifiedRequest"]["executionId"], "exec-low");

    let redacted = rpc(
        &joch,
        "steps/toolCallResult",
        result(
            "exec-low",
            json!({"ticketId": 5, "email": "jane@example.com"}),
        ),
    )
    .await;
    let verdict = &redacted["result"];
    assert_eq!(verdict["decision"], "modify", "{redacted}");
    assert_eq!(verdict["modifiedResult"]["email"], "[REDACTED]");
    assert_eq!(verdict["modifiedResult"]["ticketId"], 5);
    let call = joch.get_call("exec-low").await;
    let decisions: Vec<&str> = call["status"]["hookDecisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["hook"].as_str().unwrap())
        .collect();
    assert_eq!(decisions, ["steps/toolCallRequest", "steps/toolCallResult"]);
}

#[tokio::test]
async fn a_deferred_aos_request_is_answered_once_approved_through_the_cli() {
    let joch = Joch::start().await;
    ticket_tool(&joch).await;
    apply_policy(
        &joch,
        "ask",
        json!({"version": "1", "appliesTo": {"tools": ["zendesk.*"]}, "rules": [{"name": "person", "require": {"approval": "human"}}]}),
    )
    .await;
    let pending = {
        let joch_base = joch.base.clone();
        let http = joch.http.clone();
        tokio::spawn(async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "steps/toolCallRequest", "params": request("exec-ask", "zendesk.create_ticket", json!([]))});
            let answer: Value = http
                .post(format!("{joch_base}{}", aos_path()))
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            answer
        })
    };
    let path = format!("/v1/namespaces/{NS}/approvals/exec-ask");
    for _ in 0..200 {
        if joch.get(&path).await.0 == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        joch.get_call("exec-ask").await["status"]["phase"],
        "AwaitingApproval"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !pending.is_finished(),
        "the agent is held until a person decides"
    );
    let out = joch.cli(&["approve", "exec-ask", "-n", NS, "--by", "alice"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer = pending.await.unwrap();
    assert_eq!(answer["result"]["decision"], "allow", "{answer}");
    let call = joch.get_call("exec-ask").await;
    assert_eq!(call["status"]["phase"], "Running");
    assert_eq!(call["spec"]["approval"]["approvedBy"], "alice");
}

#[tokio::test]
async fn an_unregistered_tool_is_recorded_with_unknown_side_effects() {
    let joch = Joch::start().await;
    let allowed = rpc(
        &joch,
        "steps/toolCallRequest",
        request(
            "exec-shell",
            "shell",
            json!([{"name": "cmd", "value": "ls"}]),
        ),
    )
    .await;
    assert_eq!(allowed["result"]["decision"], "allow");
    let call = joch.get_call("exec-shell").await;
    assert_eq!(call["spec"]["sideEffects"]["level"], "unknown");
    assert!(call["status"].get("toolVersion").is_none(), "{call}");

    // The same tool through the gateway is not runnable: joch has no such tool.
    let (status, _) = joch.call("shell", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_result_that_never_arrives_leaves_the_call_unknown() {
    let joch = Joch::builder()
        .args(&["--hook-result-timeout-seconds", "1"])
        .start()
        .await;
    rpc(
        &joch,
        "steps/toolCallRequest",
        request("exec-lost", "shell", json!([])),
    )
    .await;
    let call = wait_for_phase(&joch, "exec-lost", "Unknown").await;
    assert_eq!(call["status"]["error"]["code"], "hook_result_missing");
    // A late result is still taken: it is the authoritative outcome.
    let late = rpc(
        &joch,
        "steps/toolCallResult",
        result("exec-lost", json!("done")),
    )
    .await;
    assert_eq!(late["result"]["decision"], "allow", "{late}");
    assert_eq!(
        joch.get_call("exec-lost").await["status"]["phase"],
        "Succeeded"
    );
}

#[tokio::test]
async fn malformed_json_rpc_gets_json_rpc_errors_and_records_nothing_twice() {
    let joch = Joch::start().await;
    let (status, parse) = joch
        .send_raw(
            Method::POST,
            &aos_path(),
            "application/json",
            b"{nope".to_vec(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(parse["error"]["code"], -32700);
    assert_eq!(parse["id"], Value::Null);

    let not_rpc = joch
        .send(
            Method::POST,
            &aos_path(),
            Some(json!({"id": 1, "method": "x"})),
        )
        .await
        .1;
    assert_eq!(not_rpc["error"]["code"], -32600, "{not_rpc}");
    let unknown = rpc(&joch, "steps/somethingElse", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32601);
    let bad_params = rpc(
        &joch,
        "steps/toolCallRequest",
        json!({"toolCallRequest": {"toolId": "shell"}}),
    )
    .await;
    assert_eq!(bad_params["error"]["code"], -32602);
    assert!(
        bad_params["error"]["message"]
            .as_str()
            .unwrap()
            .contains("executionId"),
        "{bad_params}"
    );
    let bad_name = rpc(
        &joch,
        "steps/toolCallRequest",
        request("has space", "shell", json!([])),
    )
    .await;
    assert_eq!(bad_name["error"]["code"], -32602, "{bad_name}");
    assert_eq!(bad_name["error"]["data"]["code"], "invalid_resource");
    let no_call = rpc(
        &joch,
        "steps/toolCallResult",
        result("never-requested", json!(1)),
    )
    .await;
    assert_eq!(no_call["error"]["code"], -32602);
    assert_eq!(no_call["error"]["data"]["code"], "toolcall_not_found");

    let (_, list) = joch.get(&format!("/v1/namespaces/{NS}/toolcalls")).await;
    assert_eq!(list["items"], json!([]), "nothing was recorded");

    // The same executionId twice: the first stands, the second is refused.
    rpc(
        &joch,
        "steps/toolCallRequest",
        request("exec-dup", "shell", json!([])),
    )
    .await;
    let dup = rpc(
        &joch,
        "steps/toolCallRequest",
        request("exec-dup", "shell", json!([])),
    )
    .await;
    assert_eq!(dup["error"]["code"], -32000, "{dup}");
    assert_eq!(dup["error"]["data"]["code"], "already_exists");
    let (_, list) = joch.get(&format!("/v1/namespaces/{NS}/toolcalls")).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);

    // A notification (no id) is processed and gets no answer.
    let notification = json!({"jsonrpc": "2.0", "method": "steps/toolCallResult", "params": result("exec-dup", json!("ok"))});
    let response = joch
        .http
        .post(format!("{}{}", joch.base, aos_path()))
        .json(&notification)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        joch.get_call("exec-dup").await["status"]["phase"],
        "Succeeded"
    );
}

#[tokio::test]
async fn a_hook_mode_retry_with_the_same_key_is_told_not_to_run_again() {
    let joch = Joch::start().await;
    let mut first = request(
        "exec-a",
        "payments.refund",
        json!([{"name": "order", "value": "12345"}]),
    );
    first["toolCallRequest"]["idempotencyKey"] = json!("refund-12345");
    assert_eq!(
        rpc(&joch, "steps/toolCallRequest", first.clone()).await["result"]["decision"],
        "allow"
    );
    rpc(
        &joch,
        "steps/toolCallResult",
        result("exec-a", json!({"refunded": true})),
    )
    .await;

    let mut retry = first;
    retry["toolCallRequest"]["executionId"] = json!("exec-b");
    let answer = rpc(&joch, "steps/toolCallRequest", retry).await;
    assert_eq!(answer["result"]["decision"], "deny", "{answer}");
    assert!(
        answer["result"]["reason"]
            .as_str()
            .unwrap()
            .contains("exec-a"),
        "{answer}"
    );
}
