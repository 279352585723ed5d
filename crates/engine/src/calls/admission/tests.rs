use joch_core::{Approval, Phase, Principal, Tool, ToolCall};
use joch_store::Durability;
use serde_json::{Value, json};

fn call(name: Option<&str>) -> ToolCall {
    let mut call = json!({"spec": {
        "toolRef": {"name": "wire"},
        "input": {},
        "sideEffects": {"idempotencyKey": "k"}
    }});
    if let Some(name) = name {
        call["metadata"] = json!({"name": name});
    }
    serde_json::from_value(call).expect("a call")
}

fn approval(name: &str) -> Approval {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "action": {"type": "tool_call", "toolCallRef": {"name": name}},
            "risk": {"level": "external_write", "summary": "in the way"},
            "options": ["approve", "reject"],
            "payload": Value::Null
        }
    }))
    .expect("an approval")
}

/// A call recorded `AwaitingApproval` whose Approval cannot be opened is
/// settled `Failed` at once: not left waiting with nobody able to decide
/// it, nor holding its idempotency key against every retry.
#[tokio::test]
async fn a_call_whose_approval_cannot_be_opened_is_settled_not_stuck() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = crate::engine::test_engine(&dir);
    let by = Principal::local();
    let tool: Tool = serde_json::from_value(json!({
        "metadata": {"name": "wire"},
        "spec": {
            "sideEffects": {"level": "external_write", "requiresApproval": true},
            "backend": {"type": "noop"}
        }
    }))
    .expect("a tool");
    engine
        .resources()
        .create(&Principal::local(), "ns", tool)
        .await
        .expect("the tool");
    // An Approval of the call's name is there already: the call's own
    // cannot be created once the call is recorded.
    let mut squatter = approval("stuck");
    let store = &engine.inner.store;
    store
        .create_object(&mut squatter, Durability::Sync)
        .await
        .expect("the squatter");

    let refused = engine.calls().submit(&by, "ns", call(Some("stuck"))).await;
    assert!(refused.is_err(), "{:?}", refused.map(|o| o.record));
    let stored = engine
        .calls()
        .record("ns", "stuck")
        .await
        .expect("recorded");
    assert_eq!(stored.status.phase, Phase::Failed);
    let code = stored.status.error.as_ref().map(|e| e.code.as_str());
    assert_eq!(code, Some("interrupted"));

    let retried = engine
        .calls()
        .submit(&by, "ns", call(None))
        .await
        .expect("a retry gets the settled call, not idempotency_key_in_use");
    assert_eq!(retried.record.metadata.name, "stuck");
    assert_eq!(retried.record.status.phase, Phase::Failed);
}
