//! Artifacts: a large result handed back as a handle and read through the
//! forged artifact tools, its bytes intact after kill -9; range reads;
//! media from a webhook and from an upstream MCP server kept by reference.

use axum::http::header;
use axum::routing::post;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::harness::{Joch, NS, assert_error, rest_tool};
use crate::mcp::{PNG, UpstreamServer, apply, server, tool};

/// About 5 MiB of JSON lines; every 1000th is an error naming its number.
fn log_lines() -> String {
    let mut out = String::new();
    let mut n = 0;
    while out.len() < 5 * 1024 * 1024 {
        n += 1;
        let line = if n % 1000 == 0 {
            format!("{{\"n\":{n},\"level\":\"error\",\"msg\":\"needle-{n} disk full\"}}\n")
        } else {
            format!(
                "{{\"n\":{n},\"level\":\"info\",\"msg\":\"request served in {} ms, all fine\"}}\n",
                n % 97
            )
        };
        out.push_str(&line);
    }
    out
}

/// A webhook answering `/logs` with [`log_lines`] (NDJSON), `/small` with
/// a 2 KiB JSON object and `/png` with an image.
async fn webhook(lines: String) -> String {
    let small = json!({"items": (0..40).map(|i| json!({"id": i, "name": format!("item number {i}")})).collect::<Vec<_>>()});
    let app = axum::Router::new()
        .route(
            "/logs",
            post(move || {
                let lines = lines.clone();
                async move { ([(header::CONTENT_TYPE, "application/x-ndjson")], lines) }
            }),
        )
        .route("/small", post(move || async move { axum::Json(small) }))
        .route(
            "/png",
            post(|| async { ([(header::CONTENT_TYPE, "image/png")], PNG) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

/// A tool whose few megabytes of answer are given time on a busy machine.
fn patient(mut tool: Value) -> Value {
    tool["spec"]["backend"]["endpoint"]["timeoutMs"] = json!(10_000);
    tool
}

fn with_spec(mut tool: Value, extra: Value) -> Value {
    let spec = tool["spec"].as_object_mut().unwrap();
    spec.extend(extra.as_object().cloned().unwrap_or_default());
    tool
}

async fn call_in(joch: &Joch, name: &str, tool: &str, execution: &str) -> Value {
    let (status, call) = joch
        .post_call(json!({
            "metadata": {"name": name},
            "spec": {"toolRef": {"name": tool}, "executionRef": {"name": execution}, "input": {}}
        }))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{call}");
    call
}

async fn artifact_tool(joch: &Joch, execution: &str, tool: &str, args: Value) -> Value {
    let (status, call) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/executions/{execution}/artifacttools/{tool}"),
            Some(args),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{call}");
    call
}

async fn offered(joch: &Joch, execution: &str) -> Vec<Value> {
    let (status, body) = joch
        .get(&format!(
            "/v1/namespaces/{NS}/executions/{execution}/artifacttools"
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["tools"].as_array().cloned().unwrap_or_default()
}

async fn content(joch: &Joch, id: &str, range: Option<&str>) -> reqwest::Response {
    let mut request = joch.http.get(format!(
        "{}/v1/namespaces/{NS}/artifacts/{id}/content",
        joch.base
    ));
    if let Some(range) = range {
        request = request.header(header::RANGE, range);
    }
    request.send().await.unwrap()
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test]
async fn a_large_result_is_a_handle_that_artifact_tools_read_and_that_survives_kill_9() {
    let lines = log_lines();
    let base = webhook(lines.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("joch.db");
    let mut joch = Joch::builder().db(&db).start().await;
    let logs = rest_tool(
        "logs.fetch",
        &format!("{base}/logs"),
        json!({"level": "read_only"}),
    );
    joch.create_tool(with_spec(patient(logs), json!({"inline": false})))
        .await;

    let call = call_in(&joch, "call-logs", "logs.fetch", "run-1").await;
    assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
    let handle = &call["status"]["output"]["artifact"];
    let id = handle["id"].as_str().unwrap().to_owned();
    assert_eq!(handle["size"], lines.len());
    assert_eq!(handle["callId"], "call-logs");
    assert_eq!(handle["mediaType"], "application/x-ndjson");
    assert!(handle["preview"].as_str().unwrap().starts_with("{\"n\":1,"));
    // The record keeps the handle, not the 5 MiB.
    let record = joch.get_call("call-logs").await;
    assert!(record.to_string().len() < 4096, "record too big");
    assert_eq!(record["status"]["artifacts"][0]["reason"], "tool");
    assert_eq!(record["status"]["artifacts"][0]["role"], "handle");

    let tools = offered(&joch, "run-1").await;
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "artifact_head",
            "artifact_tail",
            "artifact_grep",
            "artifact_slice",
            "artifact_jq"
        ]
    );
    let grep = artifact_tool(
        &joch,
        "run-1",
        "artifact_grep",
        json!({"callId": "call-logs", "pattern": "needle-(1000|2000)\\b", "context": 1}),
    )
    .await;
    assert_eq!(grep["status"]["phase"], "Succeeded", "{grep}");
    assert_eq!(grep["spec"]["fromArtifactTool"], true);
    let name = grep["metadata"]["name"].as_str().unwrap();
    assert_eq!(crate::audit::chained(&joch, name).await, ["Succeeded"]);
    let found = &grep["status"]["output"];
    assert_eq!(found["matches"], 2);
    let text = found["text"].as_str().unwrap();
    assert!(
        text.contains("1000:{\"n\":1000,\"level\":\"error\",\"msg\":\"needle-1000 disk full\"}")
    );
    assert!(text.contains("999-{\"n\":999,") && text.contains("2001-{\"n\":2001,"));

    // The grep call is not offered: its callId enum still names only the handle.
    let tools = offered(&joch, "run-1").await;
    assert_eq!(
        tools[2]["inputSchema"]["properties"]["callId"]["enum"],
        json!(["call-logs"])
    );
    let grep_id = grep["metadata"]["name"].as_str().unwrap();
    let stacked = artifact_tool(
        &joch,
        "run-1",
        "artifact_grep",
        json!({"callId": grep_id, "pattern": "needle"}),
    )
    .await;
    assert_eq!(stacked["status"]["phase"], "Failed");
    assert_eq!(
        stacked["status"]["error"]["code"],
        "artifact_call_not_visible"
    );
    let recorded = joch
        .get_call(stacked["metadata"]["name"].as_str().unwrap())
        .await;
    assert_eq!(recorded["spec"]["fromArtifactTool"], true);
    assert_eq!(recorded["status"]["phase"], "Failed");

    // The same tools through the normal toolcalls POST.
    let (status, tail) = joch
        .post_call(
            json!({"spec": {"toolRef": {"name": "artifact_jq"}, "executionRef": {"name": "run-1"},
            "input": {"callId": "call-logs", "path": ".msg"}}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{tail}");
    assert_eq!(tail["status"]["output"]["truncated"], true);
    assert_eq!(
        tail["status"]["output"]["json"][0],
        "request served in 1 ms, all fine"
    );

    joch.kill();
    let joch = Joch::builder().db(&db).start().await;
    let response = content(&joch, &id, None).await;
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.bytes().await.unwrap();
    assert_eq!(sha256(&bytes), id);
    assert_eq!(bytes.len(), lines.len());
    let (status, meta) = joch
        .get(&format!("/v1/namespaces/{NS}/artifacts/{id}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{meta}");
    assert_eq!(meta["spec"]["producedBy"]["name"], "call-logs");
}

#[tokio::test]
async fn an_artifact_tool_called_in_a_batch_reads_the_handle_in_its_place() {
    let base = webhook(log_lines()).await;
    let joch = Joch::start().await;
    let logs = rest_tool(
        "logs.fetch",
        &format!("{base}/logs"),
        json!({"level": "read_only"}),
    );
    joch.create_tool(with_spec(patient(logs), json!({"inline": false})))
        .await;
    let call = call_in(&joch, "call-logs", "logs.fetch", "run-b").await;
    assert_eq!(call["status"]["phase"], "Succeeded", "{call}");

    // The model's next turn: grep the handle, and fetch again.
    let grep = json!({"spec": {"toolRef": {"name": "artifact_grep"},
        "input": {"callId": "call-logs", "pattern": "needle-1000\\b"}}});
    let fetch = json!({"spec": {"toolRef": {"name": "logs.fetch"}, "input": {}}});
    let (status, batch) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/executions/run-b/batches"),
            Some(json!({"calls": [grep, fetch]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{batch}");
    let read = &batch["calls"][0];
    assert_eq!(read["status"]["phase"], "Succeeded", "{read}");
    assert_eq!(read["spec"]["fromArtifactTool"], true);
    assert_eq!(read["spec"]["executionRef"]["name"], "run-b");
    assert_eq!(read["status"]["output"]["matches"], 1, "{read}");
    assert_eq!(
        read["metadata"]["labels"]["joch.dev/batch"],
        batch["batch"].to_string()
    );
    assert_eq!(batch["calls"][1]["status"]["phase"], "Succeeded");
    let stored = joch
        .get_call(read["metadata"]["name"].as_str().unwrap())
        .await;
    assert_eq!(stored["status"]["output"]["matches"], 1, "{stored}");
}

#[tokio::test]
async fn max_inline_bytes_and_policies_turn_inlining_off_and_say_why() {
    let base = webhook(String::new()).await;
    let joch = Joch::start().await;
    let (status, body) = joch
        .send(
            Method::PUT,
            &format!("/v1/namespaces/{NS}"),
            Some(json!({"spec": {"maxInlineBytes": 1000}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for name in ["items", "items.policed"] {
        let tool = rest_tool(
            name,
            &format!("{base}/small"),
            json!({"level": "read_only"}),
        );
        joch.create_tool(tool).await;
    }
    let capped = call_in(&joch, "call-capped", "items", "run-2").await;
    assert_eq!(capped["status"]["artifacts"][0]["reason"], "maxInlineBytes");
    assert!(capped["status"]["output"]["artifact"]["id"].is_string());

    let (status, body) = joch
        .send(
            Method::PUT,
            &format!("/v1/namespaces/{NS}/tools/items"),
            Some(with_spec(
                rest_tool(
                    "items",
                    &format!("{base}/small"),
                    json!({"level": "read_only"}),
                ),
                json!({"maxInlineBytes": 1_000_000}),
            )),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let inline = call_in(&joch, "call-inline", "items", "run-2").await;
    assert_eq!(inline["status"]["output"]["items"][0]["id"], 0, "{inline}");
    assert!(inline["status"].get("artifacts").is_none());

    let policy = json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Policy", "metadata": {"name": "handles"},
        "spec": {"version": "1", "rules": [{"when": {"tool.name": "items.policed"}, "action": {"modify": {"inline": false}}}]}});
    let (status, body) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/policies"),
            Some(policy),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let policed = call_in(&joch, "call-policed", "items.policed", "run-2").await;
    assert_eq!(policed["spec"]["inline"], false);
    assert_eq!(policed["status"]["artifacts"][0]["reason"], "policy");
}

#[tokio::test]
async fn content_is_served_by_range() {
    let base = webhook(String::new()).await;
    let joch = Joch::start().await;
    let tool = rest_tool(
        "items",
        &format!("{base}/small"),
        json!({"level": "read_only"}),
    );
    joch.create_tool(with_spec(tool, json!({"inline": false})))
        .await;
    let call = call_in(&joch, "call-items", "items", "run-3").await;
    let id = call["status"]["output"]["artifact"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let whole = content(&joch, &id, None).await.bytes().await.unwrap();
    let size = whole.len();

    for (range, from, to) in [
        ("bytes=0-9", 0, 9),
        ("bytes=10-", 10, size - 1),
        ("bytes=-5", size - 5, size - 1),
    ] {
        let response = content(&joch, &id, Some(range)).await;
        assert_eq!(response.status(), StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(
            response.headers()[header::CONTENT_RANGE],
            format!("bytes {from}-{to}/{size}").as_str()
        );
        assert_eq!(
            response.bytes().await.unwrap(),
            whole.slice(from..=to),
            "{range}"
        );
    }
    for bad in [
        format!("bytes={size}-"),
        "bytes=9-3".to_owned(),
        "lines=1-2".to_owned(),
    ] {
        let response = content(&joch, &id, Some(&bad)).await;
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_error(
            &(status, body),
            StatusCode::RANGE_NOT_SATISFIABLE,
            "range_not_satisfiable",
        );
    }
    let missing = joch
        .get(&format!("/v1/namespaces/{NS}/artifacts/{}", "0".repeat(64)))
        .await;
    assert_error(&missing, StatusCode::NOT_FOUND, "artifact_not_found");
    let traversal = joch
        .get(&format!("/v1/namespaces/{NS}/artifacts/..%2F..%2Fjoch.db"))
        .await;
    assert_error(&traversal, StatusCode::NOT_FOUND, "artifact_not_found");
}

/// Checks a media result: answered as an image with its bytes, recorded
/// with type, size and hash only, and stored intact.
async fn assert_media(joch: &Joch, call: &Value) {
    assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
    let block = &call["status"]["output"]["content"][0];
    assert_eq!(block["type"], "image");
    assert_eq!(block["mimeType"], "image/png");
    assert_eq!(BASE64.decode(block["data"].as_str().unwrap()).unwrap(), PNG);
    let record = joch
        .get_call(call["metadata"]["name"].as_str().unwrap())
        .await;
    let kept = &record["status"]["artifacts"][0];
    assert_eq!(kept["role"], "media");
    assert_eq!(kept["mediaType"], "image/png");
    assert_eq!(kept["size"], PNG.len());
    assert_eq!(kept["id"], sha256(PNG));
    let recorded = &record["status"]["output"]["content"][0];
    assert!(recorded.get("data").is_none(), "{record}");
    assert_eq!(recorded["artifact"]["sha256"], sha256(PNG));
    let bytes = content(joch, kept["id"].as_str().unwrap(), None)
        .await
        .bytes()
        .await
        .unwrap();
    assert_eq!(bytes.as_ref(), PNG);
}

#[tokio::test]
async fn media_from_a_webhook_or_an_mcp_server_is_kept_by_reference() {
    let base = webhook(String::new()).await;
    let upstream = UpstreamServer::start(vec![tool("snapshot", None)]).await;
    let joch = Joch::start().await;
    joch.create_tool(rest_tool(
        "camera",
        &format!("{base}/png"),
        json!({"level": "read_only"}),
    ))
    .await;
    let (_, from_webhook) = joch.call("camera", json!({})).await;
    assert_media(&joch, &from_webhook).await;

    apply(&joch, server("screens", &upstream.url, json!({}))).await;
    let (_, from_mcp) = joch.call("screens.snapshot", json!({})).await;
    assert_media(&joch, &from_mcp).await;
}
