//! A new database gets its first statistics from the store
//! (`postgres/statistics.rs`), so that a lookup by name uses the unique key
//! instead of reading every record of its namespace.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx_core::query_scalar::query_scalar;
use sqlx_postgres::PgPool;

use super::{Databases, server};
use crate::postgres::statistics::{AFTER_WRITES, missing};
use crate::testsuite::record;
use crate::{Durability, Store};

/// A call's name as the engine makes them: 36 characters (a UUID).
fn name(i: usize) -> String {
    format!("01938a3c-0000-7000-8000-{i:012}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_database_is_analyzed_once_its_first_records_are_written() {
    let Some(server) = server("a_new_database_is_analyzed_once_its_first_records_are_written")
    else {
        return;
    };
    let databases = Databases::new(server);
    let url = databases.create().await;
    let store = Arc::new(
        super::PostgresStore::connect(&url, super::PostgresOptions::default())
            .await
            .expect("connect"),
    );
    let pool = PgPool::connect(&url).await.expect("pool");
    let write = |from: usize, to: usize| {
        let tasks: Vec<_> = (from..to)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let mut call = record("ToolCall", "ns", &name(i));
                    call.body = format!("{{\"padding\":\"{}\"}}", "x".repeat(1500));
                    store.create(call, Durability::Sync).await.expect("create");
                })
            })
            .collect();
        async move {
            for task in tasks {
                task.await.expect("task");
            }
        }
    };
    write(0, 10).await;
    assert!(
        missing(&pool)
            .await
            .expect("read")
            .contains(&"objects".to_owned()),
        "a new database has no statistics yet"
    );
    write(10, AFTER_WRITES * 3).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while missing(&pool)
        .await
        .expect("read")
        .contains(&"objects".to_owned())
    {
        assert!(Instant::now() < deadline, "objects was never analyzed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The batch's lookup, as `bulk::replace_all` makes it.
    let plan: Vec<String> = query_scalar(
        "EXPLAIN SELECT o.resource_version FROM objects o
         JOIN UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[]) AS u(k, ns, n)
         ON o.kind = u.k AND o.namespace = u.ns AND o.name = u.n
         ORDER BY o.namespace, o.kind, o.name FOR UPDATE OF o",
    )
    .bind(vec!["ToolCall"; 8])
    .bind(vec!["ns"; 8])
    .bind((0..8).map(name).collect::<Vec<_>>())
    .fetch_all(&pool)
    .await
    .expect("explain");
    let plan = plan.join("\n");
    assert!(
        plan.contains("objects_kind_namespace_name_key"),
        "the lookup by name uses the unique key:\n{plan}"
    );
    pool.close().await;
    store.close().await;
    databases.drop_all().await;
}
