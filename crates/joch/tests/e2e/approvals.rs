//! Human approvals over HTTP and the CLI: approve, deny, edit, time out,
//! provide a value, and decide after a restart.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, TestStore, Webhook, assert_error, rest_tool, wait_for_phase};
use crate::policies::apply_policy;

/// Seed 000's policy: external sends need a person.
async fn seed_policy(joch: &Joch, routing: Value) {
    apply_policy(
        joch,
        "external-send-requires-approval",
        json!({
            "version": "v3",
            "rules": [
                {"when": {"tool.sideEffects.level": "external_write"},
                 "require": {"approval": "human", "approvalRouting": routing},
                 "reason": "a person must approve external sends",
                 "approverReason": "creates a ticket visible to the customer"},
                {"hook": "toolCallResult", "action": "allow"}
            ]
        }),
    )
    .await;
}

async fn setup(routing: Value) -> (Webhook, Joch) {
    setup_on(&TestStore::sqlite(), routing).await
}

async fn setup_on(store: &TestStore, routing: Value) -> (Webhook, Joch) {
    let webhook = Webhook::start().await;
    let joch = store.joch().start().await;
    joch.create_tool(rest_tool(
        "zendesk.create_ticket",
        &format!("{}/echo", webhook.base),
        json!({"level": "external_write"}),
    ))
    .await;
    seed_policy(&joch, routing).await;
    (webhook, joch)
}

fn seed_call(name: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "executionRef": {"name": "exec-20260510-001"},
            "agentRef": {"name": "support-triage"},
            "toolRef": {"name": "zendesk.create_ticket"},
            "input": {"subject": "Refund request for order 12345", "body": "Customer reports the item never arrived.", "priority": "high"},
            "sideEffects": {"idempotencyKey": "zendesk-create-12345"},
            "hookContext": {"aosTurnId": "69ef57b8-3993-440d-9493-523914f3f149", "aosStepId": "9263448a-186a-4c3b-abcf-443feb44a01e"}
        }
    })
}

async fn submit(joch: &Joch, call: Value) -> Value {
    let (status, body) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/toolcalls?wait=false"),
            Some(call),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"]["phase"], "AwaitingApproval", "{body}");
    body
}

fn approvals(name: &str, verb: &str) -> String {
    format!("/v1/namespaces/{NS}/approvals/{name}/{verb}")
}

#[tokio::test]
async fn the_seed_000_call_approved_through_the_cli_matches_the_seed_record() {
    let (webhook, joch) =
        setup(json!({"approvers": ["alice@example.com"], "timeoutSeconds": 60})).await;
    submit(&joch, seed_call("call-abc123")).await;

    let (_, approval) = joch
        .get(&format!("/v1/namespaces/{NS}/approvals/call-abc123"))
        .await;
    assert_eq!(approval["status"]["phase"], "Pending");
    assert_eq!(
        approval["spec"]["action"],
        json!({"type": "tool_call", "toolCallRef": {"name": "call-abc123"}})
    );
    assert_eq!(
        approval["spec"]["policyRef"],
        json!({"name": "external-send-requires-approval", "version": "v3"})
    );
    assert_eq!(
        approval["spec"]["risk"],
        json!({"level": "external_write", "summary": "creates a ticket visible to the customer"})
    );
    assert_eq!(
        approval["spec"]["options"],
        json!(["approve", "reject", "edit"])
    );
    assert_eq!(webhook.hits(), 0, "nothing runs before the decision");
    let listed = joch.cli(&["get", "approvals", "-n", NS]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("call-abc123"));

    let out = joch.cli(&[
        "approve",
        "call-abc123",
        "-n",
        NS,
        "--by",
        "alice@example.com",
        "--rationale",
        "verified the order",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let call = wait_for_phase(&joch, "call-abc123", "Succeeded").await;

    // Field by field against seed 000's record.
    assert_eq!(
        call["spec"]["executionRef"],
        json!({"name": "exec-20260510-001"})
    );
    assert_eq!(call["spec"]["agentRef"], json!({"name": "support-triage"}));
    assert_eq!(
        call["spec"]["toolRef"],
        json!({"name": "zendesk.create_ticket"})
    );
    assert_eq!(
        call["spec"]["input"]["subject"],
        "Refund request for order 12345"
    );
    assert_eq!(
        call["spec"]["sideEffects"],
        json!({"level": "external_write", "idempotent": false, "idempotencyKey": "zendesk-create-12345"})
    );
    let approval_state = &call["spec"]["approval"];
    assert_eq!(
        (
            approval_state["required"].as_bool(),
            approval_state["status"].as_str()
        ),
        (Some(true), Some("approved"))
    );
    assert_eq!(approval_state["approvedBy"], "alice@example.com");
    assert!(approval_state["approvedAt"].is_string());
    assert_eq!(
        call["spec"]["hookContext"]["aosTurnId"],
        "69ef57b8-3993-440d-9493-523914f3f149"
    );
    assert!(call["status"]["startedAt"].is_string() && call["status"]["completedAt"].is_string());
    assert_eq!(call["status"]["output"]["echo"]["priority"], "high");
    let decisions: Vec<(String, String, String, String)> = call["status"]["hookDecisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let f = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
            (f("hook"), f("decision"), f("policyId"), f("policyVersion"))
        })
        .collect();
    let p = "external-send-requires-approval".to_owned();
    assert_eq!(
        decisions,
        [
            (
                "steps/toolCallRequest".into(),
                "defer".into(),
                p.clone(),
                "v3".into()
            ),
            (
                "steps/toolCallRequest".into(),
                "allow".into(),
                p.clone(),
                "v3".into()
            ),
            (
                "steps/toolCallResult".into(),
                "allow".into(),
                p,
                "v3".into()
            ),
        ]
    );
    let (_, decided) = joch
        .get(&format!("/v1/namespaces/{NS}/approvals/call-abc123"))
        .await;
    assert_eq!(decided["status"]["phase"], "Approved");
    assert_eq!(decided["status"]["decidedBy"], "alice@example.com");
    assert_eq!(decided["status"]["rationale"], "verified the order");
    assert_eq!(webhook.hits(), 1);

    let again = joch
        .send(
            Method::POST,
            &approvals("call-abc123", "approve"),
            Some(json!({"approvedBy": "bob"})),
        )
        .await;
    assert_error(&again, StatusCode::CONFLICT, "approval_decided");
}

crate::storetest!(a_waiting_caller_gets_the_result_once_approved, |store| {
    let (webhook, joch) = setup_on(&store, json!({"timeoutSeconds": 60})).await;
    let joch = Arc::new(joch);
    let caller = {
        let joch = Arc::clone(&joch);
        tokio::spawn(async move { joch.post_call(seed_call("sync-1")).await })
    };
    let mut pending = false;
    for _ in 0..100 {
        if joch
            .get(&format!("/v1/namespaces/{NS}/approvals/sync-1"))
            .await
            .0
            == StatusCode::OK
        {
            pending = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(pending, "the approval was created");
    let (status, _) = joch
        .send(
            Method::POST,
            &approvals("sync-1", "approve"),
            Some(json!({"approvedBy": "alice"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, call) = caller.await.unwrap();
    assert_eq!(
        (status, call["status"]["phase"].as_str()),
        (StatusCode::CREATED, Some("Succeeded"))
    );
    assert_eq!(webhook.hits(), 1);
});

crate::storetest!(
    a_rejected_call_is_denied_with_the_approvers_message,
    |store| {
        let (webhook, joch) = setup_on(&store, json!({})).await;
        submit(&joch, seed_call("rej-1")).await;
        let out = joch.cli(&[
            "deny",
            "rej-1",
            "-n",
            NS,
            "--by",
            "alice",
            "--message",
            "use the refund tool instead",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let call = joch.get_call("rej-1").await;
        assert_eq!(call["status"]["phase"], "Denied");
        assert_eq!(
            call["status"]["output"],
            json!({"success": false, "error": "Denied by approver", "tool_call_id": "rej-1", "reason": "use the refund tool instead"})
        );
        assert_eq!(call["spec"]["approval"]["status"], "rejected");
        // Who rejected it, in fields that say so: nobody approved it.
        assert_eq!(call["spec"]["approval"]["rejectedBy"], "alice", "{call}");
        assert!(call["spec"]["approval"]["rejectedAt"].is_string());
        assert!(
            call["spec"]["approval"].get("approvedBy").is_none(),
            "{call}"
        );
        assert_eq!(webhook.hits(), 0);
    }
);

crate::storetest!(
    an_unanswered_approval_times_out_with_its_fallback,
    |store| {
        let (webhook, joch) = setup_on(&store, json!({"timeoutSeconds": 1})).await;
        submit(&joch, seed_call("late-1")).await;
        let call = wait_for_phase(&joch, "late-1", "TimedOut").await;
        assert_eq!(call["status"]["error"]["code"], "approval_timed_out");
        assert_eq!(call["status"]["output"]["error"], "Approval timed out");
        let (_, approval) = joch
            .get(&format!("/v1/namespaces/{NS}/approvals/late-1"))
            .await;
        assert_eq!(
            (
                approval["status"]["phase"].as_str(),
                approval["status"]["decision"].as_str()
            ),
            (Some("Expired"), Some("timeout"))
        );
        assert_eq!(webhook.hits(), 0);
    }
);

#[tokio::test]
async fn a_timeout_may_fall_back_to_approve() {
    let (webhook, joch) = setup(json!({"timeoutSeconds": 1, "onTimeout": "approve"})).await;
    submit(&joch, seed_call("late-2")).await;
    wait_for_phase(&joch, "late-2", "Succeeded").await;
    assert_eq!(webhook.hits(), 1);
}

#[tokio::test]
async fn an_edit_runs_the_approvers_arguments_through_the_request_hook() {
    let (_webhook, joch) = setup(json!({})).await;
    apply_policy(&joch, "no-urgent", json!({"version": "1", "rules": [
        {"when": {"input.priority": "urgent"}, "action": {"deny": {"reason": "no urgent tickets"}}}
    ]}))
    .await;
    submit(&joch, seed_call("edit-1")).await;
    let edited = json!({"subject": "Refund request for order 12345", "priority": "normal"});
    let (status, _) = joch
        .send(
            Method::POST,
            &approvals("edit-1", "edit"),
            Some(json!({"approvedBy": "alice", "input": edited})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let call = wait_for_phase(&joch, "edit-1", "Succeeded").await;
    assert_eq!(call["status"]["output"], json!({"echo": edited}));
    assert_eq!(call["status"]["originalInput"]["priority"], "high");

    let mut second = seed_call("edit-2");
    second["spec"]["sideEffects"]["idempotencyKey"] = json!("another-ticket");
    submit(&joch, second).await;
    let urgent = json!({"subject": "x", "priority": "urgent"});
    joch.send(
        Method::POST,
        &approvals("edit-2", "edit"),
        Some(json!({"approvedBy": "alice", "input": urgent})),
    )
    .await;
    let call = wait_for_phase(&joch, "edit-2", "Denied").await;
    assert_eq!(call["status"]["error"]["message"], "no urgent tickets");
}

#[tokio::test]
async fn a_user_input_request_injects_the_value() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    joch.create_tool(rest_tool(
        "wire",
        &format!("{}/echo", webhook.base),
        json!({"level": "financial"}),
    ))
    .await;
    apply_policy(&joch, "confirm", json!({"version": "1", "rules": [
        {"when": {"tool.name": "wire"}, "require": {"userInput": {"targetArg": "confirmation", "prompt": "Type the code sent to your phone"}}}
    ]}))
    .await;
    let (_, call) = joch
        .send(Method::POST, &format!("/v1/namespaces/{NS}/toolcalls?wait=false"), Some(json!({"metadata": {"name": "w1"}, "spec": {"toolRef": {"name": "wire"}, "input": {"amount": 10}}})))
        .await;
    assert_eq!(call["status"]["phase"], "AwaitingApproval");
    assert_eq!(
        call["status"]["hookDecisions"][0]["decision"],
        "request_user_input"
    );
    let (_, approval) = joch.get(&format!("/v1/namespaces/{NS}/approvals/w1")).await;
    assert_eq!(
        approval["spec"]["payload"]["userInput"]["prompt"],
        "Type the code sent to your phone"
    );
    let missing = joch
        .send(
            Method::POST,
            &approvals("w1", "approve"),
            Some(json!({"approvedBy": "ann"})),
        )
        .await;
    assert_error(&missing, StatusCode::BAD_REQUEST, "bad_request");
    joch.send(
        Method::POST,
        &approvals("w1", "approve"),
        Some(json!({"approvedBy": "ann", "value": "4242"})),
    )
    .await;
    let call = wait_for_phase(&joch, "w1", "Succeeded").await;
    assert_eq!(
        call["status"]["output"],
        json!({"echo": {"amount": 10, "confirmation": "4242"}})
    );
}

crate::storetest!(a_tool_that_requires_approval_waits_for_one, |store| {
    let webhook = Webhook::start().await;
    let joch = store.joch().start().await;
    let mut tool = rest_tool(
        "wire",
        &format!("{}/echo", webhook.base),
        json!({"level": "financial"}),
    );
    tool["spec"]["sideEffects"]["requiresApproval"] = json!(true);
    tool["spec"]["sideEffects"]["approvalTimeoutSeconds"] = json!(77);
    joch.create_tool(tool).await;
    let (_, call) = joch
        .send(Method::POST, &format!("/v1/namespaces/{NS}/toolcalls?wait=false"), Some(json!({"metadata": {"name": "t1"}, "spec": {"toolRef": {"name": "wire"}, "input": {}}})))
        .await;
    assert_eq!(call["status"]["phase"], "AwaitingApproval");
    assert_eq!(webhook.hits(), 0);
    let (_, approval) = joch.get(&format!("/v1/namespaces/{NS}/approvals/t1")).await;
    assert_eq!(
        approval["spec"]["routing"]["timeoutSeconds"], 77,
        "the tool's deadline"
    );
    joch.send(
        Method::POST,
        &approvals("t1", "approve"),
        Some(json!({"approvedBy": "ann"})),
    )
    .await;
    wait_for_phase(&joch, "t1", "Succeeded").await;
    assert_eq!(webhook.hits(), 1);
});

crate::storetest!(
    an_approval_decided_after_a_restart_runs_the_call_exactly_once,
    |store| {
        let webhook = Webhook::start().await;
        let mut joch = store.joch().start().await;
        joch.create_tool(rest_tool(
            "zendesk.create_ticket",
            &format!("{}/echo", webhook.base),
            json!({"level": "external_write"}),
        ))
        .await;
        seed_policy(&joch, json!({"timeoutSeconds": 120})).await;
        submit(&joch, seed_call("restart-1")).await;
        joch.kill();

        let joch = store.joch().start().await;
        assert_eq!(
            joch.get_call("restart-1").await["status"]["phase"],
            "AwaitingApproval",
            "approvals survive a restart"
        );
        let path = approvals("restart-1", "approve");
        let first = joch.send(Method::POST, &path, Some(json!({"approvedBy": "alice"})));
        let second = joch.send(Method::POST, &path, Some(json!({"approvedBy": "bob"})));
        let (a, b) = tokio::join!(first, second);
        let oks = [a.0, b.0].iter().filter(|s| **s == StatusCode::OK).count();
        assert_eq!(oks, 1, "one decision wins: {a:?} {b:?}");
        wait_for_phase(&joch, "restart-1", "Succeeded").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(webhook.hits(), 1);
    }
);

crate::storetest!(
    an_always_decision_stands_for_later_calls_of_the_tool,
    |store| {
        let (webhook, joch) = setup_on(&store, json!({})).await;
        let mut first = seed_call("always-1");
        first["spec"]["sideEffects"] = json!({});
        submit(&joch, first).await;
        let (status, approval) = joch
            .send(
                Method::POST,
                &approvals("always-1", "approve"),
                Some(json!({"approvedBy": "alice", "always": true})),
            )
            .await;
        assert_eq!(
            (status, approval["status"]["always"].as_bool()),
            (StatusCode::OK, Some(true))
        );
        wait_for_phase(&joch, "always-1", "Succeeded").await;

        let mut second = seed_call("always-2");
        second["spec"]["sideEffects"] = json!({});
        let (status, call) = joch.post_call(second).await;
        assert_eq!(
            (status, call["status"]["phase"].as_str()),
            (StatusCode::CREATED, Some("Succeeded")),
            "{call}"
        );
        let standing = &call["status"]["hookDecisions"][1];
        assert_eq!(standing["decision"], "allow");
        assert_eq!(
            standing["reason"],
            "standing approve by alice (approval always-1)"
        );
        assert_eq!(webhook.hits(), 2);

        let (_, grant) = joch
            .get(&format!(
                "/v1/namespaces/{NS}/standingapprovals/zendesk.create_ticket"
            ))
            .await;
        assert_eq!(grant["spec"]["decidedBy"], "alice");
        let (status, _) = joch
            .send(
                Method::DELETE,
                &format!("/v1/namespaces/{NS}/standingapprovals/zendesk.create_ticket"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        let mut third = seed_call("always-3");
        third["spec"]["sideEffects"] = json!({});
        submit(&joch, third).await;
    }
);

#[tokio::test]
async fn the_servers_fallback_applies_when_the_policy_names_none() {
    let webhook = Webhook::start().await;
    let joch = Joch::builder()
        .args(&[
            "--approval-timeout-seconds",
            "1",
            "--approval-fallback",
            "approve",
        ])
        .start()
        .await;
    joch.create_tool(rest_tool(
        "zendesk.create_ticket",
        &format!("{}/echo", webhook.base),
        json!({"level": "external_write"}),
    ))
    .await;
    seed_policy(&joch, json!({})).await;
    let mut call = seed_call("fallback-1");
    call["spec"]["sideEffects"] = json!({});
    submit(&joch, call).await;
    let (_, approval) = joch
        .get(&format!("/v1/namespaces/{NS}/approvals/fallback-1"))
        .await;
    assert_eq!(approval["spec"]["routing"]["timeoutSeconds"], 1);
    wait_for_phase(&joch, "fallback-1", "Succeeded").await;
    assert_eq!(webhook.hits(), 1);
}

/// A tool whose webhook records what it receives, and whose inputSchema an
/// edit can break: `priority` is one of three words.
async fn setup_recorded() -> (Webhook, Joch) {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    let mut tool = rest_tool(
        "zendesk.create_ticket",
        &format!("{}/record", webhook.base),
        json!({"level": "external_write"}),
    );
    tool["spec"]["inputSchema"] = json!({
        "type": "object",
        "properties": {
            "subject": {"type": "string"},
            "body": {"type": "string"},
            "priority": {"enum": ["low", "normal", "high"]}
        },
        "required": ["subject"]
    });
    joch.create_tool(tool).await;
    seed_policy(&joch, json!({})).await;
    (webhook, joch)
}

#[tokio::test]
async fn approve_with_input_is_an_edit() {
    let (webhook, joch) = setup_recorded().await;
    submit(&joch, seed_call("approve-input")).await;
    let edited = json!({"subject": "Refund for order 12345", "priority": "normal"});
    let (status, approval) = joch
        .send(
            Method::POST,
            &approvals("approve-input", "approve"),
            Some(json!({"approvedBy": "alice", "input": edited})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    assert_eq!(approval["status"]["editedInput"], edited, "{approval}");
    assert_eq!(approval["status"]["decision"], "edit", "{approval}");
    let call = wait_for_phase(&joch, "approve-input", "Succeeded").await;
    assert_eq!(
        call["status"]["originalInput"]["priority"], "high",
        "{call}"
    );
    assert_eq!(webhook.recorded().len(), 1);
    assert_eq!(webhook.recorded()[0]["body"], edited);

    // The CLI: `deny --input` is refused (it once posted to /edit and ran
    // the arguments), `approve --input` edits.
    let mut second = seed_call("cli-input");
    second["spec"]["sideEffects"]["idempotencyKey"] = json!("another-ticket");
    submit(&joch, second).await;
    let cli_edit = json!({"subject": "From the CLI"});
    let decide = |verb: &str| {
        let input = cli_edit.to_string();
        let args = [verb, "cli-input", "-n", NS, "--by", "alice", "--input"];
        let mut args: Vec<&str> = args.to_vec();
        args.push(&input);
        joch.cli(&args)
    };
    let denied = decide("deny");
    assert!(!denied.status.success(), "a denial takes no input");
    assert!(String::from_utf8_lossy(&denied.stderr).contains("bad_request"));
    let approved = decide("approve");
    let stderr = String::from_utf8_lossy(&approved.stderr);
    assert!(approved.status.success(), "{stderr}");
    wait_for_phase(&joch, "cli-input", "Succeeded").await;
    assert_eq!(webhook.recorded()[1]["body"], cli_edit);
}

#[tokio::test]
async fn an_edit_that_breaks_the_input_schema_is_refused_and_the_approval_waits() {
    let (webhook, joch) = setup_recorded().await;
    submit(&joch, seed_call("bad-edit")).await;
    let broken = json!({"subject": "Refund", "priority": "urgent"});
    let mut rest_refusal = Value::Null;
    for verb in ["edit", "approve"] {
        let answer = joch
            .send(
                Method::POST,
                &approvals("bad-edit", verb),
                Some(json!({"approvedBy": "alice", "input": broken})),
            )
            .await;
        assert_error(
            &answer,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        );
        let message = answer.1["message"].as_str().unwrap_or_default();
        assert!(message.contains("priority"), "{verb}: {}", answer.1);
        assert_eq!(
            answer.1["details"]["fields"][0]["field"], "input",
            "{}",
            answer.1
        );
        rest_refusal = answer.1;
        let not_object = joch
            .send(
                Method::POST,
                &approvals("bad-edit", verb),
                Some(json!({"approvedBy": "alice", "input": ["Refund"]})),
            )
            .await;
        assert_error(
            &not_object,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        );
    }
    let (_, approval) = joch
        .get(&format!("/v1/namespaces/{NS}/approvals/bad-edit"))
        .await;
    assert_eq!(approval["status"]["phase"], "Pending", "{approval}");
    assert_eq!(approval["status"]["decidedBy"], Value::Null, "{approval}");
    let call = joch.get_call("bad-edit").await;
    assert_eq!(call["status"]["phase"], "AwaitingApproval", "{call}");
    assert!(webhook.recorded().is_empty(), "nothing ran");

    // The console refuses the same edit with the same answer: one check.
    let console = console_edit(&joch, "bad-edit", &broken).await;
    assert_error(
        &console,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_resource",
    );
    assert_eq!(
        console.1["message"], rest_refusal["message"],
        "{}",
        console.1
    );

    // Arguments on a denial are refused too, not dropped.
    let answer = joch
        .send(
            Method::POST,
            &approvals("bad-edit", "deny"),
            Some(json!({"approvedBy": "alice", "input": broken})),
        )
        .await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");

    let fixed = json!({"subject": "Refund", "priority": "low"});
    let (status, body) = joch
        .send(
            Method::POST,
            &approvals("bad-edit", "edit"),
            Some(json!({"approvedBy": "alice", "input": fixed})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    wait_for_phase(&joch, "bad-edit", "Succeeded").await;
    assert_eq!(webhook.recorded()[0]["body"], fixed);
}

/// Edits `name` from the local console's inbox form, as a browser posts it.
async fn console_edit(joch: &Joch, name: &str, input: &Value) -> (StatusCode, Value) {
    let client = reqwest::Client::new();
    let page = client
        .get(format!("{}/ui/inbox?ns={NS}", joch.base))
        .send()
        .await
        .unwrap();
    let cookie = page
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.split(';').next().filter(|p| p.starts_with("joch_csrf=")))
        .expect("a CSRF cookie")
        .to_owned();
    let token = cookie.trim_start_matches("joch_csrf=").to_owned();
    let answer = client
        .post(format!("{}/ui/approvals/{name}/decide?ns={NS}", joch.base))
        .header(reqwest::header::COOKIE, &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "verb=edit&csrf={token}&input={}",
            url_encoded(&input.to_string())
        ))
        .send()
        .await
        .unwrap();
    let status = answer.status();
    (status, answer.json().await.unwrap_or(Value::Null))
}

/// `text` percent-encoded for a form body.
fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
