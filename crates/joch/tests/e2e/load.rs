//! Many concurrent clients: every acknowledged call is recorded exactly once.

use std::collections::HashSet;
use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::json;

use crate::harness::{Joch, NS, Webhook, rest_tool};

const CALLS: usize = 10_000;
const CLIENTS: usize = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_calls_from_64_clients_are_ten_thousand_records() {
    let webhook = Webhook::start().await;
    let joch = Arc::new(Joch::start().await);
    // A risky tool: every call takes the slowest, twice-synced path.
    joch.create_tool(rest_tool(
        "write",
        &format!("{}/echo", webhook.base),
        json!({"level": "external_write"}),
    ))
    .await;

    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (joch, next) = (Arc::clone(&joch), Arc::clone(&next));
            tokio::spawn(async move {
                let mut ids = Vec::new();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= CALLS {
                        return ids;
                    }
                    let (status, call) = joch.call("write", json!({"i": i})).await;
                    assert_eq!(status, StatusCode::CREATED, "{call}");
                    assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
                    ids.push(call["metadata"]["name"].as_str().unwrap().to_owned());
                }
            })
        })
        .collect();
    let mut acknowledged = HashSet::new();
    for client in clients {
        acknowledged.extend(client.await.unwrap());
    }
    assert_eq!(acknowledged.len(), CALLS);

    let mut recorded = HashSet::new();
    let mut token: Option<String> = None;
    loop {
        let mut path = format!("/v1/namespaces/{NS}/toolcalls?phase=Succeeded&limit=5000");
        if let Some(t) = &token {
            path.push_str(&format!("&continue={t}"));
        }
        let (status, page) = joch.get(&path).await;
        assert_eq!(status, StatusCode::OK);
        for call in page["items"].as_array().unwrap() {
            assert!(
                recorded.insert(call["metadata"]["name"].as_str().unwrap().to_owned()),
                "listed twice"
            );
        }
        token = page["metadata"]["continue"].as_str().map(str::to_owned);
        if token.is_none() {
            break;
        }
    }
    assert_eq!(recorded, acknowledged);
    assert_eq!(webhook.hits(), CALLS);
}
