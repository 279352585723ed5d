//! The router in-process: requests go through `router(engine, config)` with
//! tower's `oneshot`, on an engine over a SQLite file, with no socket and
//! no server process. What the handlers map, errors above all.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use joch_backends::NoopBackend;
use joch_core::ToolBackend;
use joch_engine::policies::StandardPolicyEngine;
use joch_engine::{Engine, EngineConfig};
use joch_store::SqliteStore;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::{ServerConfig, router};

const TOOLS: &str = "/v1/namespaces/t/tools";
const CALLS: &str = "/v1/namespaces/t/toolcalls";

/// The router over a fresh engine; the engine's file lives as long as it.
struct App {
    router: Router,
    _dir: tempfile::TempDir,
}

async fn app(config: ServerConfig) -> App {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("joch.db")).expect("store");
    let backends: Vec<Arc<dyn ToolBackend>> = vec![Arc::new(NoopBackend)];
    let policy = Arc::new(StandardPolicyEngine::default());
    let engine = Engine::new(Arc::new(store), backends, policy, EngineConfig::default());
    App {
        router: router(engine, config, axum::Router::new()),
        _dir: dir,
    }
}

impl App {
    async fn send(&self, method: Method, path: &str, body: Body) -> (StatusCode, Value) {
        self.send_typed(method, path, "application/json", body)
            .await
    }

    async fn send_typed(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Body,
    ) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(body)
            .expect("request");
        let response = self.router.clone().oneshot(request).await.expect("answer");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| panic!("not JSON ({status}): {}", String::from_utf8_lossy(&bytes)));
        (status, body)
    }

    async fn json(&self, method: Method, path: &str, body: &Value) -> (StatusCode, Value) {
        self.send(method, path, Body::from(body.to_string())).await
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(Method::GET, path, Body::empty()).await
    }
}

fn noop_tool(name: &str) -> Value {
    json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Tool", "metadata": {"name": name},
           "spec": {"description": "does nothing", "inputSchema": {"type": "object"},
                    "sideEffects": {"level": "read_only"}, "backend": {"type": "noop"}}})
}

#[track_caller]
fn assert_error(answer: &(StatusCode, Value), status: StatusCode, code: &str) {
    let (got, body) = answer;
    assert_eq!(
        (*got, body["code"].as_str()),
        (status, Some(code)),
        "{body}"
    );
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(body["details"].is_object(), "{body}");
}

#[tokio::test]
async fn every_client_mistake_is_a_structured_4xx() {
    let app = app(ServerConfig::default()).await;
    let created = app.json(Method::POST, TOOLS, &noop_tool("t")).await;
    assert_eq!(created.0, StatusCode::CREATED, "{}", created.1);
    let with = |change: &dyn Fn(&mut Value)| {
        let mut tool = noop_tool("u");
        change(&mut tool);
        tool.to_string()
    };
    let cases: Vec<(Method, String, String, StatusCode, &str)> = vec![
        (
            Method::POST,
            TOOLS.into(),
            "{not json".into(),
            StatusCode::BAD_REQUEST,
            "malformed_body",
        ),
        (
            Method::POST,
            TOOLS.into(),
            "[1, 2]".into(),
            StatusCode::BAD_REQUEST,
            "malformed_body",
        ),
        (
            Method::POST,
            TOOLS.into(),
            with(&|t| t["apiVersion"] = json!("joch.dev/v0")),
            StatusCode::BAD_REQUEST,
            "invalid_api_version",
        ),
        (
            Method::POST,
            TOOLS.into(),
            with(&|t| t["kind"] = json!("Policy")),
            StatusCode::BAD_REQUEST,
            "invalid_kind",
        ),
        (
            Method::POST,
            TOOLS.into(),
            with(&|t| t["metadata"]["name"] = json!("Bad Name")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        ),
        (
            Method::POST,
            TOOLS.into(),
            with(&|t| t["spec"]["unknownField"] = json!(1)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        ),
        (
            Method::POST,
            TOOLS.into(),
            noop_tool("t").to_string(),
            StatusCode::CONFLICT,
            "already_exists",
        ),
        (
            Method::PUT,
            format!("{TOOLS}/t"),
            with(&|t| {
                t["metadata"]["name"] = json!("t");
                t["metadata"]["resourceVersion"] = json!("7");
            }),
            StatusCode::CONFLICT,
            "conflict",
        ),
        (
            Method::GET,
            format!("{TOOLS}/missing"),
            String::new(),
            StatusCode::NOT_FOUND,
            "tool_not_found",
        ),
        (
            Method::POST,
            CALLS.into(),
            json!({"spec": {"toolRef": {"name": "nope"}}}).to_string(),
            StatusCode::NOT_FOUND,
            "tool_not_found",
        ),
        (
            Method::GET,
            format!("{CALLS}/missing"),
            String::new(),
            StatusCode::NOT_FOUND,
            "toolcall_not_found",
        ),
        (
            Method::GET,
            format!("{CALLS}?limit=abc"),
            String::new(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{CALLS}?phase=Done"),
            String::new(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            "/v1/namespaces/Bad_NS/tools".into(),
            String::new(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::DELETE,
            format!("{CALLS}/any"),
            String::new(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            Method::PATCH,
            TOOLS.into(),
            String::new(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            Method::GET,
            "/v2/whatever".into(),
            String::new(),
            StatusCode::NOT_FOUND,
            "route_not_found",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let answer = app.send(method.clone(), &path, Body::from(body)).await;
        assert_error(&answer, status, code);
    }
    let (_, tools) = app.get(TOOLS).await;
    assert_eq!(tools["items"].as_array().map(Vec::len), Some(1), "{tools}");
}

#[tokio::test]
async fn a_body_over_the_configured_limit_is_413() {
    let config = ServerConfig {
        max_body_bytes: 1024,
        ..ServerConfig::default()
    };
    let app = app(config).await;
    let mut tool = noop_tool("big");
    tool["spec"]["description"] = json!("x".repeat(2048));
    let answer = app.json(Method::POST, TOOLS, &tool).await;
    assert_error(&answer, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
}

#[tokio::test]
async fn a_tool_is_created_from_yaml_read_listed_replaced_and_deleted() {
    let app = app(ServerConfig::default()).await;
    let yaml = "kind: Tool\nmetadata: {name: t, labels: {team: a}}\nspec:\n  inputSchema: {type: object}\n  backend: {type: noop}\n";
    let (status, created) = app
        .send_typed(Method::POST, TOOLS, "application/yaml", Body::from(yaml))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["metadata"]["namespace"], "t");
    assert_eq!(created["metadata"]["resourceVersion"], "1");

    let (status, read) = app.get(&format!("{TOOLS}/t")).await;
    assert_eq!((status, &read), (StatusCode::OK, &created));
    let (_, listed) = app.get(&format!("{TOOLS}?labelSelector=team%3Da")).await;
    assert_eq!(listed["items"][0]["metadata"]["name"], "t", "{listed}");
    let (_, none) = app.get(&format!("{TOOLS}?labelSelector=team%3Db")).await;
    assert_eq!(none["items"], json!([]), "{none}");

    let mut changed = noop_tool("t");
    changed["spec"]["description"] = json!("changed");
    let (status, replaced) = app.json(Method::PUT, &format!("{TOOLS}/t"), &changed).await;
    assert_eq!(status, StatusCode::OK, "{replaced}");
    assert_eq!(replaced["metadata"]["resourceVersion"], "2");

    let (status, _) = app
        .send(Method::DELETE, &format!("{TOOLS}/t"), Body::empty())
        .await;
    assert!(status.is_success(), "{status}");
    assert_error(
        &app.get(&format!("{TOOLS}/t")).await,
        StatusCode::NOT_FOUND,
        "tool_not_found",
    );
}

#[tokio::test]
async fn a_call_is_answered_settled_and_listed_by_tool_and_phase() {
    let app = app(ServerConfig::default()).await;
    app.json(Method::POST, TOOLS, &noop_tool("t")).await;
    let call = json!({"metadata": {"name": "call_1"},
                      "spec": {"toolRef": {"name": "t"}, "input": "{\"a\": 1}"}});
    let (status, record) = app.json(Method::POST, CALLS, &call).await;
    assert_eq!(status, StatusCode::CREATED, "{record}");
    assert_eq!(record["status"]["phase"], "Succeeded", "{record}");
    assert_eq!(
        record["spec"]["input"],
        json!({"a": 1}),
        "a JSON string is recorded as its object"
    );
    assert!(record["status"]["checksum"].is_string(), "{record}");

    let (_, listed) = app.get(&format!("{CALLS}?tool=t&phase=Succeeded")).await;
    assert_eq!(listed["items"][0]["metadata"]["name"], "call_1", "{listed}");
    let (_, failed) = app.get(&format!("{CALLS}?phase=Failed")).await;
    assert_eq!(failed["items"], json!([]), "{failed}");
}

#[tokio::test]
async fn health_and_the_openapi_document_answer() {
    let app = app(ServerConfig::default()).await;
    assert_eq!(app.get("/healthz").await.0, StatusCode::OK);
    assert_eq!(app.get("/readyz").await.0, StatusCode::OK);
    let (status, document) = app.get("/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        document["paths"][TOOLS.replace("/t/", "/{ns}/")].is_object(),
        "{}",
        document["paths"]
    );
}

#[tokio::test]
async fn a_manifests_typos_are_reported_together_each_at_its_exact_path() {
    let app = app(ServerConfig::default()).await;
    let tool = json!({
        "kind": "Tool",
        "metadata": {"name": "t", "lables": {"team": "a"}},
        "spec": {
            "inputSchema": {"type": "object"},
            "sideEfects": {"level": "read_only"},
            "backend": {"type": "rest", "endpoint": {"url": "http://127.0.0.1:9/x", "timeout_ms": 5}},
        },
    });
    let answer = app.json(Method::POST, TOOLS, &tool).await;
    assert_error(
        &answer,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_resource",
    );
    let mut fields: Vec<&str> = answer.1["details"]["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .map(|f| f["field"].as_str().expect("a path"))
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "metadata.lables",
            "spec.backend.endpoint.timeout_ms",
            "spec.sideEfects"
        ],
        "{}",
        answer.1
    );
    assert!(
        answer.1["message"].as_str().unwrap().contains("timeout_ms"),
        "{}",
        answer.1
    );
}

#[tokio::test]
async fn a_bad_query_parameter_is_named_in_the_details() {
    let app = app(ServerConfig::default()).await;
    for (query, parameter) in [
        ("phase=Done", "phase"),
        ("limit=0", "limit"),
        ("labelSelector=%3D%3D", "labelSelector"),
    ] {
        let answer = app.get(&format!("{CALLS}?{query}")).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
        assert_eq!(
            answer.1["details"]["parameter"], parameter,
            "{query}: {}",
            answer.1
        );
    }
    let answer = app.get("/v1/namespaces/Bad_NS/tools").await;
    assert_eq!(
        answer.1["details"]["parameter"], "namespace",
        "{}",
        answer.1
    );
}
