//! Visibility, in process: a principal whose tool selector hides a tool
//! finds no trace of that tool's calls in any read the engine offers
//! (records, lists, events, the audit, costs, the overview's buckets),
//! while a principal without a selector sees them all.

use std::sync::Arc;
use std::time::Duration;

use joch_core::token::Role;
use joch_core::{
    Invocation, Phase, Principal, PrincipalKind, Time, Tool, ToolBackend, ToolCall, ToolFailure,
    ToolSelector,
};
use joch_store::{CostGroup, SqliteStore};
use serde_json::{Value, json};

use crate::calls::CallWindow;
use crate::{Engine, EngineConfig, EngineError};

/// Answers every call at once.
struct Answers;

#[async_trait::async_trait]
impl ToolBackend for Answers {
    fn kind(&self) -> &'static str {
        "noop"
    }

    async fn invoke(&self, _: Invocation<'_>) -> Result<Value, ToolFailure> {
        Ok(json!({"salary": 123_456}))
    }
}

fn principal(name: &str, role: Role, selector: bool) -> Principal {
    Principal {
        kind: PrincipalKind::Token,
        name: name.to_owned(),
        namespaces: joch_core::Namespaces::one("ns"),
        role,
        tools: selector.then(|| ToolSelector {
            names: vec!["crm.*".to_owned()],
            labels: None,
        }),
        presented: Default::default(),
    }
}

/// An engine with `hr.salaries` and `crm.lookup`, each called once by
/// the local caller in execution `run-1`, the hidden one first.
async fn two_calls(dir: &tempfile::TempDir) -> Engine {
    let store = SqliteStore::open(dir.path().join("joch.db")).expect("store");
    let policy = Arc::new(crate::policies::StandardPolicyEngine::default());
    let engine = Engine::new(
        Arc::new(store),
        vec![Arc::new(Answers)],
        policy,
        EngineConfig::default(),
    );
    let local = Principal::local();
    for (tool, call) in [("hr.salaries", "hr-1"), ("crm.lookup", "crm-1")] {
        let tool: Tool = serde_json::from_value(json!({
            "metadata": {"name": tool},
            "spec": {"backend": {"type": "noop"}, "cost": {"perCall": 0.5}}
        }))
        .expect("a tool");
        let name = tool.metadata.name.clone();
        engine
            .resources()
            .create(&local, "ns", tool)
            .await
            .expect("the tool");
        let call: ToolCall = serde_json::from_value(json!({
            "metadata": {"name": call},
            "spec": {"toolRef": {"name": name}, "executionRef": {"name": "run-1"}, "input": {}}
        }))
        .expect("a call");
        let done = engine.calls().call(&local, "ns", call).await.expect("ran");
        assert_eq!(
            done.record.status.phase,
            Phase::Succeeded,
            "{:?}",
            done.record
        );
    }
    engine
}

#[tokio::test]
async fn a_hidden_tools_calls_leave_no_trace_in_any_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = two_calls(&dir).await;
    let (crm, crm_approver) = (
        principal("crm", Role::Agent, true),
        principal("crm-approver", Role::Approver, true),
    );
    let everyone = principal("all", Role::Approver, false);

    // The record, and the ledger's list.
    assert!(matches!(
        engine.calls().get(&crm, "ns", "hr-1").await,
        Err(EngineError::NotFound { .. })
    ));
    engine
        .calls()
        .get(&crm, "ns", "crm-1")
        .await
        .expect("its own tool's call");
    let names = |calls: Vec<ToolCall>| -> Vec<String> {
        calls.into_iter().map(|c| c.metadata.name).collect()
    };
    let listed = engine
        .calls()
        .list(&crm, "ns", Default::default())
        .await
        .expect("list");
    assert_eq!(names(listed.items), ["crm-1"]);

    // The execution's events.
    let tools_in = |events: Vec<crate::Event>| -> Vec<String> {
        let mut tools: Vec<String> = events
            .iter()
            .filter_map(|e| e.data["tool_name"].as_str().map(str::to_owned))
            .collect();
        tools.dedup();
        tools
    };
    let seen = engine
        .calls()
        .events(&crm, "ns", "run-1", 0, 100)
        .await
        .expect("events");
    assert_eq!(tools_in(seen), ["crm.lookup"]);
    let all = engine
        .calls()
        .events(&everyone, "ns", "run-1", 0, 100)
        .await
        .expect("events");
    assert_eq!(tools_in(all), ["hr.salaries", "crm.lookup"]);

    // The audit.
    let audited = |lines: Vec<crate::audit::AuditLine>| -> Vec<String> {
        let mut names: Vec<String> = lines
            .iter()
            .filter_map(|l| l.entry["name"].as_str().map(str::to_owned))
            .collect();
        names.dedup();
        names
    };
    let lines = engine
        .audit()
        .entries(&crm_approver, "ns", 0, 100)
        .await
        .expect("audit");
    assert_eq!(audited(lines), ["crm-1"]);
    let lines = engine
        .audit()
        .entries(&everyone, "ns", 0, 100)
        .await
        .expect("audit");
    assert_eq!(audited(lines), ["hr-1", "crm-1"]);

    // Costs, by tool and in all.
    let calls = engine.calls();
    let costs = |by, group| calls.costs(by, "ns", group, None);
    let by_tool = costs(&crm_approver, CostGroup::Tool).await.expect("costs");
    let keys: Vec<&str> = by_tool.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(keys, ["crm.lookup"]);
    let total = costs(&crm_approver, CostGroup::All).await.expect("costs");
    assert_eq!(total.iter().map(|t| t.calls).sum::<u64>(), 1);
    let total = costs(&everyone, CostGroup::All).await.expect("costs");
    assert_eq!(total.iter().map(|t| t.calls).sum::<u64>(), 2);

    // The overview's buckets.
    let window = || CallWindow {
        until: Time(chrono::Utc::now() + chrono::Duration::minutes(1)),
        bucket: Duration::from_secs(3600),
        buckets: 1,
        sample: 10,
        count_cap: 100,
    };
    let bucket = &engine
        .calls()
        .over(&crm, "ns", window())
        .await
        .expect("over")[0];
    assert_eq!(
        (bucket.count, names(bucket.sample.clone())),
        (1, vec!["crm-1".to_owned()])
    );
    let bucket = &engine
        .calls()
        .over(&everyone, "ns", window())
        .await
        .expect("over")[0];
    assert_eq!(bucket.count, 2);
}

/// An audit verification names no record of a hidden tool: the record of
/// `hr-1` edited behind the ledger's back is a finding for a principal
/// that sees it, and none for one whose selector hides it.
#[tokio::test]
async fn a_verification_names_no_hidden_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = two_calls(&dir).await;
    let store = engine.store();
    let mut record = store.get("ToolCall", "ns", "hr-1").await.expect("hr-1");
    assert!(record.body.contains("123456"), "{}", record.body);
    record.body = record.body.replace("123456", "654321");
    let version = record.resource_version;
    record.resource_version += 1;
    store
        .update(record, version, joch_store::Durability::Sync)
        .await
        .expect("edited");
    let names = |report: &crate::AuditReport| -> Vec<String> {
        report
            .findings
            .iter()
            .filter_map(|f| f.name.clone())
            .collect()
    };
    let everyone = principal("all", Role::Approver, false);
    let full = engine
        .audit()
        .verify(&everyone, "ns")
        .await
        .expect("verify");
    assert!(!full.intact);
    assert_eq!(names(&full), ["hr-1"]);
    let crm_approver = principal("crm-approver", Role::Approver, true);
    let seen = engine
        .audit()
        .verify(&crm_approver, "ns")
        .await
        .expect("verify");
    assert!(seen.intact, "{seen:?}");
    assert!(seen.first_problem.is_none());
    assert!(names(&seen).is_empty());
}
