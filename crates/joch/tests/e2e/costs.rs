//! Cost attribution: prices on tools, costs on calls, reports, budgets.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, assert_error, rest_tool};
use crate::policies::apply_policy;

async fn priced_tools(joch: &Joch, webhook: &Webhook) {
    let mut llm = rest_tool(
        "llm.complete",
        &format!("{}/echo", webhook.base),
        json!({"level": "read_only"}),
    );
    llm["spec"]["cost"] = json!({
        "currency": "USD",
        "perCall": 0.01,
        "perUnit": {"pointer": "/echo/usage/tokens", "price": 0.000002, "unit": "token"}
    });
    joch.create_tool(llm).await;
    joch.create_tool(json!({
        "metadata": {"name": "pricey"},
        "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}, "cost": {"perCall": 0.4}}
    }))
    .await;
}

fn call(tool: &str, agent: &str, execution: &str, input: Value) -> Value {
    json!({"spec": {"toolRef": {"name": tool}, "agentRef": {"name": agent}, "executionRef": {"name": execution}, "input": input}})
}

async fn report(joch: &Joch, query: &str) -> Vec<(String, f64, u64)> {
    let (status, body) = joch
        .get(&format!("/v1/namespaces/{NS}/costs?{query}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["key"].as_str().unwrap().to_owned(),
                (i["amount"].as_f64().unwrap() * 1e6).round() / 1e6,
                i["calls"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn calls_carry_their_cost_and_reports_sum_it() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    priced_tools(&joch, &webhook).await;
    let (_, first) = joch
        .post_call(call(
            "llm.complete",
            "writer",
            "run-1",
            json!({"usage": {"tokens": 1500}}),
        ))
        .await;
    assert_eq!(first["status"]["phase"], "Succeeded", "{first}");
    assert_eq!(
        first["status"]["cost"],
        json!({"amount": 0.013, "currency": "USD", "units": 1500.0, "unit": "token"})
    );
    joch.post_call(call(
        "llm.complete",
        "writer",
        "run-2",
        json!({"usage": {"tokens": 500}}),
    ))
    .await;
    joch.post_call(call("pricey", "reviewer", "run-2", json!({})))
        .await;
    // A call that did not run costs nothing.
    let (_, refused) = joch
        .post_call(call("pricey", "reviewer", "run-2", json!("not an object")))
        .await;
    assert!(refused["status"].get("cost").is_none(), "{refused}");

    assert_eq!(
        report(&joch, "groupBy=tool").await,
        [
            ("pricey".to_owned(), 0.4, 1),
            ("llm.complete".to_owned(), 0.024, 2)
        ]
    );
    assert_eq!(
        report(&joch, "groupBy=agent").await,
        [
            ("reviewer".to_owned(), 0.4, 1),
            ("writer".to_owned(), 0.024, 2)
        ]
    );
    assert_eq!(
        report(&joch, "groupBy=execution").await,
        [
            ("run-2".to_owned(), 0.411, 2),
            ("run-1".to_owned(), 0.013, 1)
        ]
    );
    assert_eq!(report(&joch, "").await, [(String::new(), 0.424, 3)]);
    assert_eq!(report(&joch, "since=2999-01-01T00:00:00Z").await, []);
    assert_eq!(report(&joch, "since=1h").await.len(), 1);

    let (_, all) = joch.get("/v1/costs?groupBy=namespace").await;
    assert_eq!(all["items"][0]["key"], NS, "{all}");
    let out = joch.cli(&["costs", "-n", NS, "--group-by", "agent"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("reviewer") && text.contains("0.400000"),
        "{text}"
    );

    let bad = joch
        .get(&format!("/v1/namespaces/{NS}/costs?groupBy=color"))
        .await;
    assert_error(&bad, StatusCode::BAD_REQUEST, "bad_request");
    let bad = joch
        .get(&format!("/v1/namespaces/{NS}/costs?since=yesterday"))
        .await;
    assert_error(&bad, StatusCode::BAD_REQUEST, "bad_request");
}

#[tokio::test]
async fn a_budget_warns_at_its_soft_limit_and_denies_past_its_hard_one() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    priced_tools(&joch, &webhook).await;
    let budget = json!({
        "apiVersion": "joch.dev/v1alpha1", "kind": "Budget", "metadata": {"name": "per-run"},
        "spec": {"scope": {"tool": "pricey"}, "limits": {"perRunUsd": 1.0, "dailyUsd": 100.0},
                 "enforcement": {"onSoftLimit": "alert", "onHardLimit": "deny", "softLimitPct": 50}}
    });
    let (status, body) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/budgets"),
            Some(budget),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let mut phases = Vec::new();
    for _ in 0..3 {
        let (_, record) = joch
            .post_call(call("pricey", "bot", "run-1", json!({})))
            .await;
        phases.push(record["status"]["phase"].as_str().unwrap().to_owned());
        if record["status"]["phase"] == "Denied" {
            let decision = &record["status"]["hookDecisions"][0];
            assert_eq!(decision["policyId"], "budget/per-run");
            assert_eq!(record["status"]["error"]["code"], "budget_exceeded");
            assert!(
                record["status"]["output"]["reason"]
                    .as_str()
                    .unwrap()
                    .contains("perRunUsd")
            );
        }
    }
    assert_eq!(
        phases,
        ["Succeeded", "Succeeded", "Denied"],
        "0.4, 0.8, then 1.2 > 1.0"
    );
    // Another run has its own per-run budget; other tools are out of scope.
    let (_, other_run) = joch
        .post_call(call("pricey", "bot", "run-2", json!({})))
        .await;
    assert_eq!(other_run["status"]["phase"], "Succeeded");

    let (_, events) = joch
        .get(&format!("/v1/namespaces/{NS}/executions/run-1/events"))
        .await;
    let warnings: Vec<&Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "warning")
        .collect();
    assert!(!warnings.is_empty(), "{events}");
    assert_eq!(warnings[0]["data"]["code"], "budget_soft_limit");
    assert_eq!(warnings[0]["data"]["budget"], "per-run");

    let invalid = json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Budget", "metadata": {"name": "b"}, "spec": {"limits": {}}});
    let answer = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/budgets"),
            Some(invalid),
        )
        .await;
    assert_error(
        &answer,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_resource",
    );
}

#[tokio::test]
async fn policies_read_the_spend_so_far() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    priced_tools(&joch, &webhook).await;
    apply_policy(
        &joch,
        "thrifty",
        json!({"version": "1", "rules": [{"name": "stop", "when": {"expr": "cost.runUsd + cost.callUsd > 0.5"}, "action": {"deny": {"reason": "this run has spent enough"}}}]}),
    )
    .await;
    let (_, first) = joch
        .post_call(call("pricey", "bot", "run-1", json!({})))
        .await;
    assert_eq!(first["status"]["phase"], "Succeeded");
    let (_, second) = joch
        .post_call(call("pricey", "bot", "run-1", json!({})))
        .await;
    assert_eq!(second["status"]["phase"], "Denied", "{second}");
    assert_eq!(
        second["status"]["output"]["reason"],
        "this run has spent enough"
    );
}
