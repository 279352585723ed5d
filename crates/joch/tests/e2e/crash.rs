//! `kill -9` in the middle of a load: no call acknowledged to a client is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::harness::{NS, Webhook, rest_tool};

const CLIENTS: usize = 32;
const ACKS_BEFORE_KILL: usize = 600;

crate::storetest!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    kill_9_under_load_loses_no_acknowledged_call,
    |store| {
        let webhook = Webhook::start().await;
        let mut joch = store.joch().start().await;
        joch.create_tool(rest_tool(
            "write",
            &format!("{}/echo", webhook.base),
            json!({"level": "external_write"}),
        ))
        .await;
        joch.create_tool(rest_tool(
            "read",
            &format!("{}/echo", webhook.base),
            json!({"level": "read_only"}),
        ))
        .await;

        let acknowledged: Arc<Mutex<Vec<Value>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let url = format!("{}/v1/namespaces/{NS}/toolcalls", joch.base);
        let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (acknowledged, stop, url) = (Arc::clone(&acknowledged), Arc::clone(&stop), url.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let tool = if i % 2 == 0 { "write" } else { "read" };
                    let call = json!({"spec": {"toolRef": {"name": tool}, "input": {"client": c, "i": i}}});
                    // Once the server dies, requests fail: those were never acknowledged.
                    let Ok(response) = http.post(&url).json(&call).send().await else { continue };
                    if response.status() != reqwest::StatusCode::CREATED {
                        continue;
                    }
                    if let Ok(record) = response.json::<Value>().await {
                        acknowledged.lock().await.push(record);
                    }
                }
            })
        })
        .collect();

        while acknowledged.lock().await.len() < ACKS_BEFORE_KILL {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        joch.kill();
        stop.store(true, Ordering::Relaxed);
        for client in clients {
            client.await.unwrap();
        }

        let joch = store.joch().start().await;
        let acknowledged = acknowledged.lock().await;
        assert!(acknowledged.len() >= ACKS_BEFORE_KILL);
        for answer in acknowledged.iter() {
            let stored = joch
                .get_call(answer["metadata"]["name"].as_str().unwrap())
                .await;
            assert_eq!(
                &stored, answer,
                "an acknowledged call must read back exactly as acknowledged"
            );
        }
        println!(
            "{} acknowledged calls all survived kill -9",
            acknowledged.len()
        );
    }
);
