//! The Rust library API: the embedded gateway drives the whole call path
//! in-process (allow, deny, approval, idempotency) against a real webhook,
//! and the remote gateway does the same through a running server.

use std::time::Duration;

use joch_core::Phase;
use joch_tools::{EmbeddedGateway, RemoteGateway, ToolCall, ToolExecutor};
use serde_json::json;

use crate::harness::{Joch, NS, Webhook, rest_tool};

fn policy() -> serde_json::Value {
    json!({
        "apiVersion": "joch.dev/v1alpha1", "kind": "Policy",
        "metadata": {"name": "orders"},
        "spec": {"version": "3", "rules": [
            {"when": {"input.order": "blocked"}, "action": {"deny": {"reason": "that order is on hold"}}},
            {"when": {"input.order": "big"}, "require": {"approval": "human"}}
        ]}
    })
}

fn order(id: &str, call_id: &str) -> ToolCall {
    ToolCall::new("order.ship")
        .with_param("order", id)
        .with_tool_call_id(call_id)
}

#[tokio::test]
async fn the_embedded_gateway_allows_denies_waits_for_approval_and_runs_once() {
    let webhook = Webhook::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("agent.db");
    let gateway = EmbeddedGateway::open(&db, NS)
        .await
        .unwrap()
        .with_agent("rust-agent")
        .with_execution("run-1");
    gateway
        .apply_manifest(rest_tool(
            "order.ship",
            &format!("{}/record", webhook.base),
            json!({"level": "external_write"}),
        ))
        .await
        .unwrap();
    gateway.apply_manifest(policy()).await.unwrap();
    let tools = gateway.tool_definitions().await.unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "order.ship");

    let shipped = gateway
        .execute_tool_call(&order("o-1", "call_1"))
        .await
        .unwrap();
    assert_eq!(shipped.phase, Phase::Succeeded, "{shipped:?}");
    assert_eq!(shipped.output, Some(json!({"stored": 1})));
    let retried = gateway
        .execute_tool_call(&order("o-1", "call_1"))
        .await
        .unwrap();
    assert!(retried.replayed);
    assert_eq!(retried.record, shipped.record);

    let denied = gateway
        .execute_tool_call(&order("blocked", "call_2"))
        .await
        .unwrap();
    assert_eq!(denied.phase, Phase::Denied);
    assert_eq!(denied.error.unwrap().message, "that order is on hold");

    let waiting = tokio::spawn({
        let gateway = gateway.clone();
        async move { gateway.execute_tool_call(&order("big", "call_3")).await }
    });
    let approval = loop {
        if let Some(approval) = gateway.pending_approvals().await.unwrap().pop() {
            break approval;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!waiting.is_finished(), "the call waits for a person");
    assert_eq!(
        webhook.recorded().len(),
        1,
        "nothing ran before the approval"
    );
    gateway
        .approve(&approval.metadata.name, "alice")
        .await
        .unwrap();
    let approved = waiting.await.unwrap().unwrap();
    assert_eq!(approved.phase, Phase::Succeeded, "{approved:?}");
    assert_eq!(
        webhook.recorded().len(),
        2,
        "o-1 once, and the approved one"
    );

    // Reopened, the ledger still holds the calls, and a retry still runs nothing.
    let record = approved.record.clone();
    drop(gateway);
    let reopened = EmbeddedGateway::open(&db, NS).await.unwrap();
    let again = reopened
        .execute_tool_call(&order("big", "call_3"))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.record, record);
    let stored = reopened
        .engine()
        .calls()
        .get(&joch_engine::Principal::local(), NS, &record)
        .await
        .unwrap();
    assert_eq!(stored.spec.agent_ref.unwrap().name, "rust-agent");
    assert_eq!(webhook.recorded().len(), 2);
}

#[tokio::test]
async fn the_remote_gateway_speaks_to_a_server_with_the_same_trait() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    joch.create_tool(rest_tool(
        "order.ship",
        &format!("{}/record", webhook.base),
        json!({"level": "external_write"}),
    ))
    .await;
    let gateway: Box<dyn ToolExecutor> = Box::new(RemoteGateway::new(&joch.base, NS));
    let tools = gateway.tool_definitions().await.unwrap();
    assert_eq!(tools[0].name, "order.ship");
    let first = gateway
        .execute_tool_call(&order("o-9", "call_9"))
        .await
        .unwrap();
    assert_eq!(first.phase, Phase::Succeeded, "{first:?}");
    let second = gateway
        .execute_tool_call(&order("o-9", "call_9"))
        .await
        .unwrap();
    assert!(second.replayed && second.record == first.record);
    assert_eq!(webhook.recorded().len(), 1);
    let missing = gateway
        .execute_tool_call(&ToolCall::new("nope"))
        .await
        .unwrap_err();
    assert!(
        matches!(missing, joch_tools::Error::Api { status: 404, .. }),
        "{missing}"
    );
}
