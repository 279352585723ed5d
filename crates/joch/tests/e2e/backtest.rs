//! Back-testing a candidate policy on a ledger the test builds: exact
//! counts and sample ids, withheld and redacted inputs, a `toolCallCount`
//! rule, replacement, streamed progress and the CLI.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, rest_tool};
use crate::policies::apply_policy;
use crate::trust::setup;

/// A ledger of seven calls: allowed, denied by the policy in force,
/// repeated in one execution, withheld, redacted.
async fn ledger(joch: &Joch, webhook: &Webhook) -> Vec<String> {
    let echo = format!("{}/echo", webhook.base);
    let mut secret = rest_tool("secret.tool", &echo, json!({"level": "read_only"}));
    secret["spec"]["observability"] = json!({"logArgs": false});
    joch.create_tool(secret).await;
    let mut redacting = rest_tool("pay.tool", &echo, json!({"level": "read_only"}));
    redacting["spec"]["observability"] = json!({"redactFields": ["card"]});
    joch.create_tool(redacting).await;
    apply_policy(joch, "gate", json!({"version": "1", "rules": [
        {"when": {"input.priority": "urgent"}, "action": {"deny": {"reason": "no urgent tickets"}}}
    ]}))
    .await;
    let ticket = |priority: &str| {
        json!({"spec": {"toolRef": {"name": "zendesk.create_ticket"}, "agentRef": {"name": "triage"},
        "executionRef": {"name": "run-1"}, "input": {"priority": priority}}})
    };
    let calls = [
        ticket("low"),
        ticket("urgent"),
        ticket("low"),
        ticket("low"),
        json!({"spec": {"toolRef": {"name": "secret.tool"}, "input": {"x": 1}}}),
        json!({"spec": {"toolRef": {"name": "pay.tool"}, "input": {"card": "4111", "amount": 5}}}),
        json!({"spec": {"toolRef": {"name": "pay.tool"}, "input": {"amount": 5}}}),
    ];
    let mut names = Vec::new();
    for call in calls {
        let (status, made) = joch.post_call(call).await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        names.push(made["metadata"]["name"].as_str().unwrap().to_owned());
    }
    let phase = |n: usize| joch.get_call(&names[n]);
    assert_eq!(phase(1).await["status"]["phase"], "Denied");
    assert_eq!(phase(3).await["status"]["phase"], "Succeeded");
    names
}

fn candidate(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Policy", "metadata": {"name": name},
           "spec": {"version": "candidate", "rules": rules}})
}

async fn back_test(joch: &Joch, body: Value) -> Value {
    let (status, report) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/policies/test"),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    report
}

#[tokio::test]
async fn a_back_test_replays_the_ledger_with_the_facts_of_the_time() {
    let (webhook, joch) = setup().await;
    let c = ledger(&joch, &webhook).await;
    let loops = candidate(
        "loops",
        json!([
            {"when": {"toolCallCount": {"gte": 3}}, "action": {"deny": {}}},
            {"when": {"input.card": "4*"}, "require": {"approval": "human"}},
            {"when": {"tool.name": "pay.tool"}, "action": {"modify": {"set": {"checked": true}}}}
        ]),
    );
    let report = back_test(&joch, json!({"policy": loops, "since": "1h"})).await;
    let tally = |a: u64, d: u64, f: u64, m: u64, u: u64| json!({"allow": a, "deny": d, "defer": f, "modify": m, "unjudged": u});
    assert_eq!(
        report,
        json!({
            "calls": 7,
            "total": tally(2, 2, 0, 1, 2),
            "byTool": {
                "zendesk.create_ticket": tally(2, 2, 0, 0, 0),
                "secret.tool": tally(0, 0, 0, 0, 1),
                "pay.tool": tally(0, 0, 0, 1, 1)
            },
            "byAgent": {"triage": tally(2, 2, 0, 0, 0), "(none)": tally(0, 0, 0, 1, 2)},
            "changes": {
                "allow->deny": {"count": 1, "samples": [c[3]]},
                "allow->modify": {"count": 1, "samples": [c[6]]}
            },
            "unjudged": {
                "input_withheld": {"count": 1, "samples": [c[4]]},
                "redacted_field": {"count": 1, "samples": [c[5]]}
            }
        })
    );

    // Replacing the policy in force: urgent tickets would wait instead.
    let softer = candidate(
        "gate-v2",
        json!([
            {"when": {"input.priority": "urgent"}, "require": {"approval": "human"}}
        ]),
    );
    let report = back_test(&joch, json!({"policy": softer, "replace": "gate"})).await;
    assert_eq!(
        report["total"],
        tally(5, 0, 1, 0, 1),
        "a redacted field no policy reads is no obstacle: {report}"
    );
    assert_eq!(
        report["changes"],
        json!({"deny->defer": {"count": 1, "samples": [c[1]]}})
    );

    // Nothing ran and nothing changed.
    assert_eq!(webhook.hits(), 6, "every call but the denied one ran, once");
    let (_, policies) = joch.get(&format!("/v1/namespaces/{NS}/policies")).await;
    assert_eq!(policies["items"].as_array().map(Vec::len), Some(1));

    let (status, body) = joch
        .send(Method::POST, &format!("/v1/namespaces/{NS}/policies/test"),
              Some(json!({"policy": candidate("x", json!([{"action": "allow"}])), "replace": "absent"})))
        .await;
    crate::harness::assert_error(&(status, body), StatusCode::NOT_FOUND, "policy_not_found");
}

#[tokio::test]
async fn a_back_test_streams_progress_and_runs_from_the_cli() {
    let (webhook, joch) = setup().await;
    let c = ledger(&joch, &webhook).await;
    let loops = candidate(
        "loops",
        json!([{"when": {"toolCallCount": {"gte": 3}}, "action": {"deny": {}}}]),
    );
    let text = reqwest::Client::new()
        .post(format!("{}/v1/namespaces/{NS}/policies/test", joch.base))
        .header("accept", "application/x-ndjson")
        .json(&json!({"policy": loops.clone()}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0], json!({"progress": {"read": 7}}), "{text}");
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(
        lines[1]["report"]["changes"]["allow->deny"]["samples"],
        json!([c[3]])
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("loops.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(&loops).unwrap()).unwrap();
    let out = joch.cli(&[
        "policy",
        "test",
        "-f",
        file.to_str().unwrap(),
        "-n",
        NS,
        "--since",
        "7d",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_yaml_ng::from_slice(&out.stdout).unwrap();
    assert_eq!(report, lines[1]["report"]);
}
