//! Where a call's time went: the `Server-Timing` answer (docs/observability.md).

use reqwest::StatusCode;
use serde_json::json;

use crate::harness::{Joch, NS, Webhook, rest_tool};

/// A call's answer says where its time went (`Server-Timing`): the tool's
/// 300 ms are the backend's, and the durable record before it a commit.
#[tokio::test]
async fn a_call_answers_where_its_time_went() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    let tool = rest_tool(
        "send",
        &format!("{}/slow-echo", webhook.base),
        json!({"level": "external_write"}),
    );
    joch.create_tool(tool).await;
    let call = json!({"spec": {"toolRef": {"name": "send"}, "input": {}}});
    let response = joch
        .http
        .post(format!("{}/v1/namespaces/{NS}/toolcalls", joch.base))
        .json(&call)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let header = response.headers()["server-timing"].to_str().unwrap();
    let stage = |name: &str| -> f64 {
        header
            .split(", ")
            .find_map(|m| m.strip_prefix(name)?.strip_prefix(";dur="))
            .unwrap_or_else(|| panic!("no {name} in {header}"))
            .parse()
            .unwrap()
    };
    assert!(stage("backend") >= 300.0, "{header}");
    assert!(stage("backend") < 3000.0, "{header}");
    // A write is synced before it runs and once settled: two commits.
    assert!(stage("commit") > 0.0, "{header}");
    // joch's own stages are not where the tool's 300 ms went (loosely
    // bounded: a loaded machine may stretch them).
    for name in ["admission", "queue", "handoff", "settle"] {
        assert!(stage(name) < 3000.0, "{header}");
    }
}
