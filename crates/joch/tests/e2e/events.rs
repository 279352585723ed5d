//! Execution timelines (seed 003) and batches under each fail-safe.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, assert_error, rest_tool, wait_for_phase};
use crate::policies::apply_policy;

async fn setup() -> (Webhook, Joch) {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    joch.create_tool(rest_tool(
        "echo",
        &format!("{}/echo", webhook.base),
        json!({"level": "external_write"}),
    ))
    .await;
    (webhook, joch)
}

fn in_run(name: &str, input: Value) -> Value {
    json!({"metadata": {"name": name}, "spec": {"toolRef": {"name": "echo"}, "executionRef": {"name": "run-1"}, "input": input}})
}

async fn events(joch: &Joch) -> Vec<Value> {
    let (status, list) = joch
        .get(&format!("/v1/namespaces/{NS}/executions/run-1/events"))
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let events = list["items"].as_array().unwrap().clone();
    let numbers: Vec<u64> = events
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(
        numbers,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "numbered 1, 2, 3..."
    );
    events
}

/// `type` of each event, with the decision for policy_decision and run_resumed.
fn shape(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let kind = e["type"].as_str().unwrap();
            match kind {
                "policy_decision" => {
                    format!("policy_decision:{}", e["data"]["action"].as_str().unwrap())
                }
                "run_resumed" => format!("run_resumed:{}", e["data"]["approved"]),
                "tool_completed" => format!("tool_completed:{}", e["data"]["success"]),
                other => other.to_owned(),
            }
        })
        .collect()
}

#[tokio::test]
async fn allow_and_deny_timelines() {
    let (_webhook, joch) = setup().await;
    joch.post_call(in_run("a", json!({}))).await;
    apply_policy(&joch, "no-stop", json!({"version": "1", "rules": [{"when": {"input.stop": true}, "action": {"deny": {"reason": "stop"}}}]})).await;
    joch.post_call(in_run("d", json!({"stop": true}))).await;
    let events = events(&joch).await;
    assert_eq!(
        shape(&events),
        [
            "policy_decision:allow",
            "tool_completed:true",
            "policy_decision:deny",
            "tool_completed:false"
        ]
    );
    let completed = &events[1]["data"];
    assert_eq!(
        (
            completed["tool_name"].as_str(),
            completed["tool_call_id"].as_str()
        ),
        (Some("echo"), Some("a"))
    );
    assert_eq!(completed["output"], json!({"echo": {}}));
    assert_eq!(completed["source"], "execute");
    assert_eq!(events[2]["data"]["reason"], "stop");
    assert_eq!(events[3]["data"]["error"], "stop");
    assert!(events.iter().all(|e| e["time"].is_string()));
}

#[tokio::test]
async fn defer_timelines_for_approve_deny_timeout_and_user_input() {
    let (_webhook, joch) = setup().await;
    apply_policy(&joch, "gate", json!({"version": "1", "rules": [
        {"when": {"input.ask": "value"}, "require": {"userInput": {"targetArg": "code", "prompt": "code?"}}},
        {"when": {"input.ask": "quick"}, "require": {"approval": "human", "approvalRouting": {"timeoutSeconds": 1}}},
        {"require": {"approval": "human"}, "reason": "needs a person"}
    ]}))
    .await;
    let submit = |name: &str, input: Value| {
        let call = in_run(name, input);
        let joch = &joch;
        async move {
            joch.send(
                Method::POST,
                &format!("/v1/namespaces/{NS}/toolcalls?wait=false"),
                Some(call),
            )
            .await
        }
    };
    let approvals = |name: &str, verb: &str| format!("/v1/namespaces/{NS}/approvals/{name}/{verb}");

    submit("approved", json!({})).await;
    joch.send(
        Method::POST,
        &approvals("approved", "approve"),
        Some(json!({"approvedBy": "ann"})),
    )
    .await;
    wait_for_phase(&joch, "approved", "Succeeded").await;
    submit("denied", json!({})).await;
    joch.send(
        Method::POST,
        &approvals("denied", "deny"),
        Some(json!({"approvedBy": "ann"})),
    )
    .await;
    wait_for_phase(&joch, "denied", "Denied").await;
    submit("late", json!({"ask": "quick"})).await;
    wait_for_phase(&joch, "late", "TimedOut").await;
    submit("input", json!({"ask": "value"})).await;
    joch.send(
        Method::POST,
        &approvals("input", "approve"),
        Some(json!({"approvedBy": "ann", "value": "42"})),
    )
    .await;
    wait_for_phase(&joch, "input", "Succeeded").await;

    let events = events(&joch).await;
    let paused_then = ["run_paused", "run_resumed:true", "tool_completed:true"];
    let expected: Vec<String> = [
        vec!["policy_decision:defer"],
        paused_then.to_vec(),
        vec![
            "policy_decision:defer",
            "run_paused",
            "run_resumed:false",
            "tool_completed:false",
        ],
        vec![
            "policy_decision:defer",
            "run_paused",
            "run_resumed:false",
            "tool_completed:false",
        ],
        vec!["policy_decision:request_user_input"],
        paused_then.to_vec(),
    ]
    .concat()
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(shape(&events), expected);
    assert_eq!(events[1]["data"]["payload"]["approval"], "approved");
    assert_eq!(events[1]["data"]["reason"], "needs a person");
}

async fn five_call_batch(joch: &Joch, execution: &str, batch: u32) -> (StatusCode, Value) {
    let calls: Vec<Value> = (1..=5)
        .map(|i| json!({"metadata": {"name": format!("{execution}-b{batch}-c{i}")}, "spec": {"toolRef": {"name": "echo"}, "input": {"i": i, "stop": i == 3}}}))
        .collect();
    joch.send(
        Method::POST,
        &format!("/v1/namespaces/{NS}/executions/{execution}/batches"),
        Some(json!({"calls": calls})),
    )
    .await
}

async fn batch_setup(policy: &str) -> (Webhook, Joch, String) {
    let (webhook, joch) = setup().await;
    apply_policy(&joch, "no-stop", json!({"version": "1", "rules": [{"when": {"input.stop": true}, "action": {"deny": {"reason": "stop"}}}]})).await;
    let execution = format!("run-{policy}");
    let run = json!({"metadata": {"name": execution}, "spec": {"failSafe": {"approvalDenialPolicy": policy}}});
    let (status, _) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/executions"),
            Some(run),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    (webhook, joch, execution)
}

async fn timeline(joch: &Joch, execution: &str) -> Vec<String> {
    let (_, list) = joch
        .get(&format!(
            "/v1/namespaces/{NS}/executions/{execution}/events"
        ))
        .await;
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let call = e["data"]["tool_call_id"]
                .as_str()
                .map(|c| c.rsplit('-').next().unwrap().to_owned());
            let what = match e["type"].as_str().unwrap() {
                "policy_decision" => format!("decision:{}", e["data"]["action"].as_str().unwrap()),
                "tool_completed" => format!("completed:{}", e["data"]["success"]),
                other => other.to_owned(),
            };
            call.map_or(what.clone(), |c| format!("{c} {what}"))
        })
        .collect()
}

fn phases(batch: &Value) -> Vec<String> {
    batch["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["status"]["phase"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_batch_under_continue_runs_everything_but_the_denial() {
    let (webhook, joch, execution) = batch_setup("continue").await;
    let (status, batch) = five_call_batch(&joch, &execution, 1).await;
    assert_eq!(status, StatusCode::OK, "{batch}");
    assert_eq!(
        phases(&batch),
        ["Succeeded", "Succeeded", "Denied", "Succeeded", "Succeeded"]
    );
    assert_eq!(batch["execution"]["status"]["phase"], "Running");
    assert_eq!(
        batch["calls"][2]["status"]["output"]["error"],
        "Denied by policy"
    );
    assert_eq!(webhook.hits(), 4);
    let events = timeline(&joch, &execution).await;
    assert_eq!(
        events[..8],
        [
            "tool_batch_started",
            "c1 decision:allow",
            "c2 decision:allow",
            "c3 decision:deny",
            "warning",
            "c4 decision:allow",
            "c5 decision:allow",
            "c3 completed:false"
        ]
    );
    let mut rest = events[8..].to_vec();
    rest.sort();
    assert_eq!(
        rest,
        [
            "c1 completed:true",
            "c2 completed:true",
            "c4 completed:true",
            "c5 completed:true"
        ],
        "the others run concurrently"
    );
}

#[tokio::test]
async fn a_batch_under_degrade_or_fail_skips_the_rest() {
    for (policy, phase) in [("degrade", "Degraded"), ("fail", "Failed")] {
        let (webhook, joch, execution) = batch_setup(policy).await;
        let (_, batch) = five_call_batch(&joch, &execution, 1).await;
        assert_eq!(
            phases(&batch),
            ["Skipped", "Skipped", "Denied", "Skipped", "Skipped"],
            "{policy}"
        );
        assert_eq!(batch["execution"]["status"]["phase"], phase);
        assert_eq!(batch["calls"][4]["status"]["error"]["code"], "skipped");
        assert_eq!(webhook.hits(), 0);
        assert_eq!(
            timeline(&joch, &execution).await,
            [
                "tool_batch_started",
                "c1 decision:allow",
                "c2 decision:allow",
                "c3 decision:deny",
                "c1 completed:false",
                "c2 completed:false",
                "c3 completed:false",
                "c4 completed:false",
                "c5 completed:false"
            ],
            "{policy}"
        );
        let (_, stored) = joch
            .get(&format!(
                "/v1/namespaces/{NS}/toolcalls?execution={execution}&phase=Skipped"
            ))
            .await;
        assert_eq!(stored["items"].as_array().unwrap().len(), 4);
        let next = five_call_batch(&joch, &execution, 2).await;
        if policy == "fail" {
            assert_error(&next, StatusCode::CONFLICT, "execution_finished");
        } else {
            assert_eq!(next.0, StatusCode::OK, "a degraded run still takes batches");
        }
    }
}

#[tokio::test]
async fn events_stream_live_and_the_cli_prints_them() {
    let (_webhook, joch) = setup().await;
    joch.post_call(in_run("first", json!({}))).await;
    let url = format!(
        "{}/v1/namespaces/{NS}/executions/run-1/events?follow=true&after=1",
        joch.base
    );
    let mut stream = reqwest::Client::new().get(url).send().await.unwrap();
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    joch.post_call(in_run("second", json!({}))).await;
    let mut seen = String::new();
    let read = async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.matches("event: tool_completed").count() == 2 {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("events arrived live");
    assert!(!seen.contains("id: 1\n"), "after=1 skips the first event");
    assert!(
        seen.contains("id: 2\n") && seen.contains("event: policy_decision"),
        "{seen}"
    );

    let out = joch.cli(&["logs", "-e", "run-1", "-n", NS]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(text.lines().nth(3).unwrap().contains("tool_completed") && text.contains("second"));
}

#[tokio::test]
async fn joch_logs_follow_prints_events_as_they_happen() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let (_webhook, joch) = setup().await;
    let mut follower = Command::new(env!("CARGO_BIN_EXE_joch"))
        .args(["logs", "-e", "run-1", "-n", NS, "-f"])
        .env("JOCH_SERVER", &joch.base)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follower.stdout.take().unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .take(2)
            .collect::<Vec<_>>()
    });
    // The follower is already waiting when the call happens.
    tokio::time::sleep(Duration::from_millis(300)).await;
    joch.post_call(in_run("live", json!({}))).await;
    let lines = tokio::time::timeout(Duration::from_secs(10), lines)
        .await
        .expect("lines arrive live")
        .unwrap();
    let _ = follower.kill();
    let _ = follower.wait();
    assert!(
        lines[0].contains("policy_decision") && lines[0].contains("live"),
        "{lines:?}"
    );
    assert!(lines[1].contains("tool_completed"), "{lines:?}");
}
