//! Hook mode: the agent runs its tools itself and asks joch before and
//! tells joch after, over the AOS guardian JSON-RPC endpoint and Claude
//! Code's HTTP hooks.

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

fn claude(event: &str, tool: &str, id: &str, extra: Value) -> Value {
    let mut body = json!({
        "session_id": "abc123",
        "transcript_path": "/home/u/.claude/projects/x/abc123.jsonl",
        "cwd": "/home/u/project",
        "permission_mode": "default",
        "hook_event_name": event,
        "tool_name": tool,
        "tool_use_id": id,
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    body
}

async fn claude_hook(joch: &Joch, body: Value) -> Value {
    let (status, answer) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/hooks/claude"),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

#[tokio::test]
async fn claude_code_hooks_deny_rm_rf_and_record_an_edit() {
    let joch = Joch::start().await;
    apply_policy(
        &joch,
        "shell-safety",
        json!({
            "version": "2",
            "appliesTo": {"tools": ["Bash"]},
            "rules": [{"name": "no-rm-rf", "when": {"expr": "input.command.contains('rm -rf')"}, "action": {"deny": {"reason": "recursive deletes are not allowed"}}}]
        }),
    )
    .await;

    let rm = claude_hook(
        &joch,
        claude(
            "PreToolUse",
            "Bash",
            "toolu_01RM",
            json!({"tool_input": {"command": "rm -rf /", "description": "clean up"}}),
        ),
    )
    .await;
    let out = &rm["hookSpecificOutput"];
    assert_eq!(out["hookEventName"], "PreToolUse");
    assert_eq!(out["permissionDecision"], "deny", "{rm}");
    assert_eq!(
        out["permissionDecisionReason"],
        "recursive deletes are not allowed"
    );
    let denied = joch.get_call("toolu_01RM").await;
    assert_eq!(denied["status"]["phase"], "Denied");
    assert_eq!(
        denied["status"]["hookDecisions"][0]["policyId"],
        "shell-safety"
    );

    let edit_input =
        json!({"file_path": "/home/u/project/README.md", "old_string": "teh", "new_string": "the"});
    let edit = claude_hook(
        &joch,
        claude(
            "PreToolUse",
            "Edit",
            "toolu_01ED",
            json!({"tool_input": edit_input}),
        ),
    )
    .await;
    assert_eq!(
        edit["hookSpecificOutput"]["permissionDecision"], "allow",
        "{edit}"
    );
    let after = claude_hook(
        &joch,
        claude(
            "PostToolUse",
            "Edit",
            "toolu_01ED",
            json!({"tool_input": edit_input, "tool_response": {"filePath": "/home/u/project/README.md", "success": true}}),
        ),
    )
    .await;
    assert_eq!(after, json!({}), "nothing to block");
    let call = joch.get_call("toolu_01ED").await;
    assert_eq!(call["status"]["phase"], "Succeeded");
    assert_eq!(call["spec"]["mode"], "hook");
    assert_eq!(call["spec"]["input"], edit_input);
    assert_eq!(call["spec"]["executionRef"]["name"], "abc123");
    assert_eq!(call["spec"]["agentRef"]["name"], "claude-code");
    assert_eq!(call["status"]["output"]["success"], true);

    claude_hook(
        &joch,
        claude(
            "PreToolUse",
            "Bash",
            "toolu_01LS",
            json!({"tool_input": {"command": "ls /nope"}}),
        ),
    )
    .await;
    claude_hook(
        &joch,
        claude("PostToolUseFailure", "Bash", "toolu_01LS", json!({"tool_input": {"command": "ls /nope"}, "error": "ls: /nope: No such file or directory"})),
    )
    .await;
    let failed = joch.get_call("toolu_01LS").await;
    assert_eq!(failed["status"]["phase"], "Failed");
    assert_eq!(
        failed["status"]["error"]["message"],
        "ls: /nope: No such file or directory"
    );

    let (status, unsupported) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/hooks/claude"),
            Some(claude("Stop", "Bash", "x", json!({}))),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(unsupported["code"], "unsupported_hook_event");
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

#[tokio::test]
async fn claude_can_ask_its_own_user_and_a_reported_result_approves() {
    let joch = Joch::start().await;
    apply_policy(
        &joch,
        "writes-need-a-person",
        json!({"version": "1", "appliesTo": {"tools": ["Write"]}, "rules": [{"name": "person", "require": {"approval": "human"}}]}),
    )
    .await;
    let ask_path = format!("/v1/namespaces/{NS}/hooks/claude?onDefer=ask");
    let input = json!({"file_path": "/tmp/x", "content": "hi"});
    let (status, asked) = joch
        .send(
            Method::POST,
            &ask_path,
            Some(claude(
                "PreToolUse",
                "Write",
                "toolu_01WR",
                json!({"tool_input": input}),
            )),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{asked}");
    assert_eq!(
        asked["hookSpecificOutput"]["permissionDecision"], "ask",
        "{asked}"
    );
    assert_eq!(
        joch.get_call("toolu_01WR").await["status"]["phase"],
        "AwaitingApproval"
    );

    // The user said yes in Claude Code: the tool ran and its result arrives.
    claude_hook(
        &joch,
        claude(
            "PostToolUse",
            "Write",
            "toolu_01WR",
            json!({"tool_input": input, "tool_response": {"success": true}}),
        ),
    )
    .await;
    let call = joch.get_call("toolu_01WR").await;
    assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
    assert_eq!(call["spec"]["approval"]["status"], "approved");
    assert_eq!(
        call["spec"]["approval"]["approvedBy"],
        "user of claude-code"
    );
    let (_, approval) = joch
        .get(&format!("/v1/namespaces/{NS}/approvals/toolu_01WR"))
        .await;
    assert_eq!(approval["status"]["phase"], "Approved");

    let (status, bad) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/hooks/claude?onDefer=maybe"),
            Some(claude("PreToolUse", "Write", "toolu_02", json!({}))),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
}
