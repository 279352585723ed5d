//! The webhook backend against real HTTP servers on loopback.

use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use joch_core::{Invocation, Tool, ToolBackend};
use serde_json::{Map, Value, json};

use super::{RestConfig, WebhookBackend};

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    format!("http://{addr}")
}

fn tool(url: &str, timeout_ms: u64) -> Tool {
    serde_json::from_value(json!({
        "metadata": {"name": "t"},
        "spec": {"backend": {"type": "rest", "endpoint": {"url": url, "timeoutMs": timeout_ms, "headers": {"x-team": "blue"}}}}
    }))
    .expect("tool")
}

async fn invoke(
    url: &str,
    timeout_ms: u64,
    config: RestConfig,
) -> Result<Value, joch_core::ToolFailure> {
    let tool = tool(url, timeout_ms);
    let mut args = Map::new();
    args.insert("q".into(), json!("hello"));
    let backend = WebhookBackend::new(config).expect("client");
    backend
        .invoke(Invocation {
            namespace: "ns",
            call_id: "call-1",
            tool: &tool,
            args: &args,
            checksum: "c",
            attempt: 1,
        })
        .await
}

fn app() -> Router {
    Router::new()
        .route(
            "/echo",
            post(|headers: HeaderMap, body: axum::Json<Value>| async move {
                let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                axum::Json(json!({"got": body.0, "team": h("x-team"), "call": h("joch-call-id"), "attempt": h("joch-attempt")}))
            }),
        )
        .route("/empty", post(|| async { StatusCode::NO_CONTENT }))
        .route("/teapot", post(|| async { (StatusCode::IM_A_TEAPOT, "short and stout") }))
        .route("/text", post(|| async { "plain words" }))
        .route("/big", post(|| async { "x".repeat(10_000) }))
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        )
}

#[tokio::test]
async fn a_2xx_json_answer_is_the_output() {
    let base = serve(app()).await;
    let out = invoke(&format!("{base}/echo"), 5_000, RestConfig::default())
        .await
        .expect("ok");
    assert_eq!(
        out,
        json!({"got": {"q": "hello"}, "team": "blue", "call": "call-1", "attempt": "1"})
    );
    let empty = invoke(&format!("{base}/empty"), 5_000, RestConfig::default())
        .await
        .expect("ok");
    assert_eq!(empty, Value::Null);
}

#[tokio::test]
async fn every_failure_has_its_code() {
    let base = serve(app()).await;
    let small = RestConfig {
        max_response_bytes: 1_000,
        ..RestConfig::default()
    };
    let cases = [
        (format!("{base}/teapot"), 5_000, "backend_http_status"),
        (format!("{base}/text"), 5_000, "backend_invalid_response"),
        (format!("{base}/slow"), 200, "backend_timeout"),
        (format!("{base}/big"), 5_000, "backend_response_too_large"),
        (
            "http://127.0.0.1:1/refused".to_owned(),
            5_000,
            "backend_unreachable",
        ),
    ];
    for (url, timeout_ms, code) in cases {
        let err = invoke(&url, timeout_ms, small.clone())
            .await
            .expect_err(&url);
        assert_eq!(err.code, code, "{url}: {}", err.message);
    }
    let teapot = invoke(&format!("{base}/teapot"), 5_000, RestConfig::default())
        .await
        .expect_err("418");
    assert_eq!(
        teapot.details,
        Some(json!({"status": 418, "body": "short and stout"}))
    );
}
