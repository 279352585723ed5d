//! The audit chain's heads and checkpoints, and typed writes that append to it.

use joch_core::audit::Checkpoint;
use joch_core::{Object, Phase, Time, ToolCall};

use crate::{Durability, Store};

/// A ToolCall written settled gets its entry in the same write, by create
/// or update; one written unsettled gets none.
pub async fn a_settled_call_is_written_with_its_entry(store: &dyn Store) {
    let mut call: ToolCall = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "c1", "namespace": "ns"},
        "spec": {"toolRef": {"name": "t"}},
    }))
    .expect("a call");
    call.status.phase = Phase::Running;
    store
        .create_object(&mut call, Durability::Sync)
        .await
        .expect("create");
    assert!(
        store
            .list_audit("ns", 0, 10)
            .await
            .expect("list")
            .is_empty()
    );
    call.status.phase = Phase::Succeeded;
    store
        .update_object(&mut call, Durability::Sync)
        .await
        .expect("update");
    let chain = store.list_audit("ns", 0, 10).await.expect("list");
    assert_eq!(chain.len(), 1);
    let expected = call.audit_entry(Time(chrono::Utc::now())).expect("settled");
    let entry: joch_core::audit::AuditEntry =
        serde_json::from_str(&chain[0].body).expect("an entry");
    assert_eq!((entry.name, entry.digest), (expected.name, expected.digest));

    let mut settled = call.clone();
    settled.metadata.name = "c2".to_owned();
    settled.metadata.resource_version.clear();
    store
        .create_object(&mut settled, Durability::Sync)
        .await
        .expect("create settled");
    assert_eq!(store.list_audit("ns", 0, 10).await.expect("list").len(), 2);
}

/// Each namespace's head is its newest entry; a checkpoint is kept once
/// per entry and listed oldest first.
pub async fn heads_and_checkpoints_are_per_namespace(store: &dyn Store) {
    for (ns, body) in [("a", "one"), ("b", "other"), ("a", "two")] {
        store
            .append_audit(ns, body.to_owned(), Durability::Sync)
            .await
            .expect("append");
    }
    let mut heads: Vec<(String, u64, String)> = store
        .audit_heads()
        .await
        .expect("heads")
        .into_iter()
        .map(|h| (h.namespace, h.seq, h.body))
        .collect();
    heads.sort();
    assert_eq!(
        heads,
        [
            ("a".to_owned(), 2, "two".to_owned()),
            ("b".to_owned(), 1, "other".to_owned())
        ]
    );

    let key = joch_core::audit::signing_key_from_hex(&"07".repeat(32)).expect("a key");
    let at = Time(chrono::Utc::now());
    for seq in [2, 1] {
        let checkpoint = Checkpoint::sign(&key, "a", seq, "h", at);
        assert!(store.put_checkpoint(&checkpoint).await.expect("put"));
    }
    let again = Checkpoint::sign(&key, "a", 2, "other", at);
    assert!(!store.put_checkpoint(&again).await.expect("put again"));
    let kept = store.list_checkpoints("a").await.expect("list");
    assert_eq!(
        kept.iter()
            .map(|c| (c.seq, c.head.as_str()))
            .collect::<Vec<_>>(),
        [(1, "h"), (2, "h")]
    );
    assert!(store.list_checkpoints("b").await.expect("list").is_empty());
}
