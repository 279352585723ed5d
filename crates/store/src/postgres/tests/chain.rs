//! Audit entries are queued with their writes and linked after they commit
//! (`postgres/chain.rs`): a write never waits for a chain's lock, and what
//! a replica queued but did not link is linked by a reader or the sweep.

use std::time::Duration;

use joch_core::audit::GENESIS;
use sqlx_core::executor::Executor;
use sqlx_core::query_scalar::query_scalar;

use super::{Databases, server};
use crate::postgres::chain::MOST;
use crate::testsuite::record;
use crate::{Durability, Store};

/// While another transaction holds a namespace's audit head (as a link
/// does until it commits), an audited write of that namespace still
/// commits, and its entry is chained once the head is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audited_write_does_not_wait_for_its_chains_lock() {
    let Some(server) = server("an_audited_write_does_not_wait_for_its_chains_lock") else {
        return;
    };
    let databases = Databases::new(server);
    let store = databases.store().await;
    store
        .append_audit("ns", "first".to_owned(), Durability::Sync)
        .await
        .expect("append");
    let mut holder = store.pool.begin().await.expect("begin");
    holder
        .execute("SELECT * FROM audit_heads WHERE namespace = 'ns' FOR UPDATE")
        .await
        .expect("lock the head");
    let written = store.create_audited(
        record("ToolCall", "ns", "c1"),
        "second".to_owned(),
        Durability::Sync,
    );
    tokio::time::timeout(Duration::from_secs(10), written)
        .await
        .expect("the write did not wait for the head")
        .expect("create_audited");
    holder.commit().await.expect("commit");
    let chain = store.list_audit("ns", 0, 10).await.expect("list");
    let bodies: Vec<&str> = chain.iter().map(|e| e.body.as_str()).collect();
    assert_eq!(bodies, ["first", "second"]);
    assert_eq!(chain[1].prev, chain[0].hash);
    drop(store);
    databases.drop_all().await;
}

/// Entries committed by a replica that died before linking them: a reader
/// of their chain links them before it reads, and with no reader the
/// sweep of any live replica links them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_a_dead_replica_queued_are_linked_by_a_reader_or_the_sweep() {
    let Some(server) = server("entries_a_dead_replica_queued_are_linked_by_a_reader_or_the_sweep")
    else {
        return;
    };
    let databases = Databases::new(server);
    let store = databases.store().await;
    let pool = store.pool.clone();
    // More than one link takes.
    let left = MOST + 10;
    sqlx_core::query::query(
        "INSERT INTO audit_queue (namespace, body)
         SELECT 'read', 'left ' || i FROM generate_series(1, $1) AS i",
    )
    .bind(left)
    .execute(&pool)
    .await
    .expect("queue");
    let chain = store.list_audit("read", 0, 10_000).await.expect("list");
    let bodies: Vec<&str> = chain.iter().map(|e| e.body.as_str()).collect();
    let expected: Vec<String> = (1..=left).map(|i| format!("left {i}")).collect();
    assert_eq!(bodies, expected, "the reader linked them all, in order");
    let mut prev = GENESIS.to_owned();
    for (entry, seq) in chain.iter().zip(1..) {
        assert_eq!((entry.seq, &entry.prev), (seq, &prev));
        prev = entry.hash.clone();
    }

    pool.execute("INSERT INTO audit_queue (namespace, body) VALUES ('swept', 'left 3')")
        .await
        .expect("queue");
    let linked = || {
        query_scalar::<_, i64>("SELECT count(*) FROM audit WHERE namespace = 'swept'")
            .fetch_one(&pool)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while linked().await.expect("count") == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sweep linked nothing"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let queued: i64 = query_scalar("SELECT count(*) FROM audit_queue")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(queued, 0, "nothing is left queued");
    drop((store, pool));
    databases.drop_all().await;
}
