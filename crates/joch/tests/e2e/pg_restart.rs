//! PostgreSQL goes away under load and comes back (issue 37): two replicas
//! answer 503 while it is gone (`/readyz` too), reconnect by themselves,
//! and no acknowledged call is lost or run twice; a call in flight when it
//! went ends as the crash rules say (run, or `Unknown` if its side effect
//! may have run). The test restarts a cluster of its own
//! (`scripts/postgres restart`), so the other tests' server is left alone;
//! it runs where they run, when `JOCH_TEST_POSTGRES` is set.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use joch_store::testsuite::postgres::TestServer;
use reqwest::StatusCode;
use serde_json::json;

use crate::harness::{Joch, NS, Webhook};
use crate::replicas::{keyed, patient_tool, send_until_answered};

/// A replica whose lease outlives the outage: no replica takes over
/// another's calls (that is `replicas.rs`'s test), each finishes its own.
async fn replica(store: &str) -> Joch {
    Joch::builder()
        .postgres(store)
        .args(&["--lease-seconds", "30"])
        .start()
        .await
}

/// A throwaway cluster of `scripts/postgres`, stopped and deleted on drop.
struct Cluster {
    dir: PathBuf,
    url: String,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres")
}

impl Cluster {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("joch-pg-restart-{}", std::process::id()));
        let started = Command::new(script())
            .arg("start")
            .arg(&dir)
            .output()
            .expect("run scripts/postgres");
        assert!(
            started.status.success(),
            "{}",
            String::from_utf8_lossy(&started.stderr)
        );
        let exports = String::from_utf8_lossy(&started.stdout);
        let url = exports
            .lines()
            .find_map(|l| l.strip_prefix("export JOCH_TEST_POSTGRES='"))
            .and_then(|l| l.strip_suffix('\''))
            .expect("the cluster's URL")
            .to_owned();
        Self { dir, url }
    }

    /// Kills the server as a crash would, and starts it after `gone`.
    fn restart(&self, gone: Duration) -> std::process::Output {
        Command::new(script())
            .arg("restart")
            .arg(&self.dir)
            .arg(gone.as_secs().to_string())
            .output()
            .expect("run scripts/postgres restart")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.dir).output();
    }
}

async fn ready(base: &str) -> StatusCode {
    match reqwest::Client::new()
        .get(format!("{base}/readyz"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
    {
        Ok(response) => response.status(),
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_under_load_loses_nothing_and_repeats_nothing() {
    if TestServer::from_env("postgres_restarted_under_load").is_none() {
        return;
    }
    let cluster = Arc::new(tokio::task::spawn_blocking(Cluster::start).await.unwrap());
    let store = TestServer::new(&cluster.url)
        .fresh_database("restart")
        .await
        .unwrap();
    let webhook = Webhook::start().await;
    let (a, b) = tokio::join!(replica(&store), replica(&store));
    for (name, side_effects) in [
        ("ticket.create", json!({"level": "external_write"})),
        (
            "order.read",
            json!({"level": "read_only", "idempotent": true}),
        ),
    ] {
        let tool = patient_tool(name, &format!("{}/slow-record", webhook.base), side_effects);
        a.create_tool(tool).await;
    }
    let bases = Arc::new(vec![
        std::sync::RwLock::new(a.base.clone()),
        std::sync::RwLock::new(b.base.clone()),
    ]);
    let load: Vec<_> = (0..120)
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
                tokio::time::sleep(Duration::from_millis(25 * i as u64)).await;
                (key, send_until_answered(&bases, i, call).await)
            })
        })
        .collect();

    // Mid-load, the server dies and is gone for 2 s.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let restart = tokio::task::spawn_blocking({
        let cluster = Arc::clone(&cluster);
        move || cluster.restart(Duration::from_secs(2))
    });
    let mut refused = false;
    while !restart.is_finished() {
        refused |= ready(&a.base).await == StatusCode::SERVICE_UNAVAILABLE;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let restarted = restart.await.unwrap();
    assert!(
        restarted.status.success(),
        "{}",
        String::from_utf8_lossy(&restarted.stderr)
    );
    assert!(
        refused,
        "a replica said it was not ready while PostgreSQL was gone"
    );
    for joch in [&a, &b] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while ready(&joch.base).await != StatusCode::OK {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the replica reconnected"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    let mut acknowledged = Vec::new();
    for task in load {
        let (key, (status, call)) = task.await.unwrap();
        assert!(status.is_success(), "{key}: {status} {call}");
        acknowledged.push(key);
    }
    // Each acknowledged call is stored once and settled (none stuck); a
    // write whose outcome the outage hid is `Unknown`, never run again.
    let (_, listed) = a
        .get(&format!("/v1/namespaces/{NS}/toolcalls?limit=1000"))
        .await;
    let mut per_key: HashMap<String, usize> = HashMap::new();
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
    }
    for key in &acknowledged {
        assert_eq!(per_key.get(key), Some(&1), "{key} is stored once");
    }
    let mut writes: HashMap<String, usize> = HashMap::new();
    for hit in webhook.recorded() {
        let key = hit["body"]["key"].as_str().unwrap().to_owned();
        if key[1..].parse::<usize>().unwrap() % 2 == 0 {
            *writes.entry(key).or_default() += 1;
        }
    }
    let repeated: Vec<_> = writes.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "writes ran twice: {repeated:?}");
}
