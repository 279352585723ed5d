//! Three `joch serve` replicas on one PostgreSQL database
//! (`JOCH_TEST_POSTGRES`; `scripts/test` starts a throwaway server): any
//! replica serves any request, idempotency holds across them, approvals and
//! events cross them, and a replica killed mid-load loses no acknowledged
//! call and repeats no side effect.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

pub(crate) use crate::harness::postgres_database as fresh_database;
use crate::harness::{Joch, NS, Webhook, rest_tool};
use crate::policies::apply_policy;

pub(crate) async fn replica(store: &str) -> Joch {
    Joch::builder()
        .postgres(store)
        .args(&["--lease-seconds", "3"])
        .start()
        .await
}

async fn replicas(store: &str) -> Vec<Joch> {
    let (a, b, c) = tokio::join!(replica(store), replica(store), replica(store));
    vec![a, b, c]
}

/// A webhook tool with a timeout no loaded test machine reaches: keyed calls
/// are retried on a transport timeout (their receiver can tell a repeat),
/// and these tests count deliveries.
pub(crate) fn patient_tool(name: &str, url: &str, side_effects: Value) -> Value {
    let mut tool = rest_tool(name, url, side_effects);
    tool["spec"]["backend"]["endpoint"]["timeoutMs"] = json!(20_000);
    tool
}

pub(crate) fn keyed(tool: &str, key: &str, input: Value) -> Value {
    json!({"spec": {"toolRef": {"name": tool}, "input": input, "sideEffects": {"idempotencyKey": key}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_key_sent_200_times_over_three_replicas_runs_once() {
    let Some(store) = fresh_database("one_key").await else {
        return;
    };
    let webhook = Webhook::start().await;
    let joch = replicas(&store).await;
    joch[0]
        .create_tool(patient_tool(
            "ticket.create",
            &format!("{}/record", webhook.base),
            json!({"level": "external_write"}),
        ))
        .await;
    let joch = Arc::new(joch);
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let joch = Arc::clone(&joch);
            tokio::spawn(async move {
                joch[i % 3]
                    .post_call(keyed("ticket.create", "order-1", json!({"order": 1})))
                    .await
            })
        })
        .collect();
    let mut names = Vec::new();
    for task in tasks {
        let (status, call) = task.await.unwrap();
        assert!(status.is_success(), "{status} {call}");
        assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
        names.push(call["metadata"]["name"].as_str().unwrap().to_owned());
    }
    names.dedup();
    assert_eq!(names.len(), 1, "every answer is the one call: {names:?}");
    assert_eq!(webhook.recorded().len(), 1, "the tool ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approval_decided_on_another_replica_answers_the_waiting_caller() {
    let Some(store) = fresh_database("approval").await else {
        return;
    };
    let webhook = Webhook::start().await;
    let joch = Arc::new(replicas(&store).await);
    joch[0]
        .create_tool(patient_tool(
            "ticket.create",
            &format!("{}/record", webhook.base),
            json!({"level": "external_write"}),
        ))
        .await;
    apply_policy(
        &joch[0],
        "people-approve-writes",
        json!({"version": "1", "rules": [
            {"when": {"tool.sideEffects.level": "external_write"}, "require": {"approval": "human"}}
        ]}),
    )
    .await;

    // Replica C follows the execution's events before anything happens.
    let events = format!(
        "{}/v1/namespaces/{NS}/executions/run-1/events?follow=true",
        joch[2].base
    );
    let mut stream = reqwest::Client::new().get(events).send().await.unwrap();

    let caller = {
        let joch = Arc::clone(&joch);
        tokio::spawn(async move {
            let call = json!({"spec": {"toolRef": {"name": "ticket.create"}, "input": {"n": 1},
                                       "executionRef": {"name": "run-1"}}});
            joch[0].post_call(call).await
        })
    };
    approve_the_pending_call(&joch[1], "bob").await;
    let (status, call) = tokio::time::timeout(Duration::from_secs(10), caller)
        .await
        .expect("the caller on A heard the decision made on B")
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{call}");
    assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
    assert_eq!(webhook.recorded().len(), 1);

    let mut seen = String::new();
    let read = async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("event: tool_completed") {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("C streamed the events of a call A ran");
    for event in ["run_paused", "run_resumed", "tool_completed"] {
        assert!(
            seen.contains(&format!("event: {event}")),
            "{event} missing: {seen}"
        );
    }
    drop(stream);

    // A keyed call paused on A; A dies; B approves and runs it; the caller
    // retrying its key on C gets the result, and the tool ran once.
    let mut joch = Arc::try_unwrap(joch).ok().expect("no other holder");
    let (status, paused) = joch[0]
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/toolcalls?wait=false"),
            Some(keyed("ticket.create", "ship-2", json!({"n": 2}))),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{paused}");
    assert_eq!(paused["status"]["phase"], "AwaitingApproval", "{paused}");
    joch[0].kill();
    approve_the_pending_call(&joch[1], "carol").await;
    let (status, retried) = joch[2]
        .post_call(keyed("ticket.create", "ship-2", json!({"n": 2})))
        .await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["metadata"]["name"], paused["metadata"]["name"]);
    assert_eq!(retried["status"]["phase"], "Succeeded", "{retried}");
    assert_eq!(webhook.recorded().len(), 2, "each approved call ran once");
    joch.clear();
}

/// Waits for an approval to be pending, as `joch` lists it, and approves it there.
pub(crate) async fn approve_the_pending_call(joch: &Joch, by: &str) {
    let approval = loop {
        let (_, list) = joch.get(&format!("/v1/namespaces/{NS}/approvals")).await;
        let pending = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["status"]["phase"] == "Pending")
            .map(|a| a["metadata"]["name"].as_str().unwrap().to_owned());
        if let Some(name) = pending {
            break name;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (status, decided) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/approvals/{approval}/approve"),
            Some(json!({"approvedBy": by})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
}

/// Sends one keyed call, retrying on the next replica whenever the one
/// asked cannot answer (it was killed): what a load balancer's client does.
pub(crate) async fn send_until_answered(
    bases: &[std::sync::RwLock<String>],
    first: usize,
    call: Value,
) -> (StatusCode, Value) {
    let http = reqwest::Client::new();
    // A bound on the whole, so that a call nobody answers fails the test in
    // minutes, not after a hundred request timeouts.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut next = first;
    while tokio::time::Instant::now() < deadline {
        let base = bases[next % bases.len()].read().unwrap().clone();
        next += 1;
        let request = http
            .post(format!("{base}/v1/namespaces/{NS}/toolcalls"))
            .json(&call)
            .timeout(Duration::from_secs(30));
        if let Ok(response) = request.send().await {
            let status = response.status();
            if let Ok(body) = response.json::<Value>().await {
                if status != StatusCode::SERVICE_UNAVAILABLE {
                    return (status, body);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no replica answered {call}");
}

/// Cancels heard from another replica stop the calls they name, however
/// many arrive at once (many to a notification).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_calls_cancelled_at_once_through_another_replica_all_stop() {
    const CALLS: usize = 24;
    let Some(store) = fresh_database("cancels").await else {
        return;
    };
    let webhook = Webhook::start().await;
    let (a, b) = tokio::join!(replica(&store), replica(&store));
    let hangs = format!("{}/hang", webhook.base);
    // Its calls hang past the test's end unless cancelled.
    a.create_tool(patient_tool(
        "slow.read",
        &hangs,
        json!({"level": "read_only"}),
    ))
    .await;
    let calls = format!("/v1/namespaces/{NS}/toolcalls?wait=false");
    let mut names = Vec::new();
    for n in 0..CALLS {
        let call = json!({"metadata": {"name": format!("hanging-{n:02}")},
                          "spec": {"toolRef": {"name": "slow.read"}, "input": {}}});
        let (status, call) = a.send(Method::POST, &calls, Some(call)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{call}");
        names.push(call["metadata"]["name"].as_str().unwrap().to_owned());
    }
    crate::harness::wait_for_hits(&webhook, CALLS).await;

    let cancels = names
        .iter()
        .map(|name| format!("/v1/namespaces/{NS}/toolcalls/{name}/cancel"));
    for (status, call) in b.send_each(Method::POST, cancels).await {
        assert_eq!(status, StatusCode::OK, "{call}");
        assert_eq!(call["status"]["error"]["code"], "cancelled", "{call}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_mid_load_loses_nothing_and_repeats_nothing() {
    let Some(store) = fresh_database("kill").await else {
        return;
    };
    let webhook = Webhook::start().await;
    let started = replicas(&store).await;
    // Slow answers, so that the killed replica has calls in flight.
    for (name, url, side_effects) in [
        (
            "ticket.create",
            "slow-record",
            json!({"level": "external_write"}),
        ),
        (
            "order.read",
            "slow-record",
            json!({"level": "read_only", "idempotent": true}),
        ),
    ] {
        let tool = patient_tool(name, &format!("{}/{url}", webhook.base), side_effects);
        started[0].create_tool(tool).await;
    }
    let mut processes = started;
    let bases: Arc<Vec<_>> = Arc::new(
        processes
            .iter()
            .map(|j| std::sync::RwLock::new(j.base.clone()))
            .collect(),
    );

    let load: Vec<_> = (0..240)
        .map(|i| {
            let bases = Arc::clone(&bases);
            tokio::spawn(async move {
                let tool = if i % 2 == 0 {
                    "ticket.create"
                } else {
                    "order.read"
                };
                let key = format!("k{i}");
                let call = keyed(tool, &key, json!({"key": key}));
                tokio::time::sleep(Duration::from_millis(10 * i as u64)).await;
                (key, send_until_answered(&bases, i, call).await)
            })
        })
        .collect();
    // Mid-load, with calls in flight on it: kill -9 the second replica, and
    // start a new one in its place.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    processes[1].kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    processes[1] = replica(&store).await;
    *bases[1].write().unwrap() = processes[1].base.clone();

    let mut acknowledged = Vec::new();
    let mut refused = Vec::new();
    for task in load {
        let (key, (status, call)) = task.await.unwrap();
        assert!(!status.is_server_error(), "{key}: {status} {call}");
        match status.is_success() {
            true => acknowledged.push(key),
            false => refused.push(format!("{key}: {status} {call}")),
        }
    }
    assert!(
        refused.is_empty(),
        "every call was answered in the end: {refused:#?}"
    );
    assert_eq!(acknowledged.len(), 240);

    // Every acknowledged call is stored once, and settled: the killed
    // replica's calls were taken over when its lease lapsed.
    let (_, listed) = processes[0]
        .get(&format!("/v1/namespaces/{NS}/toolcalls?limit=1000"))
        .await;
    let mut per_key: HashMap<String, usize> = HashMap::new();
    let mut taken_over = 0;
    for call in listed["items"].as_array().unwrap() {
        let key = call["spec"]["sideEffects"]["idempotencyKey"]
            .as_str()
            .unwrap();
        *per_key.entry(key.to_owned()).or_default() += 1;
        let phase = call["status"]["phase"].as_str().unwrap();
        assert!(
            matches!(phase, "Succeeded" | "Unknown"),
            "{key} left {phase}: {call}"
        );
        if phase == "Unknown" || call["status"]["attempts"].as_u64() > Some(1) {
            taken_over += 1;
        }
    }
    assert!(
        taken_over > 0,
        "the killed replica had no call in flight to take over"
    );
    for key in &acknowledged {
        assert_eq!(per_key.get(key), Some(&1), "{key} is stored once");
    }
    // No write ran twice; a read may have been re-run by the survivor.
    let mut writes: HashMap<String, usize> = HashMap::new();
    for hit in webhook.recorded() {
        let key = hit["body"]["key"].as_str().unwrap().to_owned();
        let index: usize = key[1..].parse().unwrap();
        if index % 2 == 0 {
            *writes.entry(key).or_default() += 1;
        }
    }
    let repeated: Vec<_> = writes.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "writes ran twice: {repeated:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_decision_whose_replica_died_before_acting_is_carried_out_by_a_survivor() {
    let Some(store) = fresh_database("decided").await else {
        return;
    };
    let webhook = Webhook::start().await;
    let (survivor, mut doomed) = tokio::join!(replica(&store), replica(&store));
    survivor
        .create_tool(patient_tool(
            "deploy",
            &format!("{}/echo", webhook.base),
            json!({"level": "external_write", "requiresApproval": true}),
        ))
        .await;
    let (status, paused) = doomed
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/toolcalls?wait=false"),
            Some(json!({"spec": {"toolRef": {"name": "deploy"}, "input": {"v": 1}}})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{paused}");
    let name = paused["metadata"]["name"].as_str().unwrap().to_owned();
    let dead = paused["status"]["replica"].as_str().unwrap().to_owned();
    doomed.kill();

    // The doomed replica stored its decision and died before acting on it.
    let pg: Arc<dyn joch_store::Store> = Arc::new(
        joch_store::PostgresStore::connect(&store, Default::default())
            .await
            .unwrap(),
    );
    let mut approval: joch_core::Approval = pg.get_object(NS, &name).await.unwrap();
    approval.status.phase = joch_core::ApprovalPhase::Approved;
    approval.status.decision = Some("approve".to_owned());
    approval.status.decided_by = Some("dana".to_owned());
    approval.status.replica = Some(dead);
    pg.update_object(&mut approval, joch_store::Durability::Sync)
        .await
        .unwrap();

    // Once its lease lapses (3 s), the survivor takes over and runs the call.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let call = loop {
        let call = survivor.get_call(&name).await;
        if call["status"]["phase"] == "Succeeded" || tokio::time::Instant::now() > deadline {
            break call;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
    assert_eq!(call["spec"]["approval"]["approvedBy"], "dana", "{call}");
    assert_eq!(webhook.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_artifact_stored_by_one_replica_is_read_through_another() {
    let Some(store) = fresh_database("artifacts").await else {
        return;
    };
    let webhook = Webhook::start().await;
    // No --artifacts-dir, and no directory in common: the contents live in
    // the database.
    let (one, other) = tokio::join!(replica(&store), replica(&store));
    let mut tool = patient_tool(
        "report",
        &format!("{}/echo", webhook.base),
        json!({"level": "read_only"}),
    );
    tool["spec"]["inline"] = json!(false);
    one.create_tool(tool).await;
    let (status, call) = one
        .post_call(json!({"metadata": {"name": "big-report"},
            "spec": {"toolRef": {"name": "report"}, "executionRef": {"name": "run-a"},
                     "input": {"rows": ["alpha", "needle", "omega"]}}}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{call}");
    let id = call["status"]["output"]["artifact"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a handle: {call}"))
        .to_owned();

    let content = reqwest::get(format!(
        "{}/v1/namespaces/{NS}/artifacts/{id}/content",
        other.base
    ))
    .await
    .unwrap();
    assert_eq!(content.status(), StatusCode::OK);
    let bytes = content.bytes().await.unwrap();
    let read: Value = serde_json::from_slice(&bytes).expect("the stored JSON");
    assert_eq!(
        read,
        json!({"echo": {"rows": ["alpha", "needle", "omega"]}})
    );

    let (status, grep) = other
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/executions/run-a/artifacttools/artifact_grep"),
            Some(json!({"callId": "big-report", "pattern": "needle"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{grep}");
    assert_eq!(grep["status"]["output"]["matches"], 1, "{grep}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rate_limit_holds_across_replicas() {
    let Some(store) = fresh_database("ratelimit").await else {
        return;
    };
    let joch = replicas(&store).await;
    joch[0]
        .create_tool(json!({
            "metadata": {"name": "nothing"},
            "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
        }))
        .await;
    let limits = json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Namespace", "spec": {"rateLimits": [
        {"name": "all", "per": "namespace", "callsPerMinute": 3}
    ]}});
    let (status, body) = joch[1]
        .send(Method::PUT, &format!("/v1/namespaces/{NS}"), Some(limits))
        .await;
    assert!(status.is_success(), "{body}");
    // Each replica drops its cached settings when it hears of the change.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut answered = Vec::new();
    for n in 0..9 {
        let call = json!({"spec": {"toolRef": {"name": "nothing"}, "input": {"n": n}}});
        let (status, body) = joch[n % 3].post_call(call).await;
        answered.push(status);
        if status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(
                body["status"]["hookDecisions"][0]["policyId"],
                "ratelimit/all"
            );
        }
    }
    let ran = answered
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count();
    let limited = answered
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(
        (ran, limited),
        (3, 6),
        "one allowance of 3 for all three replicas: {answered:?}"
    );
}
