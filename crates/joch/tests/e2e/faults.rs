//! Fault injection: clients with idempotency keys keep calling while the
//! server is killed with SIGKILL fifty times at random moments. No
//! acknowledged call may be lost or changed, and no non-idempotent call may
//! run twice.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::post;
use serde_json::{Value, json};

use crate::harness::{Joch, NS, rest_tool};

const KILLS: usize = 50;
const CLIENTS: usize = 8;

/// Executions per idempotency key, as the downstream system saw them.
type Ledger = Arc<Mutex<HashMap<String, usize>>>;

async fn start_ledger() -> (String, Ledger) {
    let ledger = Ledger::default();
    let seen = Arc::clone(&ledger);
    let app = Router::new().route(
        "/ledger",
        post(move |headers: HeaderMap| {
            let seen = Arc::clone(&seen);
            async move {
                let key = headers
                    .get("idempotency-key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
                    .to_owned();
                let n = {
                    let mut seen = seen.lock().unwrap();
                    let n = seen.entry(key.clone()).or_default();
                    *n += 1;
                    *n
                };
                // Widen the window in which a kill finds the call Running.
                tokio::time::sleep(Duration::from_millis(5)).await;
                axum::Json(json!({"key": key, "execution": n}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, ledger)
}

/// xorshift64: reproducible kill timings without a dependency.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// One acknowledged answer: the key, and the record the client was given.
struct Ack {
    key: String,
    record: Value,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_kills_lose_no_acknowledged_call_and_repeat_no_side_effect() {
    let (ledger_url, ledger) = start_ledger().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("joch.db");
    let mut joch = Joch::builder().db(&db).start().await;
    let url = format!("{ledger_url}/ledger");
    joch.create_tool(rest_tool("pay", &url, json!({"level": "financial"})))
        .await;
    joch.create_tool(rest_tool(
        "sync",
        &url,
        json!({"level": "external_write", "idempotent": true}),
    ))
    .await;

    let base = Arc::new(RwLock::new(joch.base.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(Mutex::new(Vec::<Ack>::new()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (base, stop, acks) = (Arc::clone(&base), Arc::clone(&stop), Arc::clone(&acks));
            tokio::spawn(async move {
                let http = reqwest::Client::builder()
                    .timeout(Duration::from_secs(10))
                    .build()
                    .unwrap();
                for j in 0.. {
                    let tool = if j % 2 == 0 { "pay" } else { "sync" };
                    let key = format!("{tool}-{c}-{j}");
                    let call = json!({"spec": {"toolRef": {"name": tool}, "input": {"key": key}}});
                    // Retry with the same key until acknowledged, as a real client would.
                    loop {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let url = format!("{}/v1/namespaces/{NS}/toolcalls", base.read().unwrap());
                        let sent = http
                            .post(&url)
                            .header("idempotency-key", &key)
                            .json(&call)
                            .send()
                            .await;
                        if let Ok(response) = sent {
                            if response.status().is_success() {
                                if let Ok(record) = response.json::<Value>().await {
                                    acks.lock().unwrap().push(Ack {
                                        key: key.clone(),
                                        record,
                                    });
                                    break;
                                }
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            })
        })
        .collect();

    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    for _ in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(20 + next(&mut seed) % 100)).await;
        joch.kill();
        joch = Joch::builder().db(&db).start().await;
        *base.write().unwrap() = joch.base.clone();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    // Let calls resumed by the last recovery settle.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let acks = std::mem::take(&mut *acks.lock().unwrap());
    let ledger = ledger.lock().unwrap().clone();
    let mut unknown = 0;
    let mut reruns = 0;
    for ack in acks.iter() {
        let name = ack.record["metadata"]["name"].as_str().unwrap();
        let stored = joch.get_call(name).await;
        assert_eq!(
            stored["status"], ack.record["status"],
            "acknowledged {} changed or was lost",
            ack.key
        );
        let executions = ledger.get(&ack.key).copied().unwrap_or(0);
        match stored["status"]["phase"].as_str() {
            Some("Succeeded") => {
                assert!(executions >= 1, "{}: succeeded without executing", ack.key)
            }
            Some("Unknown") => {
                assert_eq!(stored["status"]["error"]["code"], "interrupted");
                unknown += 1;
            }
            other => panic!("{}: unexpected phase {other:?}", ack.key),
        }
        if ack.key.starts_with("sync") && executions > 1 {
            reruns += 1;
        }
    }
    for (key, executions) in ledger.iter() {
        if key.starts_with("pay") {
            assert!(
                *executions <= 1,
                "non-idempotent {key} executed {executions} times"
            );
        }
    }
    let (_, all) = joch
        .get(&format!("/v1/namespaces/{NS}/toolcalls?limit=5000"))
        .await;
    let stuck: Vec<_> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| matches!(c["status"]["phase"].as_str(), Some("Pending" | "Running")))
        .map(|c| c["metadata"]["name"].clone())
        .collect();
    assert!(
        stuck.is_empty(),
        "calls left unsettled after recovery: {stuck:?}"
    );
    assert!(acks.len() > KILLS, "the load kept going between kills");
    println!(
        "fault injection: {KILLS} kills, {} acknowledged calls, {} executions downstream, {unknown} interrupted (Unknown), {reruns} idempotent re-runs, 0 repeated side effects",
        acks.len(),
        ledger.values().sum::<usize>()
    );
}
