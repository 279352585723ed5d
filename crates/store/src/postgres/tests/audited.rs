//! Audited writes are committed in batches (`postgres/audited.rs`): a write
//! refused on its own must not take its batch down with it, and each
//! namespace's chain must hold exactly the writes that landed.

use std::sync::Arc;

use joch_core::audit::{GENESIS, chain_hash};

use super::{Databases, server};
use crate::testsuite::record;
use crate::{Durability, Store, StoreErrorKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_audited_writes_leave_the_others_of_their_batch_alone() {
    let Some(server) = server("refused_audited_writes_leave_the_others_of_their_batch_alone")
    else {
        return;
    };
    let databases = Databases::new(server);
    let store = Arc::new(databases.store().await);
    const CALLS: usize = 48;
    for i in 0..CALLS {
        let ns = if i % 2 == 0 { "a" } else { "b" };
        store
            .create(record("ToolCall", ns, &format!("c{i}")), Durability::Sync)
            .await
            .expect("create");
    }
    // At once, so that they queue up and share batches: every third update
    // is stale, every third create takes a name already taken.
    let tasks: Vec<_> = (0..CALLS)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let ns = if i % 2 == 0 { "a" } else { "b" };
                let body = format!("entry {i}");
                let result = match i % 6 {
                    0 | 3 => {
                        let mut done = record("ToolCall", ns, &format!("c{i}"));
                        done.resource_version = 8;
                        store.update_audited(done, 7, body, Durability::Sync).await
                    }
                    1 | 4 => {
                        let taken = record("ToolCall", ns, &format!("c{i}"));
                        store.create_audited(taken, body, Durability::Sync).await
                    }
                    _ => {
                        let mut done = record("ToolCall", ns, &format!("c{i}"));
                        done.resource_version = 2;
                        store.update_audited(done, 1, body, Durability::Sync).await
                    }
                };
                (i, result)
            })
        })
        .collect();
    let mut landed = Vec::new();
    for task in tasks {
        let (i, result) = task.await.expect("task");
        match i % 6 {
            0 | 3 => assert_eq!(result.map_err(|e| e.kind()), Err(StoreErrorKind::Conflict)),
            1 | 4 => assert_eq!(
                result.map_err(|e| e.kind()),
                Err(StoreErrorKind::AlreadyExists)
            ),
            _ => {
                result.expect("a fresh update lands");
                landed.push(i);
            }
        }
    }
    assert_eq!(landed.len(), CALLS / 3);

    for ns in ["a", "b"] {
        let chain = store.list_audit(ns, 0, 1000).await.expect("list");
        let mut prev = GENESIS.to_owned();
        for (i, entry) in chain.iter().enumerate() {
            assert_eq!(entry.seq, i as u64 + 1);
            assert_eq!(entry.prev, prev);
            assert_eq!(entry.hash, chain_hash(&prev, &entry.body));
            prev = entry.hash.clone();
        }
        let mut bodies: Vec<String> = chain.into_iter().map(|e| e.body).collect();
        bodies.sort();
        let mut expected: Vec<String> = landed
            .iter()
            .filter(|&&i| (i % 2 == 0) == (ns == "a"))
            .map(|i| format!("entry {i}"))
            .collect();
        expected.sort();
        assert_eq!(bodies, expected, "namespace {ns} holds exactly what landed");
    }
    for i in 0..CALLS {
        let ns = if i % 2 == 0 { "a" } else { "b" };
        let stored = store
            .get("ToolCall", ns, &format!("c{i}"))
            .await
            .expect("get");
        let expected = if landed.contains(&i) { 2 } else { 1 };
        assert_eq!(stored.resource_version, expected, "c{i}");
    }
    databases.drop_all().await;
}
