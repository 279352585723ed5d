use std::sync::Arc;

use joch_core::Approval;
use joch_store::Store;
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

/// What the approvals part asked of the call path, through its seam.
#[derive(Default)]
struct Asked(std::sync::Mutex<Vec<(String, joch_core::ApprovalPhase, String)>>);

#[async_trait::async_trait]
impl super::Decided for Asked {
    async fn carry_out(
        &self,
        approval: &Approval,
        decision: &super::ApprovalDecision,
    ) -> Result<Option<Approval>, crate::EngineError> {
        let asked = (
            approval.metadata.name.clone(),
            approval.status.phase,
            decision.by.clone(),
        );
        self.0.lock().expect("asked").push(asked);
        Ok(None)
    }

    async fn expire_unretried(
        &self,
        _approval: &Approval,
    ) -> Result<Option<std::time::Duration>, crate::EngineError> {
        Ok(None)
    }
}

/// The approvals part alone, over a fresh store, with `asked` as its way
/// back to the call path: no calls part, no backend.
fn approvals_alone(
    dir: &tempfile::TempDir,
    asked: Arc<Asked>,
) -> (super::Approvals, Arc<dyn Store>) {
    let store: Arc<dyn Store> =
        Arc::new(joch_store::SqliteStore::open(dir.path().join("joch.db")).expect("store"));
    let catalog = Arc::new(crate::catalog::Catalog::new(store.clone()));
    let visibility = crate::rules::Visibility::new(store.clone(), catalog.clone());
    let lists = crate::lists::Lists::new(store.clone(), 500, 5_000);
    let resources = Arc::new(crate::resources::Resources::new(
        store.clone(),
        catalog.clone(),
        visibility.clone(),
        lists.clone(),
        crate::HostAccess::default(),
    ));
    let needs = super::Needs {
        store: store.clone(),
        catalog,
        visibility,
        lists,
        resources,
        credentials: None,
        replica: None,
    };
    let approvals = super::Approvals::new(needs, asked);
    (approvals, store)
}

/// A call waiting in `AwaitingApproval` with its pending Approval, stored.
async fn waiting(store: &Arc<dyn Store>, name: &str) {
    let mut call: joch_core::ToolCall = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"toolRef": {"name": "wire"}, "input": {}},
        "status": {"phase": "AwaitingApproval"}
    }))
    .expect("a call");
    let sync = joch_store::Durability::Sync;
    store
        .create_object(&mut call, sync)
        .await
        .expect("the call");
    let mut approval = approval(name);
    approval.spec.payload = json!({"tool": "wire"});
    store
        .create_object(&mut approval, sync)
        .await
        .expect("the approval");
}

/// The seam the approvals part is built with is all it needs of the call
/// path: a decision is stored, then handed over to be carried out, once,
/// with the phase and decider it was stored with; a second decision on
/// the same approval is refused and hands nothing over.
#[tokio::test]
async fn a_decision_is_stored_then_handed_to_the_call_path_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let asked = Arc::new(Asked::default());
    let (approvals, store) = approvals_alone(&dir, asked.clone());
    waiting(&store, "a").await;
    waiting(&store, "b").await;
    let by = joch_core::Principal::local();
    let decision = |who: &str| super::ApprovalDecision {
        by: who.to_owned(),
        ..Default::default()
    };

    let approved = (approvals.approve(&by, "ns", "a", decision("alice")))
        .await
        .expect("approved");
    assert_eq!(approved.status.phase, joch_core::ApprovalPhase::Approved);
    (approvals.reject(&by, "ns", "b", decision("bob")))
        .await
        .expect("rejected");
    let again = approvals.reject(&by, "ns", "a", decision("carol")).await;
    assert!(
        matches!(again, Err(crate::EngineError::Refused { .. })),
        "{again:?}"
    );

    let asked = asked.0.lock().expect("asked").clone();
    use joch_core::ApprovalPhase::{Approved, Rejected};
    assert_eq!(
        asked,
        vec![
            ("a".to_owned(), Approved, "alice".to_owned()),
            ("b".to_owned(), Rejected, "bob".to_owned()),
        ]
    );
    let stored = approvals.get("ns", "a").await.expect("stored");
    assert_eq!(stored.status.decided_by.as_deref(), Some("alice"));
}
