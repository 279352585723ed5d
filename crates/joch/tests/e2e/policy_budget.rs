//! A policy cannot stall joch: each evaluation is bounded (CEL in steps and
//! time, Rego in time), fails closed for its call with the policy's name
//! and the reason, and runs off the threads that serve requests.

use std::time::Instant;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS};

/// Each item compared with every other: 25 million steps for 5,000 items.
const QUADRATIC_CEL: &str = "input.xs.all(x, input.xs.exists(y, y == x))";
const QUADRATIC_REGO: &str = "package joch\nimport rego.v1\ndecision := {\"decision\": \"allow\"} if {\n  count([x | some x in input.input.xs; some y in input.input.xs; x == y]) > 0\n}\n";

async fn setup(args: &[&str], policy: Value) -> Joch {
    let joch = Joch::builder().args(args).start().await;
    joch.create_tool(json!({"metadata": {"name": "bulk"}, "spec": {
        "inputSchema": {"type": "object"},
        "sideEffects": {"level": "read_only"},
        "backend": {"type": "noop"}}}))
        .await;
    let (status, body) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/policies"),
            Some(json!({"metadata": {"name": "costly"}, "spec": policy})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    joch
}

fn items() -> Value {
    json!({"xs": (0..5_000).collect::<Vec<u32>>()})
}

/// The call was denied by `costly` failing to evaluate, for `why`.
fn failed_closed(call: &Value, why: &str) {
    assert_eq!(call["status"]["phase"], "Denied", "{call}");
    let decision = &call["status"]["hookDecisions"][0];
    assert_eq!(decision["policyId"], "costly", "{call}");
    let reason = decision["reason"].as_str().unwrap();
    assert!(
        reason.contains("failed to evaluate") && reason.contains(why),
        "{reason}"
    );
}

#[tokio::test]
async fn a_costly_cel_rule_fails_closed_within_its_steps() {
    let cel = json!({"version": "1", "rules": [{"when": {"expr": QUADRATIC_CEL}, "action": {"deny": {"reason": "matched"}}}]});
    let joch = setup(&[], cel).await;
    let (status, call) = joch.call("bulk", items()).await;
    assert_eq!(status, StatusCode::CREATED, "{call}");
    failed_closed(&call, "exceeded its budget of 1000000 steps");
    // The same rule over few items is evaluated, and decides.
    let (_, call) = joch.call("bulk", json!({"xs": [1, 2, 3]})).await;
    assert_eq!(call["status"]["error"]["message"], "matched", "{call}");
}

#[tokio::test]
async fn a_costly_rego_module_fails_closed_within_its_time() {
    let rego = json!({"version": "1", "rego": {"module": QUADRATIC_REGO}});
    let joch = setup(&["--policy-time-budget-ms", "50"], rego).await;
    let (status, call) = joch.call("bulk", items()).await;
    assert_eq!(status, StatusCode::CREATED, "{call}");
    failed_closed(&call, "Rego evaluation failed");
    let (_, call) = joch.call("bulk", json!({"xs": [1]})).await;
    assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
}

#[tokio::test]
async fn costly_policies_leave_health_checks_and_other_calls_served() {
    // A budget so large that each call evaluates for its whole second:
    // were evaluation on the threads that serve requests, four of them
    // would hold both of this machine's.
    let cel = json!({"version": "1", "rules": [{"when": {"expr": QUADRATIC_CEL}, "action": {"deny": {"reason": "matched"}}}]});
    let joch = setup(
        &[
            "--policy-time-budget-ms",
            "1500",
            "--policy-cel-steps",
            "100000000000",
        ],
        cel,
    )
    .await;
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let (http, url) = (
                joch.http.clone(),
                format!("{}/v1/namespaces/{NS}/toolcalls", joch.base),
            );
            tokio::spawn(async move {
                let call = json!({"spec": {"toolRef": {"name": "bulk"}, "input": items()}});
                http.post(url)
                    .json(&call)
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let started = Instant::now();
    let (status, _) = joch.get("/healthz").await;
    let health = started.elapsed();
    assert_eq!(status, StatusCode::OK);
    let pending = calls.iter().filter(|c| !c.is_finished()).count();
    println!("/healthz answered in {health:?} with {pending} costly calls evaluating");
    assert_eq!(
        pending, 4,
        "/healthz answered while every costly call was still evaluating"
    );
    for call in calls {
        failed_closed(&call.await.unwrap(), "ran out of time");
    }
}
