//! OpenTelemetry traces: joch exports an `execute_tool {tool}` span per call
//! over OTLP/HTTP to a receiver on loopback, child of the caller's
//! `traceparent`, with the GenAI attributes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use serde_json::{Value, json};

use crate::harness::{Joch, NS};

/// An OTLP/HTTP (JSON) receiver keeping every span it is sent.
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&spans);
        let app = Router::new().route(
            "/v1/traces",
            post(move |axum::Json(body): axum::Json<Value>| {
                let kept = Arc::clone(&kept);
                async move {
                    for resource in body["resourceSpans"].as_array().into_iter().flatten() {
                        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                            let spans = scope["spans"].as_array().cloned().unwrap_or_default();
                            kept.lock().unwrap().extend(spans);
                        }
                    }
                    axum::Json(json!({}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, spans }
    }

    async fn span_named(&self, name: &str) -> Value {
        for _ in 0..200 {
            if let Some(span) = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .find(|s| s["name"] == name)
            {
                return span.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "no span named {name:?}; got {:?}",
            self.spans.lock().unwrap()
        );
    }

    fn children_of(&self, span: &Value) -> Vec<Value> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s["parentSpanId"] == span["spanId"])
            .cloned()
            .collect()
    }
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

#[tokio::test]
async fn each_call_is_an_execute_tool_span_in_the_callers_trace() {
    let receiver = Receiver::start().await;
    let joch = Joch::builder()
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .start()
        .await;
    joch.create_tool(json!({
        "metadata": {"name": "nothing"},
        "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
    }))
    .await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let answer = joch
        .http
        .post(format!("{}/v1/namespaces/{NS}/toolcalls", joch.base))
        .header("traceparent", traceparent)
        .json(&json!({"metadata": {"name": "call-traced"}, "spec": {"toolRef": {"name": "nothing"}, "input": {"secret": "s3cr3t"}}}))
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success());

    let span = receiver.span_named("execute_tool nothing").await;
    assert_eq!(
        span["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736",
        "{span}"
    );
    assert_eq!(span["parentSpanId"], "00f067aa0ba902b7");
    let text = |key: &str| {
        attribute(&span, key)
            .and_then(|v| v["stringValue"].as_str())
            .map(str::to_owned)
    };
    assert_eq!(
        text("gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(text("gen_ai.tool.name").as_deref(), Some("nothing"));
    assert_eq!(text("gen_ai.tool.call.id").as_deref(), Some("call-traced"));
    assert_eq!(text("gen_ai.tool.type").as_deref(), Some("function"));
    assert_eq!(text("error.type"), None, "it succeeded");
    // Arguments stay out of traces unless asked for.
    assert!(!span.to_string().contains("s3cr3t"), "{span}");
    let children: Vec<String> = receiver
        .children_of(&span)
        .iter()
        .map(|s| s["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(children.contains(&"backend".to_owned()), "{children:?}");

    // A failed call names its error type.
    joch.post_call(json!({"metadata": {"name": "call-bad"}, "spec": {"toolRef": {"name": "nothing"}, "input": "not an object"}}))
        .await;
    for _ in 0..200 {
        let failed = receiver
            .spans
            .lock()
            .unwrap()
            .iter()
            .find(|s| {
                attribute(s, "gen_ai.tool.call.id").is_some_and(|v| v["stringValue"] == "call-bad")
            })
            .cloned();
        if let Some(failed) = failed {
            assert_eq!(
                attribute(&failed, "error.type").and_then(|v| v["stringValue"].as_str()),
                Some("invalid_arguments"),
                "{failed}"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no span for the failed call");
}
