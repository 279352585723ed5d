//! A webhook that streams JSON lines: each line is an `output_chunk` event
//! of the execution, visible while the call still runs, and the recorded
//! result is assembled from the same lines.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::response::Response;
use axum::routing::post;
use futures_util::stream;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::harness::{Joch, NS, rest_tool};

/// Serves `/stream`: two lines at once, the third only when `release` fires.
async fn streaming_webhook(release: oneshot::Receiver<()>) -> String {
    let release = Arc::new(Mutex::new(Some(release)));
    let app = axum::Router::new().route(
        "/stream",
        post(move || {
            let release = release.lock().unwrap().take();
            async move {
                let lines = stream::unfold((0, release), |(n, mut release)| async move {
                    let line = match n {
                        0 => "{\"step\": 1}\n",
                        1 => "{\"step\": 2}\n",
                        2 => {
                            if let Some(release) = release.take() {
                                let _ = release.await;
                            }
                            "{\"step\": 3, \"done\": true}\n"
                        }
                        _ => return None,
                    };
                    Some((Ok::<_, std::io::Error>(line), (n + 1, release)))
                });
                Response::builder()
                    .header("content-type", "application/x-ndjson")
                    .body(Body::from_stream(lines))
                    .unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test]
async fn streamed_lines_are_output_chunks_while_the_call_runs() {
    let (release, gate) = oneshot::channel();
    let webhook = streaming_webhook(gate).await;
    let joch = Joch::start().await;
    let mut tool = rest_tool(
        "log.tail",
        &format!("{webhook}/stream"),
        json!({"level": "read_only"}),
    );
    tool["spec"]["backend"]["endpoint"]["timeoutMs"] = json!(30_000);
    joch.create_tool(tool).await;

    let events_url = format!(
        "{}/v1/namespaces/{NS}/executions/tail-1/events?follow=true",
        joch.base
    );
    let mut follow = reqwest::Client::new().get(events_url).send().await.unwrap();
    let call = json!({"metadata": {"name": "tail-call"}, "spec": {
        "toolRef": {"name": "log.tail"}, "executionRef": {"name": "tail-1"}, "input": {}}});
    let running = tokio::spawn({
        let (http, base) = (joch.http.clone(), joch.base.clone());
        async move {
            let response = http
                .post(format!("{base}/v1/namespaces/{NS}/toolcalls"))
                .json(&call)
                .send()
                .await
                .unwrap();
            (response.status(), response.json::<Value>().await.unwrap())
        }
    });

    // The first chunks arrive while the webhook still holds its last line.
    let mut seen = String::new();
    while !seen.contains("event: output_chunk") {
        let chunk = follow
            .chunk()
            .await
            .unwrap()
            .expect("the stream stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(!running.is_finished(), "the call is still running");
    assert!(!seen.contains("tool_completed"), "{seen}");
    release.send(()).unwrap();
    let (status, settled) = running.await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{settled}");
    assert_eq!(settled["status"]["phase"], "Succeeded", "{settled}");
    let output = settled["status"]["output"].as_str().unwrap();
    assert_eq!(output.lines().count(), 3, "{output}");

    let (_, timeline) = joch
        .get(&format!("/v1/namespaces/{NS}/executions/tail-1/events"))
        .await;
    let events = timeline["items"].as_array().unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let completed = kinds.iter().position(|k| *k == "tool_completed").unwrap();
    let mut chunks = Vec::new();
    for (i, event) in events.iter().enumerate() {
        if event["type"] == "output_chunk" {
            assert!(
                i < completed,
                "chunks come before the completion: {kinds:?}"
            );
            assert_eq!(event["data"]["tool_call_id"], "tail-call");
            assert_eq!(event["data"]["index"], chunks.len());
            chunks.extend(event["data"]["chunks"].as_array().unwrap().iter().cloned());
        }
    }
    assert_eq!(
        chunks,
        [
            json!({"step": 1}),
            json!({"step": 2}),
            json!({"step": 3, "done": true})
        ]
    );
    let assembled: Vec<Value> = output
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(assembled, chunks, "the result holds what the chunks showed");
}
