//! `/metrics`: Prometheus text with exact counts after known calls.

use reqwest::Method;
use serde_json::json;

use crate::harness::{Joch, NS, Webhook, rest_tool};
use crate::policies::apply_policy;

/// The value of the sample whose name and labels are exactly `series`.
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[tokio::test]
async fn metrics_count_calls_replays_batches_decisions_and_approvals() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    joch.create_tool(rest_tool(
        "echo",
        &format!("{}/echo", webhook.base),
        json!({"level": "read_only"}),
    ))
    .await;
    joch.create_tool(rest_tool(
        "fails",
        &format!("{}/fail", webhook.base),
        json!({"level": "read_only"}),
    ))
    .await;
    joch.create_tool(rest_tool(
        "wire",
        &format!("{}/echo", webhook.base),
        json!({"level": "financial"}),
    ))
    .await;
    apply_policy(&joch, "wires-wait", json!({"version": "1", "rules": [{"when": {"tool.name": "wire"}, "require": {"approval": "human"}}]})).await;

    let mut first = None;
    for i in 0..3 {
        let (_, call) = joch.call("echo", json!({"i": i})).await;
        first.get_or_insert(call);
    }
    joch.call("fails", json!({})).await;
    let name = first.unwrap()["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    joch.send(
        Method::POST,
        &format!("/v1/namespaces/{NS}/toolcalls/{name}/replay"),
        Some(json!({})),
    )
    .await;
    let keyed = json!({"spec": {"toolRef": {"name": "echo"}, "input": {"k": 1}, "sideEffects": {"idempotencyKey": "k1"}}});
    joch.post_call(keyed.clone()).await;
    joch.post_call(keyed).await;
    let batch = json!({"calls": [{"spec": {"toolRef": {"name": "echo"}, "input": {"b": 1}}}, {"spec": {"toolRef": {"name": "echo"}, "input": {"b": 2}}}]});
    joch.send(
        Method::POST,
        &format!("/v1/namespaces/{NS}/executions/run-m/batches"),
        Some(batch),
    )
    .await;
    joch.send(
        Method::POST,
        &format!("/v1/namespaces/{NS}/toolcalls?wait=false"),
        Some(json!({"spec": {"toolRef": {"name": "wire"}, "input": {}}})),
    )
    .await;

    let text = reqwest::get(format!("{}/metrics", joch.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let expect = [
        (
            r#"agent_tool_call_latency_ms_count{tool_name="echo",result="success",source="execute"}"#,
            6.0,
        ),
        (
            r#"agent_tool_call_latency_ms_count{tool_name="echo",result="success",source="replay"}"#,
            1.0,
        ),
        (
            r#"agent_tool_call_latency_ms_count{tool_name="fails",result="error",source="execute"}"#,
            1.0,
        ),
        (
            r#"agent_tool_batch_latency_ms_count{call_count="2",failure_count="0"}"#,
            1.0,
        ),
        (
            r#"joch_tool_calls_total{namespace="e2e",tool="echo",phase="Succeeded"}"#,
            7.0,
        ),
        (
            r#"joch_tool_calls_total{namespace="e2e",tool="fails",phase="Failed"}"#,
            1.0,
        ),
        (
            r#"joch_idempotent_replays_total{namespace="e2e",tool="echo"}"#,
            1.0,
        ),
        (
            r#"joch_policy_decisions_total{policy="wires-wait",decision="defer",shadow="false"}"#,
            1.0,
        ),
        ("joch_approvals_pending", 1.0),
        (
            r#"joch_backend_latency_ms_count{backend="rest",tool="fails"}"#,
            1.0,
        ),
    ];
    for (series, value) in expect {
        assert_eq!(sample(&text, series), Some(value), "{series}\n{text}");
    }
    assert!(sample(&text, "joch_store_commit_seconds_count").is_some_and(|n| n > 0.0));
    assert!(text.contains(r#"agent_tool_call_latency_ms_bucket{tool_name="echo",result="success",source="execute",le="+Inf"} 6"#));
    assert!(!text.contains(&name), "no call ids in labels");
}

#[tokio::test]
async fn json_logs_have_one_line_per_settled_call() {
    let webhook = Webhook::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("joch.log");
    let joch = Joch::builder()
        .arg("--log-format=json")
        .log("info", &log)
        .start()
        .await;
    joch.create_tool(rest_tool(
        "echo",
        &format!("{}/echo", webhook.base),
        json!({"level": "read_only"}),
    ))
    .await;
    let (_, a) = joch.call("echo", json!({"secret": "do-not-log"})).await;
    joch.call("echo", json!({})).await;
    drop(joch);
    let text = std::fs::read_to_string(&log).unwrap();
    let settled: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["message"] == "tool call settled")
        .collect();
    assert_eq!(settled.len(), 2, "{text}");
    assert_eq!(settled[0]["level"], "INFO");
    assert_eq!(settled[0]["call"], a["metadata"]["name"]);
    assert_eq!(
        (settled[0]["tool"].as_str(), settled[0]["phase"].as_str()),
        (Some("echo"), Some("Succeeded"))
    );
    assert!(!text.contains("do-not-log"), "arguments are not logged");
}

#[tokio::test]
async fn accepted_connections_are_counted_once_each() {
    let joch = Joch::start().await;
    let url = format!("{}/metrics", joch.base);
    let accepted = |text: &str| sample(text, "joch_connections_accepted_total").unwrap_or(0.0);
    let kept = reqwest::Client::new();
    let scrape = || async { kept.get(&url).send().await.unwrap().text().await.unwrap() };
    let before = accepted(&scrape().await);
    for _ in 0..5 {
        scrape().await;
    }
    let after_kept = accepted(&scrape().await);
    assert_eq!(
        after_kept, before,
        "a kept-alive connection is counted once"
    );
    for _ in 0..3 {
        reqwest::Client::new().get(&url).send().await.unwrap();
    }
    let after_fresh = accepted(&scrape().await);
    assert_eq!(after_fresh - after_kept, 3.0, "three fresh connections");
}
