use std::sync::Arc;
use std::time::Duration;

use joch_core::object::IndexFields;
use joch_core::{Object, Phase, ToolCall};
use joch_store::{Durability, Record, SqliteStore, Store};

use super::{LEASE_KIND, LEASE_NAMESPACE, Lease};
use crate::policies::StandardPolicyEngine;
use crate::{Engine, EngineConfig};

fn survivor(store: Arc<SqliteStore>) -> Engine {
    let config = EngineConfig {
        replica: Some("survivor".to_owned()),
        ..EngineConfig::default()
    };
    Engine::new(
        store,
        Vec::new(),
        Arc::new(StandardPolicyEngine::default()),
        config,
    )
}

fn record(kind: &str, namespace: &str, name: &str, body: String, phase: Option<&str>) -> Record {
    Record {
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        resource_version: 1,
        labels: Default::default(),
        index: IndexFields {
            phase: phase.map(str::to_owned),
            ..IndexFields::default()
        },
        body,
    }
}

/// A reconciliation that fails leaves the lapsed replica's lease claimed,
/// not deleted: once the claim lapses, the next reap takes it up again and
/// the dead replica's call is reconciled after all.
#[tokio::test]
async fn a_failed_reconciliation_is_taken_up_again_once_its_claim_lapses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStore::open(dir.path().join("joch.db")).expect("store"));
    let engine = survivor(Arc::clone(&store));
    let mut call: ToolCall = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pay-1", "namespace": "ns"},
        "spec": {"toolRef": {"name": "pay"}, "input": {},
                 "sideEffects": {"level": "financial", "idempotent": false}},
        "status": {"phase": "Running", "replica": "dead", "attempts": 1}
    }))
    .expect("a call");
    engine
        .store()
        .create_object(&mut call, Durability::Sync)
        .await
        .expect("create");
    let lapsed = Lease::body(0, None);
    let lease = record(LEASE_KIND, LEASE_NAMESPACE, "dead", lapsed, None);
    store.create(lease, Durability::Sync).await.expect("lease");
    // A record that cannot be read makes the reconciliation fail.
    let broken = record(
        ToolCall::KIND,
        "ns",
        "broken",
        "not json".to_owned(),
        Some("Running"),
    );
    store
        .create(broken, Durability::Sync)
        .await
        .expect("broken");

    let ttl = Duration::from_millis(50);
    assert!(
        engine
            .lifecycle()
            .reap_lapsed_replicas("survivor", ttl)
            .await
            .is_err()
    );
    let claimed = store.get(LEASE_KIND, LEASE_NAMESPACE, "dead").await;
    let claimed = claimed.expect("the lease is kept while its calls are not reconciled");
    assert!(
        claimed.body.contains("\"reaper\":\"survivor\""),
        "{}",
        claimed.body
    );

    store
        .delete(ToolCall::KIND, "ns", "broken", None)
        .await
        .expect("delete");
    tokio::time::sleep(ttl * 2).await;
    engine
        .lifecycle()
        .reap_lapsed_replicas("survivor", ttl)
        .await
        .expect("reaped");
    let call: ToolCall = engine
        .store()
        .get_object("ns", "pay-1")
        .await
        .expect("the call");
    assert_eq!(call.status.phase, Phase::Unknown);
    assert!(
        store
            .get(LEASE_KIND, LEASE_NAMESPACE, "dead")
            .await
            .is_err()
    );
}
