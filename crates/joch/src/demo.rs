//! `joch serve --demo`: a self-contained tour. joch serves a few toy
//! webhooks under `/demo` and applies the example tools, whose URLs point at
//! them, so a first `curl` works with nothing else running.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use axum::routing::post;
use axum::{Json, Router};
use joch_core::{Endpoint, Policy, Tool};
use joch_engine::{Configurable, Engine, EngineError};
use serde_json::{Value, json};

use crate::apply::{parse_documents, plural_of};

/// The manifests in `examples/`, built into the binary so `--demo` works from any directory.
const EXAMPLES: &[(&str, &str)] = &[
    ("echo.yaml", include_str!("../../../examples/echo.yaml")),
    (
        "zendesk-create-ticket.yaml",
        include_str!("../../../examples/zendesk-create-ticket.yaml"),
    ),
    (
        "save-meal.json",
        include_str!("../../../examples/save-meal.json"),
    ),
    (
        "endpoint-meal-log.yaml",
        include_str!("../../../examples/endpoint-meal-log.yaml"),
    ),
    (
        "save-meal-actions.json",
        include_str!("../../../examples/save-meal-actions.json"),
    ),
    (
        "policy-support-guardrails.yaml",
        include_str!("../../../examples/policy-support-guardrails.yaml"),
    ),
];

/// Where the example manifests say the demo webhooks are.
const EXAMPLE_ORIGIN: &str = "http://127.0.0.1:7070";

pub fn routes() -> Router {
    static NEXT_TICKET: AtomicU64 = AtomicU64::new(77_123);
    Router::new()
        .route("/demo/echo", post(|Json(body): Json<Value>| async move { Json(json!({"echo": body})) }))
        .route(
            "/demo/tickets",
            post(|| async {
                let id = NEXT_TICKET.fetch_add(1, Ordering::Relaxed);
                Json(json!({"ticketId": id, "ticketUrl": format!("https://example.zendesk.com/tickets/{id}")}))
            }),
        )
        .route("/demo/meals", post(|Json(body): Json<Value>| async move { Json(json!({"logged": true, "meal": body})) }))
}

/// Creates (or replaces) the example tools in namespace `default`, pointing
/// their URLs at this server.
pub async fn apply_examples(engine: &Engine, addr: SocketAddr) -> anyhow::Result<()> {
    let origin = format!("http://{addr}");
    for (file, text) in EXAMPLES {
        for doc in parse_documents(&text.replace(EXAMPLE_ORIGIN, &origin))
            .with_context(|| format!("examples/{file}"))?
        {
            let doc = <Tool as joch_core::Object>::upgrade(doc);
            let name = match plural_of(&doc)? {
                "tools" => apply::<Tool>(engine, doc).await,
                "policies" => apply::<Policy>(engine, doc).await,
                "endpoints" => apply::<Endpoint>(engine, doc).await,
                _ => continue,
            }
            .with_context(|| format!("applying examples/{file}"))?;
            println!("demo: {name} ready");
        }
    }
    println!(
        "demo: try  curl -s -X POST {origin}/v1/namespaces/default/toolcalls -H 'content-type: application/json' \
         -d '{{\"spec\":{{\"toolRef\":{{\"name\":\"zendesk.create_ticket\"}},\"input\":{{\"subject\":\"Refund for order 12345\",\"body\":\"Never arrived\",\"priority\":\"high\"}}}}}}'"
    );
    Ok(())
}

/// Creates the resource in namespace `default`, or replaces it; returns `kind/name`.
async fn apply<T: Configurable>(engine: &Engine, doc: Value) -> anyhow::Result<String> {
    let object: T = serde_json::from_value(doc)?;
    let name = object.metadata().name.clone();
    // The operator applies the examples.
    let operator = joch_engine::Principal::local();
    match engine
        .resources()
        .create(&operator, "default", object.clone())
        .await
    {
        Err(EngineError::AlreadyExists { .. }) => engine
            .resources()
            .replace(&operator, "default", &name, object)
            .await
            .map(drop),
        other => other.map(drop),
    }?;
    Ok(format!("{}/{name}", T::KIND.to_lowercase()))
}
