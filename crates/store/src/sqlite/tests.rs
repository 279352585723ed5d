use std::sync::Arc;

use joch_core::{Phase, ToolCall};

use super::*;
use crate::testsuite;

/// A store on a new file of its own directory, removed after the test.
async fn suite_store(_test: &str) -> Option<(Arc<dyn Store>, testsuite::Cleanup)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("suite.db")).expect("open");
    Some((Arc::new(store), Box::pin(async move { drop(dir) })))
}

/// The store suite, one test per behaviour.
mod suite {
    use super::suite_store;

    crate::store_suite!(suite_store);
}

#[tokio::test]
async fn synced_records_survive_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("joch.db");
    let mut call: ToolCall = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "call-1", "namespace": "ns"},
        "spec": {"toolRef": {"name": "t"}, "input": {"a": 1}}
    }))
    .expect("call");
    {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("open"));
        store
            .create_object(&mut call, Durability::Deferred)
            .await
            .expect("create");
        call.transition(Phase::Running).expect("move");
        store
            .update_object(&mut call, Durability::Sync)
            .await
            .expect("update");
    }
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("reopen"));
    let read: ToolCall = store.get_object("ns", "call-1").await.expect("get");
    assert_eq!(read, call);
    assert_eq!(read.metadata.resource_version, "2");
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("joch.db");
    drop(SqliteStore::open(&path).expect("open"));
    Connection::open(&path)
        .expect("raw")
        .pragma_update(None, "user_version", 99)
        .expect("bump");
    let err = SqliteStore::open(&path).err().expect("refused");
    assert!(err.to_string().contains("newer"), "{err}");
}

/// A synced write is answered only after a sync of the WAL that began
/// after its commit; a deferred one without any; and synced writes that
/// wait together share syncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_writes_are_answered_after_a_sync_that_they_share() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStore::open(dir.path().join("joch.db")).expect("open"));
    let call = |name: &str| -> ToolCall {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"toolRef": {"name": "t"}, "input": {}}
        }))
        .expect("call")
    };
    let before = store.syncs();
    let create = |name: &str, durability| {
        let (store, mut call): (Arc<dyn Store>, _) = (store.clone(), call(name));
        async move { store.create_object(&mut call, durability).await }
    };
    create("deferred", Durability::Deferred)
        .await
        .expect("deferred");
    assert_eq!(store.syncs(), before, "a deferred write does not sync");
    create("synced", Durability::Sync).await.expect("synced");
    assert_eq!(store.syncs(), before + 1, "answered after its sync");
    let writes = 64;
    let together: Vec<_> = (0..writes)
        .map(|i| tokio::spawn(create(&format!("n{i}"), Durability::Sync)))
        .collect();
    for write in together {
        write.await.expect("task").expect("synced");
    }
    let shared = store.syncs() - before - 1;
    assert!(
        (1..writes / 2).contains(&shared),
        "{writes} writes sent together took {shared} syncs"
    );
}

/// The writer's transactions take the write lock at BEGIN, where the busy
/// timeout waits: one that read before writing (appending an event reads
/// the last number first) failed with `database is locked` at once when
/// another connection had committed in between, with no wait at all.
/// Here another connection (as a sqlite3 shell or a backup would) commits
/// beside the writer all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_waits_for_the_write_lock_instead_of_failing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("joch.db");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("open"));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let (path, stop) = (path.clone(), stop.clone());
        std::thread::spawn(move || {
            let conn = rusqlite::Connection::open(path).expect("open");
            conn.execute_batch("PRAGMA busy_timeout = 5000; CREATE TABLE beside (n INTEGER)")
                .expect("scratch table");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                conn.execute("INSERT INTO beside (n) VALUES (1)", [])
                    .expect("insert beside");
                // Not a tight loop: a lock retaken at once could starve
                // the writer past its busy timeout, which is not the point.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })
    };
    let mut failures = Vec::new();
    for i in 0..150 {
        let event = EventRecord {
            namespace: "ns".to_owned(),
            execution: format!("run-{}", i % 4),
            sequence: 0,
            body: "{}".to_owned(),
        };
        if let Err(e) = store.append_event(event, Durability::Deferred).await {
            failures.push(e.to_string());
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    other.join().expect("the other connection");
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        failures.first()
    );
}

/// A call's insert writes no entry in the index by kind and no
/// AUTOINCREMENT counter (migration 11: two pages fewer a commit); other
/// kinds keep their entry there.
#[tokio::test]
async fn a_calls_insert_skips_the_kind_index_and_the_counter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("joch.db");
    let store = SqliteStore::open(&path).expect("open");
    for kind in ["ToolCall", "Policy"] {
        store
            .create(testsuite::record(kind, "ns", "x"), Durability::Sync)
            .await
            .expect("create");
    }
    let conn = Connection::open(&path).expect("raw");
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).expect(sql) };
    assert_eq!(
        count("SELECT COUNT(*) FROM objects INDEXED BY objects_by_kind WHERE created_at IS NULL"),
        1,
        "only the Policy is indexed by kind"
    );
    assert_eq!(count("SELECT COUNT(*) FROM objects"), 2);
    assert_eq!(
        count("SELECT COUNT(*) FROM sqlite_sequence WHERE name = 'objects'"),
        0
    );
}

/// A store of schema 10 (objects numbered by AUTOINCREMENT) keeps every
/// object, its `seq` and its place in lists through migration 11, and new
/// objects are numbered after the old ones.
#[tokio::test]
async fn migration_11_keeps_every_object_and_numbers_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("joch.db");
    {
        let conn = Connection::open(&path).expect("raw");
        for sql in &migrate::MIGRATIONS[..10] {
            conn.execute_batch(sql).expect("migration");
        }
        conn.pragma_update(None, "user_version", 10)
            .expect("version");
        conn.execute_batch(
            "INSERT INTO objects (seq, kind, namespace, name, resource_version, body, tool, created_at)
             VALUES (5, 'ToolCall', 'ns', 'old', 1, '{}', 't', 1000),
                    (6, 'Policy', 'ns', 'p', 1, '{}', NULL, NULL),
                    (7, 'ToolCall', 'ns', 'newer', 1, '{}', 't', 2000);",
        )
        .expect("rows");
    }
    let store = SqliteStore::open(&path).expect("migrates");
    let mut call = testsuite::record("ToolCall", "ns", "newest");
    call.index.created_ms = Some(3000);
    call.index.tool = Some("t".into());
    store.create(call, Durability::Sync).await.expect("create");
    let names = |q: ListQuery| {
        let store = &store;
        async move {
            let page = store.list(q).await.expect("list");
            page.items.into_iter().map(|r| r.name).collect::<Vec<_>>()
        }
    };
    let calls = ListQuery {
        kind: "ToolCall".into(),
        namespace: "ns".into(),
        limit: 10,
        ..ListQuery::default()
    };
    assert_eq!(names(calls.clone()).await, ["newest", "newer", "old"]);
    let mut by_tool = calls;
    by_tool.index.tool = Some("t".into());
    assert_eq!(names(by_tool).await, ["newest", "newer", "old"]);
    let policies = ListQuery {
        kind: "Policy".into(),
        namespace: "ns".into(),
        limit: 10,
        ..ListQuery::default()
    };
    assert_eq!(names(policies).await, ["p"]);
    let seq: i64 = Connection::open(&path)
        .expect("raw")
        .query_row("SELECT seq FROM objects WHERE name = 'newest'", [], |r| {
            r.get(0)
        })
        .expect("seq");
    assert_eq!(seq, 8);
}
