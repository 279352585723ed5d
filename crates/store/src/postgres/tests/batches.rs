//! Writes are committed in batches (`postgres/batches.rs`): a write
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

/// Two replicas' batches update the same records at once, each batch in
/// one statement: they lock in one order, so none deadlocks (PostgreSQL
/// would abort one, failing its whole batch), and every update that is
/// answered `Ok` landed once. An update of a missing record in a batch is
/// answered `NotFound`, alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_batched_updates_of_the_same_records_never_deadlock() {
    let Some(server) = server("replicas_batched_updates_of_the_same_records_never_deadlock") else {
        return;
    };
    let databases = Databases::new(server);
    let url = databases.create().await;
    let connect = || crate::PostgresStore::connect(&url, crate::PostgresOptions::default());
    let replicas = [
        Arc::new(connect().await.expect("one")),
        Arc::new(connect().await.expect("two")),
    ];
    const RECORDS: usize = 12;
    const ROUNDS: usize = 10;
    for i in 0..RECORDS {
        let created = record("ToolCall", "a", &format!("r{i}"));
        replicas[0]
            .create(created, Durability::Sync)
            .await
            .expect("create");
    }
    // Each task walks the records in its own order, bumping each one once
    // per round from the version it reads, retrying on a conflict.
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let store = Arc::clone(&replicas[t % 2]);
            tokio::spawn(async move {
                for round in 0..ROUNDS {
                    for k in 0..RECORDS {
                        let i = if t % 2 == 0 { k } else { RECORDS - 1 - k };
                        let name = format!("r{i}");
                        loop {
                            let stored = store.get("ToolCall", "a", &name).await.expect("get");
                            let mut next = stored.clone();
                            next.resource_version = stored.resource_version + 1;
                            let entry = format!("t{t} round {round} {name}");
                            match store
                                .update_audited(
                                    next,
                                    stored.resource_version,
                                    entry,
                                    Durability::Sync,
                                )
                                .await
                            {
                                Ok(_) => break,
                                Err(e) if e.kind() == StoreErrorKind::Conflict => continue,
                                Err(e) => panic!("task {t}, {name}: {e}"),
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("no update failed");
    }
    for i in 0..RECORDS {
        let stored = replicas[1]
            .get("ToolCall", "a", &format!("r{i}"))
            .await
            .expect("get");
        assert_eq!(stored.resource_version, 1 + 8 * ROUNDS as u64, "r{i}");
    }
    let chain = replicas[0].list_audit("a", 0, 10_000).await.expect("list");
    assert_eq!(
        chain.len(),
        8 * ROUNDS * RECORDS,
        "one entry per update that landed"
    );

    let mut missing = record("ToolCall", "a", "never-made");
    missing.resource_version = 2;
    let refused = replicas[0]
        .update_audited(missing, 1, "x".to_owned(), Durability::Sync)
        .await
        .map_err(|e| e.kind());
    assert_eq!(refused, Err(StoreErrorKind::NotFound));
    databases.drop_all().await;
}

/// Writes of one record that share a batch go in rounds, one after
/// another (`rounds` in `postgres/batches.rs`): of the updates from one
/// version exactly one lands, of the creates of one name exactly one,
/// and the chain holds the entries of those two only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_one_record_in_one_batch_land_once() {
    let Some(server) = server("writes_of_one_record_in_one_batch_land_once") else {
        return;
    };
    let databases = Databases::new(server);
    let store = Arc::new(databases.store().await);
    store
        .create(record("ToolCall", "a", "old"), Durability::Sync)
        .await
        .expect("create");
    const WRITERS: usize = 16;
    let tasks: Vec<_> = (0..2 * WRITERS)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let body = format!("entry {i}");
                if i % 2 == 0 {
                    let mut next = record("ToolCall", "a", "old");
                    next.resource_version = 2;
                    store.update_audited(next, 1, body, Durability::Sync).await
                } else {
                    let new = record("ToolCall", "a", "new");
                    store.create_audited(new, body, Durability::Sync).await
                }
                .map(|_| i)
                .map_err(|e| (i, e.kind()))
            })
        })
        .collect();
    let (mut landed, mut refused) = (Vec::new(), Vec::new());
    for task in tasks {
        match task.await.expect("task") {
            Ok(i) => landed.push(i),
            Err((i, kind)) => refused.push((i % 2, kind)),
        }
    }
    assert_eq!(landed.len(), 2, "one update and one create: {landed:?}");
    assert_eq!(landed.iter().map(|i| i % 2).sum::<usize>(), 1);
    let mut expected = vec![(0, StoreErrorKind::Conflict); WRITERS - 1];
    expected.extend(vec![(1, StoreErrorKind::AlreadyExists); WRITERS - 1]);
    refused.sort_by_key(|&(parity, _)| parity);
    assert_eq!(refused, expected);
    let chain = store.list_audit("a", 0, 100).await.expect("list");
    let mut bodies: Vec<String> = chain.into_iter().map(|e| e.body).collect();
    bodies.sort();
    let mut wanted: Vec<String> = landed.iter().map(|i| format!("entry {i}")).collect();
    wanted.sort();
    assert_eq!(bodies, wanted, "the entries of the writes that landed");
    databases.drop_all().await;
}
