//! Idempotency keys: one claim wins, across everything that races for it.

use std::sync::Arc;

use super::{query, record};
use crate::{Durability, IdempotencyClaim, Store, StoreError, StoreErrorKind};

/// A claim on `key` for `tool` at time `now_ms`, living 1000 ms.
pub fn claim(tool: &str, key: &str, checksum: &str, now_ms: i64) -> IdempotencyClaim {
    IdempotencyClaim {
        tool: tool.to_owned(),
        key: key.to_owned(),
        checksum: checksum.to_owned(),
        now_ms,
        expires_at_ms: now_ms + 1000,
    }
}

fn held_by(err: StoreError) -> (String, String) {
    match err {
        StoreError::KeyClaimed { call, checksum } => (call, checksum),
        other => panic!("expected KeyClaimed, got {other:?}"),
    }
}

/// The first claim wins; the second learns who holds the key, and its call
/// is not stored.
pub async fn a_key_is_claimed_once(store: &dyn Store) {
    let first = record("ToolCall", "ns", "c1");
    store
        .create_claimed(first, claim("t", "k", "sum1", 0), Durability::Sync)
        .await
        .expect("first");
    let second = store
        .create_claimed(
            record("ToolCall", "ns", "c2"),
            claim("t", "k", "sum2", 10),
            Durability::Sync,
        )
        .await
        .expect_err("held");
    assert_eq!(second.kind(), StoreErrorKind::KeyClaimed);
    assert_eq!(held_by(second), ("c1".to_owned(), "sum1".to_owned()));
    let gone = store
        .get("ToolCall", "ns", "c2")
        .await
        .expect_err("not stored");
    assert_eq!(gone.kind(), StoreErrorKind::NotFound);
}

/// Claim and create are one step: a create that fails frees the key.
pub async fn a_failed_create_leaves_its_key_free(store: &dyn Store) {
    store
        .create(record("ToolCall", "ns", "taken"), Durability::Sync)
        .await
        .expect("create");
    let dup = store
        .create_claimed(
            record("ToolCall", "ns", "taken"),
            claim("t", "k", "s", 0),
            Durability::Sync,
        )
        .await
        .expect_err("name taken");
    assert_eq!(dup.kind(), StoreErrorKind::AlreadyExists);
    store
        .create_claimed(
            record("ToolCall", "ns", "other"),
            claim("t", "k", "s", 0),
            Durability::Sync,
        )
        .await
        .expect("the key was not kept by the failed create");
}

/// The same key under another tool or namespace is another key.
pub async fn keys_are_scoped_by_namespace_and_tool(store: &dyn Store) {
    for (ns, name, tool) in [("a", "c1", "t"), ("a", "c2", "u"), ("b", "c3", "t")] {
        store
            .create_claimed(
                record("ToolCall", ns, name),
                claim(tool, "k", "s", 0),
                Durability::Sync,
            )
            .await
            .expect("distinct scope");
    }
}

/// After its window a key may be claimed again; purging removes old claims.
pub async fn expired_keys_are_replaced_and_purged(store: &dyn Store) {
    let old = claim("t", "k", "s1", 0);
    store
        .create_claimed(record("ToolCall", "ns", "c1"), old, Durability::Sync)
        .await
        .expect("c1");
    let early = store
        .create_claimed(
            record("ToolCall", "ns", "c2"),
            claim("t", "k", "s2", 999),
            Durability::Sync,
        )
        .await
        .expect_err("still live at 999");
    assert_eq!(early.kind(), StoreErrorKind::KeyClaimed);
    store
        .create_claimed(
            record("ToolCall", "ns", "c2"),
            claim("t", "k", "s2", 1000),
            Durability::Sync,
        )
        .await
        .expect("expired at 1000");
    store
        .create_claimed(
            record("ToolCall", "ns", "c3"),
            claim("t", "k2", "s", 0),
            Durability::Sync,
        )
        .await
        .expect("c3");
    assert_eq!(
        store.purge_expired_keys(1500).await.expect("purge"),
        1,
        "only k2's claim had expired"
    );
    assert_eq!(store.purge_expired_keys(1500).await.expect("purge"), 0);
}

/// Many concurrent claims of one key: exactly one call is stored.
pub async fn concurrent_claims_of_one_key_have_one_winner(store: Arc<dyn Store>) {
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let r = record("ToolCall", "ns", &format!("c{i}"));
                store
                    .create_claimed(r, claim("t", "k", "s", 0), Durability::Sync)
                    .await
                    .is_ok()
            })
        })
        .collect();
    let mut winners = 0;
    for task in tasks {
        winners += usize::from(task.await.expect("task"));
    }
    assert_eq!(winners, 1);
    assert_eq!(
        store
            .list(query("ToolCall", "ns", 100))
            .await
            .expect("list")
            .items
            .len(),
        1
    );
}
