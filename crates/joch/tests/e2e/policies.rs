//! Policy hooks over HTTP: each decision on each hook, precedence, versions,
//! failure, and the loop guard.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, assert_error, rest_tool};

pub async fn apply_policy(joch: &Joch, name: &str, spec: Value) -> Value {
    let policy = json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Policy", "metadata": {"name": name}, "spec": spec});
    let (status, body) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/policies"),
            Some(policy),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body
}

pub(crate) async fn setup(level: &str) -> (Webhook, Joch) {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    joch.create_tool(rest_tool(
        "zendesk.create_ticket",
        &format!("{}/echo", webhook.base),
        json!({"level": level}),
    ))
    .await;
    (webhook, joch)
}

#[tokio::test]
async fn a_denied_call_never_runs_and_tells_the_model_why() {
    let (webhook, joch) = setup("external_write").await;
    apply_policy(&joch, "no-tickets", json!({"version": "v1", "rules": [
        {"when": {"tool.name": "zendesk.*"}, "action": {"deny": {"reason": "tickets are closed today"}}}
    ]}))
    .await;
    let (status, call) = joch
        .call("zendesk.create_ticket", json!({"subject": "x"}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(call["status"]["phase"], "Denied");
    let name = call["metadata"]["name"].as_str().unwrap();
    assert_eq!(
        call["status"]["output"],
        json!({"success": false, "error": "Denied by policy", "tool_call_id": name, "reason": "tickets are closed today"})
    );
    assert_eq!(
        call["status"]["hookDecisions"],
        json!([{"hook": "steps/toolCallRequest", "decision": "deny", "policyId": "no-tickets", "policyVersion": "v1", "reason": "tickets are closed today"}])
    );
    assert_eq!(webhook.hits(), 0);
    assert_eq!(joch.get_call(name).await, call);
}

#[tokio::test]
async fn a_deferred_call_with_invalid_input_says_it_was_not_sent_for_approval() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    let mut tool = rest_tool(
        "t.strict",
        &format!("{}/echo", webhook.base),
        json!({"level": "external_write"}),
    );
    tool["spec"]["inputSchema"] =
        json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}});
    joch.create_tool(tool).await;
    // Written with the hook name records use: the same hook as toolCallRequest.
    apply_policy(&joch, "ask", json!({"version": "1", "rules": [
        {"hook": "steps/toolCallRequest", "when": {"tool.name": "t.*"}, "require": {"approval": "human"}, "reason": "a person checks"}
    ]}))
    .await;
    let (status, call) = joch.call("t.strict", json!({"n": "seven"})).await;
    assert_eq!(status, StatusCode::CREATED, "{call}");
    assert_eq!(call["status"]["phase"], "Failed", "{call}");
    let decision = &call["status"]["hookDecisions"][0];
    assert_eq!(decision["decision"], "defer", "{call}");
    assert!(
        decision["reason"]
            .as_str()
            .unwrap()
            .contains("not sent for approval"),
        "{call}"
    );
    let name = call["metadata"]["name"].as_str().unwrap();
    let (status, _) = joch
        .get(&format!("/v1/namespaces/{NS}/approvals/{name}"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no Approval was opened");
    assert_eq!(webhook.hits(), 0);
}

#[tokio::test]
async fn modify_changes_what_runs_and_keeps_the_original() {
    let (_webhook, joch) = setup("external_write").await;
    apply_policy(&joch, "calm", json!({"version": "1", "rules": [
        {"when": {"input.priority": "high"}, "action": {"modify": {"set": {"priority": "normal"}, "remove": ["debug"]}}}
    ]}))
    .await;
    let (_, call) = joch
        .call(
            "zendesk.create_ticket",
            json!({"subject": "x", "priority": "high", "debug": true}),
        )
        .await;
    assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
    assert_eq!(
        call["status"]["output"],
        json!({"echo": {"subject": "x", "priority": "normal"}}),
        "the modified input ran"
    );
    assert_eq!(
        call["spec"]["input"],
        json!({"subject": "x", "priority": "normal"})
    );
    assert_eq!(
        call["status"]["originalInput"],
        json!({"subject": "x", "priority": "high", "debug": true})
    );
    assert_eq!(call["status"]["hookDecisions"][0]["decision"], "modify");
}

#[tokio::test]
async fn the_result_hook_can_withhold_or_redact_the_output() {
    let (webhook, joch) = setup("read_only").await;
    apply_policy(&joch, "outputs", json!({"version": "2", "rules": [
        {"hook": "toolCallResult", "when": {"output.echo.secret": "*"}, "action": {"deny": {"reason": "secret in output"}}},
        {"hook": "toolCallResult", "when": {"output.echo.email": "*"}, "action": {"modify": {"redact": ["echo.email"]}}}
    ]}))
    .await;
    let (_, withheld) = joch
        .call("zendesk.create_ticket", json!({"secret": "s3"}))
        .await;
    assert_eq!(withheld["status"]["phase"], "Denied", "{withheld}");
    assert_eq!(withheld["status"]["output"]["error"], "Denied by policy");
    assert_eq!(withheld["status"]["attempts"], 1, "it ran");
    let stored = joch
        .get_call(withheld["metadata"]["name"].as_str().unwrap())
        .await;
    assert_eq!(
        stored["status"]["output"],
        json!({"echo": {"secret": "s3"}}),
        "what ran is recorded"
    );
    let decisions = &stored["status"]["hookDecisions"];
    assert_eq!(
        decisions[0]["reason"], "no policy rule matched",
        "the request hook allowed by default"
    );
    assert_eq!(
        (
            decisions[1]["hook"].as_str(),
            decisions[1]["decision"].as_str()
        ),
        (Some("steps/toolCallResult"), Some("deny"))
    );

    let (_, redacted) = joch
        .call("zendesk.create_ticket", json!({"email": "a@b.c", "n": 1}))
        .await;
    assert_eq!(redacted["status"]["phase"], "Succeeded");
    assert_eq!(
        redacted["status"]["output"],
        json!({"echo": {"email": "[REDACTED]", "n": 1}})
    );
    assert_eq!(webhook.hits(), 2);
}

#[tokio::test]
async fn a_policy_change_applies_to_the_next_call_and_the_deciding_version_is_recorded() {
    let (_webhook, joch) = setup("external_write").await;
    let v1 = apply_policy(
        &joch,
        "gate",
        json!({"version": "v1", "rules": [{"action": {"deny": {"reason": "v1 says no"}}}]}),
    )
    .await;
    let (_, first) = joch.call("zendesk.create_ticket", json!({})).await;
    assert_eq!(
        (
            first["status"]["phase"].as_str(),
            first["status"]["hookDecisions"][0]["policyVersion"].as_str()
        ),
        (Some("Denied"), Some("v1"))
    );

    let mut v2 = v1.clone();
    v2["spec"] = json!({"version": "v2", "rules": [{"action": "allow", "reason": "v2 says yes"}]});
    let (status, _) = joch
        .send(
            Method::PUT,
            &format!("/v1/namespaces/{NS}/policies/gate"),
            Some(v2),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, second) = joch.call("zendesk.create_ticket", json!({})).await;
    assert_eq!(second["status"]["phase"], "Succeeded");
    assert_eq!(
        second["status"]["hookDecisions"][0],
        json!({"hook": "steps/toolCallRequest", "decision": "allow", "policyId": "gate", "policyVersion": "v2", "reason": "v2 says yes"})
    );
}

#[tokio::test]
async fn deny_beats_defer_beats_modify_beats_allow_across_policies() {
    let (_webhook, joch) = setup("external_write").await;
    apply_policy(
        &joch,
        "a-allow",
        json!({"version": "1", "rules": [{"action": "allow"}]}),
    )
    .await;
    apply_policy(
        &joch,
        "b-modify",
        json!({"version": "1", "rules": [{"action": {"modify": {"set": {"tagged": true}}}}]}),
    )
    .await;
    let (_, modified) = joch.call("zendesk.create_ticket", json!({})).await;
    assert_eq!(
        modified["status"]["output"],
        json!({"echo": {"tagged": true}})
    );
    apply_policy(
        &joch,
        "c-deny",
        json!({"version": "1", "rules": [{"when": {"input.stop": true}, "action": {"deny": {}}}]}),
    )
    .await;
    let (_, denied) = joch
        .call("zendesk.create_ticket", json!({"stop": true}))
        .await;
    assert_eq!(denied["status"]["phase"], "Denied");
    let decisions: Vec<&str> = denied["status"]["hookDecisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["decision"].as_str().unwrap())
        .collect();
    assert_eq!(
        decisions,
        ["allow", "modify", "deny"],
        "every decision is recorded, in policy order"
    );
}

#[tokio::test]
async fn cel_expressions_and_rego_modules_decide() {
    let (_webhook, joch) = setup("financial").await;
    apply_policy(&joch, "cel", json!({"version": "1", "rules": [
        {"when": {"expr": "input.amount > 1000 && tool.sideEffects.level == 'financial'"}, "action": {"deny": {"reason": "over the limit"}}}
    ]}))
    .await;
    let rego = "package joch\nimport rego.v1\ndecision := {\"decision\": \"deny\", \"reason\": \"no refunds to self\"} if input.input.to == input.caller\n";
    apply_policy(
        &joch,
        "opa",
        json!({"version": "3", "rego": {"module": rego}}),
    )
    .await;

    let (_, big) = joch
        .call("zendesk.create_ticket", json!({"amount": 5000}))
        .await;
    assert_eq!(
        (
            big["status"]["phase"].as_str(),
            big["status"]["error"]["message"].as_str()
        ),
        (Some("Denied"), Some("over the limit"))
    );
    let (_, small) = joch
        .call("zendesk.create_ticket", json!({"amount": 5}))
        .await;
    assert_eq!(small["status"]["phase"], "Succeeded");
    let (_, selfish) = joch
        .post_call(json!({"spec": {"toolRef": {"name": "zendesk.create_ticket"}, "callerId": "bob", "input": {"amount": 5, "to": "bob"}}}))
        .await;
    assert_eq!(selfish["status"]["phase"], "Denied");
    assert_eq!(selfish["status"]["hookDecisions"][0]["policyId"], "opa");
    assert_eq!(selfish["status"]["hookDecisions"][0]["policyVersion"], "3");
}

#[tokio::test]
async fn broken_policies_are_refused_or_fail_closed() {
    let (webhook, joch) = setup("read_only").await;
    let policies = format!("/v1/namespaces/{NS}/policies");
    let bad_cel = json!({"metadata": {"name": "p"}, "spec": {"version": "1", "rules": [{"when": {"expr": "input.a >"}, "action": "allow"}]}});
    assert_error(
        &joch.send(Method::POST, &policies, Some(bad_cel)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_resource",
    );
    let bad_rego = json!({"metadata": {"name": "p"}, "spec": {"version": "1", "rego": {"module": "package joch\ndecision := {"}}});
    assert_error(
        &joch.send(Method::POST, &policies, Some(bad_rego)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_resource",
    );
    let no_version =
        json!({"metadata": {"name": "p"}, "spec": {"version": "", "rules": [{"action": "allow"}]}});
    assert_error(
        &joch.send(Method::POST, &policies, Some(no_version)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_resource",
    );
    // A value is always asked of the user: askUser there would do nothing.
    let ask_for_input = json!({"metadata": {"name": "p"}, "spec": {"version": "1", "rules": [
        {"require": {"userInput": {"targetArg": "code"}, "approvalRouting": {"askUser": true}}}
    ]}});
    let refused = joch
        .send(Method::POST, &policies, Some(ask_for_input))
        .await;
    assert_error(
        &refused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_resource",
    );
    assert!(
        refused
            .1
            .to_string()
            .contains("spec.rules[0].require.approvalRouting.askUser"),
        "{}",
        refused.1
    );
    let not_a_flag = json!({"metadata": {"name": "p"}, "spec": {"version": "1", "rules": [
        {"require": {"approval": "human", "approvalRouting": {"askUser": "yes"}}}
    ]}});
    assert_error(
        &joch.send(Method::POST, &policies, Some(not_a_flag)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_resource",
    );

    // Parses, but cannot evaluate: the call is denied with the error recorded.
    apply_policy(
        &joch,
        "typo",
        json!({"version": "1", "rules": [{"when": {"expr": "inptu.a == 1"}, "action": "allow"}]}),
    )
    .await;
    let (_, call) = joch.call("zendesk.create_ticket", json!({"a": 1})).await;
    assert_eq!(call["status"]["phase"], "Denied");
    assert!(
        call["status"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("failed to evaluate"),
        "{call}"
    );
    assert_eq!(webhook.hits(), 0);
}

#[tokio::test]
async fn the_loop_guard_stops_a_model_repeating_itself() {
    let (webhook, joch) = setup("read_only").await;
    apply_policy(&joch, "loop-guard", json!({"version": "1", "rules": [
        {"when": {"toolCallCount": {"gt": 2}}, "action": {"deny": {"reason": "you already asked this twice"}}}
    ]}))
    .await;
    let same = json!({"spec": {"toolRef": {"name": "zendesk.create_ticket"}, "executionRef": {"name": "run-1"}, "input": {"q": 1}}});
    let phases: Vec<String> = {
        let mut phases = Vec::new();
        for _ in 0..3 {
            phases.push(
                joch.post_call(same.clone()).await.1["status"]["phase"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
        phases
    };
    assert_eq!(phases, ["Succeeded", "Succeeded", "Denied"]);
    let other_run = json!({"spec": {"toolRef": {"name": "zendesk.create_ticket"}, "executionRef": {"name": "run-2"}, "input": {"q": 1}}});
    assert_eq!(
        joch.post_call(other_run).await.1["status"]["phase"],
        "Succeeded",
        "counted per execution"
    );
    assert_eq!(webhook.hits(), 3);
}

#[tokio::test]
async fn policies_scope_by_tool_glob_and_agent_labels() {
    let (_webhook, joch) = setup("read_only").await;
    apply_policy(&joch, "scoped", json!({"version": "1",
        "appliesTo": {"tools": ["zendesk.*"], "agents": {"selector": {"matchLabels": {"team": "interns"}}}},
        "rules": [{"action": {"deny": {"reason": "interns cannot"}}}]}))
    .await;
    let call = |labels: Value| json!({"metadata": {"labels": labels}, "spec": {"toolRef": {"name": "zendesk.create_ticket"}, "input": {}}});
    assert_eq!(
        joch.post_call(call(json!({"team": "interns"}))).await.1["status"]["phase"],
        "Denied"
    );
    let (_, staff) = joch.post_call(call(json!({"team": "staff"}))).await;
    assert_eq!(staff["status"]["phase"], "Succeeded");
    assert!(
        staff["status"].get("hookDecisions").is_none(),
        "a policy that does not apply records nothing"
    );
}
