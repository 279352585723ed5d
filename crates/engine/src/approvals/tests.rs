use joch_core::Approval;
use serde_json::json;

fn approval(name: &str) -> Approval {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "action": {"type": "tool_call", "toolCallRef": {"name": name}},
            "risk": {"level": "external_write", "summary": "test"},
            "options": ["approve", "reject"],
            "payload": {}
        },
        "status": {"deadline": "2999-01-01T00:00:00Z"}
    }))
    .expect("an approval")
}

/// Re-arming an approval already armed in this process (at start, or on
/// taking over a dead replica's work) starts no second timer.
#[tokio::test]
async fn an_approval_deadline_is_armed_once_per_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = crate::engine::test_engine(&dir);
    let timers = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let before = timers();
    let (first, second) = (approval("a"), approval("b"));
    engine.approvals().arm_deadline(&first);
    engine.approvals().arm_deadline(&first);
    engine.approvals().arm_deadline(&second);
    engine.approvals().arm_deadline(&first);
    assert_eq!(timers() - before, 2, "one timer per approval");
    assert_eq!(engine.approvals().armed().len(), 2);
}
