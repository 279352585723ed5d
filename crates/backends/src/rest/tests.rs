//! The webhook backend against real HTTP servers on loopback.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    invoke_with_key(url, timeout_ms, config, Some("key-1")).await
}

async fn invoke_with_key(
    url: &str,
    timeout_ms: u64,
    config: RestConfig,
    idempotency_key: Option<&str>,
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
            idempotency_key,
            actions: None,
            mcp_server: None,
            chunks: None,
            client: None,
            upstream_user: None,
            input: None,
        })
        .await
}

fn app(hits: Arc<AtomicUsize>) -> Router {
    Router::new()
        .route(
            "/echo",
            post(|headers: HeaderMap, body: axum::Json<Value>| async move {
                let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                axum::Json(json!({"got": body.0, "team": h("x-team"), "call": h("joch-call-id"), "attempt": h("joch-attempt"), "key": h("idempotency-key")}))
            }),
        )
        .route("/empty", post(|| async { StatusCode::NO_CONTENT }))
        .route(
            "/flaky",
            post(move || {
                let hits = Arc::clone(&hits);
                async move {
                    // The first request hangs past the client's timeout; later ones answer.
                    if hits.fetch_add(1, Ordering::SeqCst) == 0 {
                        tokio::time::sleep(Duration::from_secs(2)).await;
                    }
                    axum::Json(json!({"ok": true}))
                }
            }),
        )
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
    let base = serve(app(Arc::default())).await;
    let out = invoke(&format!("{base}/echo"), 5_000, RestConfig::default())
        .await
        .expect("ok");
    assert_eq!(
        out,
        json!({"got": {"q": "hello"}, "team": "blue", "call": "call-1", "attempt": "1", "key": "key-1"})
    );
    let empty = invoke(&format!("{base}/empty"), 5_000, RestConfig::default())
        .await
        .expect("ok");
    assert_eq!(empty, Value::Null);
}

#[tokio::test]
async fn every_failure_has_its_code() {
    let base = serve(app(Arc::default())).await;
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

#[tokio::test]
async fn transport_errors_are_retried_only_when_a_repeat_is_safe() {
    let fast = RestConfig {
        retry_backoff: Duration::from_millis(1),
        ..RestConfig::default()
    };

    let hits = Arc::new(AtomicUsize::new(0));
    let base = serve(app(Arc::clone(&hits))).await;
    let keyed = invoke_with_key(&format!("{base}/flaky"), 300, fast.clone(), Some("k")).await;
    assert_eq!(keyed.expect("retried with its key"), json!({"ok": true}));
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    let hits = Arc::new(AtomicUsize::new(0));
    let base = serve(app(Arc::clone(&hits))).await;
    let unkeyed = invoke_with_key(&format!("{base}/flaky"), 300, fast, None).await;
    assert_eq!(
        unkeyed
            .expect_err("a risky tool without a key is not retried")
            .code,
        "backend_timeout"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}
