//! Every value joch accepts, it can use: a number out of its range is
//! refused when it is applied or requested (422 naming the field and its
//! range), and the largest accepted value works. Issue 34's probes (an
//! approval timeout of 10^13 s, a policy deadline of u64::MAX, a back-test
//! window of 10^8 days) each panicked a request before.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, assert_error, rest_tool};

const YEAR: u64 = 366 * 86_400;

fn tool_with(path: &[&str], value: Value) -> Value {
    let mut tool = rest_tool("t", "http://127.0.0.1:9/", json!({"level": "read_only"}));
    let mut at = &mut tool["spec"];
    for key in &path[..path.len() - 1] {
        at = &mut at[*key];
    }
    at[path[path.len() - 1]] = value;
    tool
}

fn policy(timeout_seconds: Value) -> Value {
    json!({"kind": "Policy", "metadata": {"name": "slow"}, "spec": {"version": "1", "rules": [
        {"when": {"tool.name": "*"}, "require": {"approval": "human",
            "approvalRouting": {"timeoutSeconds": timeout_seconds}}}
    ]}})
}

fn mcp_server(spec: Value) -> Value {
    let mut server = json!({"kind": "McpServer", "metadata": {"name": "up"},
        "spec": {"http": {"url": "http://127.0.0.1:9/mcp"}}});
    for (key, value) in spec.as_object().unwrap() {
        server["spec"][key] = value.clone();
    }
    server
}

/// Asserts a 422 `invalid_resource` whose `details.fields` names `field`
/// with its range.
#[track_caller]
fn assert_out_of_range(answer: &(StatusCode, Value), field: &str) {
    assert_error(answer, StatusCode::UNPROCESSABLE_ENTITY, "invalid_resource");
    let fields = answer.1["details"]["fields"].as_array().unwrap();
    let named = fields.iter().find(|f| f["field"] == field);
    let message = named.and_then(|f| f["message"].as_str()).unwrap_or("");
    assert!(
        message.starts_with("must be between"),
        "{field}: {}",
        answer.1
    );
}

#[tokio::test]
async fn every_number_out_of_its_range_is_refused_naming_the_field() {
    let joch = Joch::start().await;
    let tools = format!("/v1/namespaces/{NS}/tools");
    let namespace = format!("/v1/namespaces/{NS}");
    let side_effects = |key: &str, v: Value| tool_with(&["sideEffects", key], v);
    let rate = |limit: Value| json!({"spec": {"rateLimits": [limit]}});
    let cases: Vec<(Method, String, Value, &str)> = vec![
        (
            Method::POST,
            tools.clone(),
            side_effects("approvalTimeoutSeconds", json!(YEAR + 1)),
            "spec.sideEffects.approvalTimeoutSeconds",
        ),
        (
            Method::POST,
            tools.clone(),
            side_effects("approvalTimeoutSeconds", json!(0)),
            "spec.sideEffects.approvalTimeoutSeconds",
        ),
        (
            Method::POST,
            tools.clone(),
            side_effects("idempotencyWindowSeconds", json!(u64::MAX)),
            "spec.sideEffects.idempotencyWindowSeconds",
        ),
        (
            Method::POST,
            tools.clone(),
            tool_with(&["backend", "endpoint", "timeoutMs"], json!(3_600_001)),
            "spec.backend.endpoint.timeoutMs",
        ),
        (
            Method::POST,
            tools.clone(),
            tool_with(&["maxInlineBytes"], json!((1u64 << 30) + 1)),
            "spec.maxInlineBytes",
        ),
        (
            Method::POST,
            format!("{namespace}/policies"),
            policy(json!(YEAR + 1)),
            "spec.rules[0].require.approvalRouting.timeoutSeconds",
        ),
        (
            Method::PUT,
            namespace.clone(),
            json!({"spec": {"idempotencyWindowSeconds": 10_000_000_000_000u64}}),
            "spec.idempotencyWindowSeconds",
        ),
        (
            Method::PUT,
            namespace.clone(),
            json!({"spec": {"maxInlineBytes": u64::MAX}}),
            "spec.maxInlineBytes",
        ),
        (
            Method::PUT,
            namespace.clone(),
            rate(json!({"name": "r", "per": "agent", "callsPerMinute": 60_001})),
            "spec.rateLimits[0].callsPerMinute",
        ),
        (
            Method::PUT,
            namespace.clone(),
            rate(json!({"name": "r", "per": "agent", "callsPerDay": 0})),
            "spec.rateLimits[0].callsPerDay",
        ),
        (
            Method::PUT,
            namespace.clone(),
            rate(json!({"name": "r", "per": "tool", "callsPerMinute": 5, "burst": 1_000_001})),
            "spec.rateLimits[0].burst",
        ),
        (
            Method::POST,
            format!("{namespace}/endpoints"),
            json!({"kind": "Endpoint", "metadata": {"name": "e"}, "spec": {"url": "http://127.0.0.1:9/", "timeoutMs": 0}}),
            "spec.timeoutMs",
        ),
        (
            Method::POST,
            format!("{namespace}/mcpservers"),
            mcp_server(json!({"timeoutMs": 3_600_001})),
            "spec.timeoutMs",
        ),
        (
            Method::POST,
            format!("{namespace}/mcpservers"),
            mcp_server(json!({"discovery": {"refreshInterval": "169h"}})),
            "spec.discovery.refreshInterval",
        ),
        (
            Method::POST,
            format!("{namespace}/mcpservers"),
            mcp_server(
                json!({"tools": {"x": {"sideEffects": {"approvalTimeoutSeconds": u64::MAX}}}}),
            ),
            "spec.tools.x.sideEffects.approvalTimeoutSeconds",
        ),
    ];
    for (method, path, body, field) in cases {
        let answer = joch.send(method, &path, Some(body)).await;
        assert_out_of_range(&answer, field);
    }
    let priced = tool_with(&["cost"], json!({"perCall": 1e7}));
    let answer = joch.send(Method::POST, &tools, Some(priced)).await;
    assert_error(
        &answer,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_resource",
    );
    assert_eq!(
        answer.1["details"]["fields"][0]["field"],
        "spec.cost.perCall"
    );
}

/// Issue 34's probes: each is refused with a structured 422 before
/// anything is recorded, and the server answers on.
#[tokio::test]
async fn the_probes_are_refused_and_the_server_answers_on() {
    let joch = Joch::start().await;
    let huge = tool_with(
        &["sideEffects"],
        json!({"level": "external_write", "requiresApproval": true, "approvalTimeoutSeconds": 10_000_000_000_000u64}),
    );
    let tools = format!("/v1/namespaces/{NS}/tools");
    let answer = joch.send(Method::POST, &tools, Some(huge)).await;
    assert_out_of_range(&answer, "spec.sideEffects.approvalTimeoutSeconds");

    let policies = format!("/v1/namespaces/{NS}/policies");
    let answer = joch
        .send(Method::POST, &policies, Some(policy(json!(u64::MAX))))
        .await;
    assert_out_of_range(
        &answer,
        "spec.rules[0].require.approvalRouting.timeoutSeconds",
    );

    let candidate = policy(json!(300));
    let test = json!({"policy": candidate, "since": "100000000d"});
    let answer = joch
        .send(Method::POST, &format!("{policies}/test"), Some(test))
        .await;
    assert_out_of_range(&answer, "since");

    let answer = joch
        .get(&format!("/v1/namespaces/{NS}/costs?since=100000000000h"))
        .await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
    assert_eq!(answer.1["details"]["parameter"], "since");

    let (status, _) = joch.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "the server still answers");
    let (status, list) = joch.get(&tools).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["items"], json!([]), "nothing was stored");
}

/// The largest accepted approval timeout is usable: the call waits with
/// its Approval, due a year on.
#[tokio::test]
async fn the_longest_approval_timeout_opens_an_approval_a_year_out() {
    let joch = Joch::start().await;
    let patient = tool_with(
        &["sideEffects"],
        json!({"level": "external_write", "requiresApproval": true, "approvalTimeoutSeconds": YEAR}),
    );
    joch.create_tool(patient).await;
    let call = json!({"spec": {"toolRef": {"name": "t"}, "input": {}, "sideEffects": {"idempotencyKey": "once"}}});
    let path = format!("/v1/namespaces/{NS}/toolcalls?wait=false");
    let (status, made) = joch.send(Method::POST, &path, Some(call)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{made}");
    assert_eq!(made["status"]["phase"], "AwaitingApproval", "{made}");
    let name = made["metadata"]["name"].as_str().unwrap();
    let (status, approval) = joch
        .get(&format!("/v1/namespaces/{NS}/approvals/{name}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    assert_eq!(approval["spec"]["routing"]["timeoutSeconds"], YEAR);
    let deadline = approval["status"]["deadline"].as_str().unwrap();
    let deadline = chrono::DateTime::parse_from_rfc3339(deadline).unwrap();
    let ahead = deadline.with_timezone(&chrono::Utc) - chrono::Utc::now();
    assert!(ahead > chrono::TimeDelta::days(365), "due in {ahead}");
}
