//! The audit chain's heads and checkpoints, and typed writes that append to it.

use joch_core::audit::Checkpoint;
use joch_core::{Object, Phase, Time, ToolCall};

use super::record;
use crate::{Durability, Store, StoreError};

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

/// A record written once, settled, lands with its audit entry; a taken
/// name writes neither.
pub async fn an_audited_create_lands_with_its_entry_or_not_at_all(store: &dyn Store) {
    store
        .create_audited(
            record("ToolCall", "ns", "c1"),
            "first".to_owned(),
            Durability::Sync,
        )
        .await
        .expect("create");
    assert_eq!(
        store.get("ToolCall", "ns", "c1").await.expect("get").body,
        record("ToolCall", "ns", "c1").body
    );
    let taken = store
        .create_audited(
            record("ToolCall", "ns", "c1"),
            "again".to_owned(),
            Durability::Sync,
        )
        .await;
    assert!(
        matches!(taken, Err(StoreError::AlreadyExists { .. })),
        "{taken:?}"
    );
    store
        .create_audited(
            record("ToolCall", "ns", "c2"),
            "second".to_owned(),
            Durability::Sync,
        )
        .await
        .expect("create");
    let chain = store.list_audit("ns", 0, 10).await.expect("list");
    let bodies: Vec<&str> = chain.iter().map(|e| e.body.as_str()).collect();
    assert_eq!(
        bodies,
        ["first", "second"],
        "the refused create appended nothing"
    );
    let seqs: Vec<u64> = chain.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2]);
}

/// Audit entries are numbered per namespace, each linked to the one before
/// by its hash.
pub async fn audit_entries_chain_per_namespace(store: &dyn Store) {
    use joch_core::audit::{GENESIS, chain_hash};
    // Deferred appends are acknowledged before their commit; the synced last
    // one is acknowledged after it, so all four are readable then.
    let appends = [("a", "one"), ("b", "other"), ("a", "two"), ("a", "three")];
    for (i, (ns, body)) in appends.into_iter().enumerate() {
        let durability = if i == appends.len() - 1 {
            Durability::Sync
        } else {
            Durability::Deferred
        };
        store
            .append_audit(ns, body.to_owned(), durability)
            .await
            .expect("append");
    }
    let chain = store.list_audit("a", 0, 10).await.expect("list");
    let bodies: Vec<&str> = chain.iter().map(|e| e.body.as_str()).collect();
    assert_eq!(bodies, ["one", "two", "three"]);
    assert_eq!(chain.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    let mut prev = GENESIS.to_owned();
    for entry in &chain {
        assert_eq!(entry.prev, prev);
        assert_eq!(entry.hash, chain_hash(&prev, &entry.body));
        prev = entry.hash.clone();
    }
    let after = store.list_audit("a", 2, 10).await.expect("list");
    assert_eq!(after.len(), 1);
    let other = store.list_audit("b", 0, 10).await.expect("list");
    assert_eq!((other[0].seq, other[0].prev.as_str()), (1, GENESIS));
}

/// A record's entries are found by its name (a ToolCall's and its
/// Approval's alike), in chain order, within the namespace only.
pub async fn a_records_audit_entries_are_found_by_name(store: &dyn Store) {
    let entry =
        |kind: &str, name: &str| format!(r#"{{"kind":"{kind}","name":"{name}","phase":"x"}}"#);
    let appends = [
        ("a", entry("ToolCall", "c1")),
        ("a", entry("ToolCall", "c2")),
        ("a", "not json".to_owned()),
        ("b", entry("ToolCall", "c1")),
        ("a", entry("Approval", "c1")),
        ("a", entry("ToolCall", "c10")),
    ];
    for (ns, body) in appends {
        store
            .append_audit(ns, body, Durability::Sync)
            .await
            .expect("append");
    }
    let found = store.audit_of("a", "c1").await.expect("read");
    let seqs: Vec<u64> = found.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 4]);
    assert!(found[1].body.contains("Approval"));
    assert_eq!(found[0].namespace, "a");
    let other = store.audit_of("b", "c1").await.expect("read");
    assert_eq!(other.len(), 1);
    assert!(store.audit_of("a", "c3").await.expect("read").is_empty());
}
