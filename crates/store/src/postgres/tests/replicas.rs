//! Several stores on one database, as several replicas have: separate
//! pools, nothing shared but the database. Two stores in one process race
//! exactly as two processes would, since every guarantee lives in the
//! database.

use std::sync::Arc;

use joch_core::audit::{GENESIS, chain_hash};
use sqlx_core::connection::Connection;
use sqlx_core::executor::Executor;
use sqlx_postgres::PgConnection;

use super::{Databases, server};
use crate::postgres::{PostgresOptions, PostgresStore};
use crate::testsuite::{claim, record};
use crate::{Durability, EventRecord, ListQuery, Store, StoreError, StoreErrorKind};

/// Two stores on a new database whose sessions default to REPEATABLE READ:
/// the store's guarantees must not hang on the server's default isolation.
async fn replicas(databases: &Databases) -> [Arc<PostgresStore>; 2] {
    let url = databases.create().await;
    let mut conn = PgConnection::connect(&url).await.expect("connect");
    conn.execute(
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = %L',
         current_database(), 'repeatable read'); END $$",
    )
    .await
    .expect("set the default isolation");
    conn.close().await.expect("close");
    let (a, b) = tokio::join!(
        PostgresStore::connect(&url, PostgresOptions::default()),
        PostgresStore::connect(&url, PostgresOptions::default()),
    );
    [
        Arc::new(a.expect("replica a")),
        Arc::new(b.expect("replica b")),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_racing_for_one_key_have_one_winner() {
    let Some(server) = server("replicas_racing_for_one_key_have_one_winner") else {
        return;
    };
    let databases = Databases::new(server);
    let replicas = replicas(&databases).await;
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let store = Arc::clone(&replicas[i % 2]);
            tokio::spawn(async move {
                let call = record("ToolCall", "ns", &format!("c{i}"));
                match store
                    .create_claimed(call, claim("t", "k", &format!("s{i}"), 0), Durability::Sync)
                    .await
                {
                    Ok(()) => Some(i),
                    Err(e) => {
                        assert_eq!(e.kind(), StoreErrorKind::KeyClaimed, "{e}");
                        None
                    }
                }
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        winners.extend(task.await.expect("task"));
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let winner = format!("c{}", winners[0]);
    for store in &replicas {
        let q = ListQuery {
            kind: "ToolCall".into(),
            namespace: "ns".into(),
            limit: 100,
            ..ListQuery::default()
        };
        let names: Vec<_> = store
            .list(q)
            .await
            .expect("list")
            .items
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, [winner.as_str()]);
        let held = store
            .create_claimed(
                record("ToolCall", "ns", "late"),
                claim("t", "k", "late", 1),
                Durability::Sync,
            )
            .await
            .expect_err("held");
        assert!(
            matches!(&held, StoreError::KeyClaimed { call, .. } if *call == winner),
            "{held:?}"
        );
    }
    drop(replicas);
    databases.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_updating_one_version_have_one_winner() {
    let Some(server) = server("replicas_updating_one_version_have_one_winner") else {
        return;
    };
    let databases = Databases::new(server);
    let replicas = replicas(&databases).await;
    replicas[0]
        .create(record("Tool", "ns", "t"), Durability::Sync)
        .await
        .expect("create");
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let store = Arc::clone(&replicas[i % 2]);
            tokio::spawn(async move {
                let mut next = record("Tool", "ns", "t");
                next.resource_version = 2;
                next.body = format!(r#"{{"writer":{i}}}"#);
                match store.update(next, 1, Durability::Sync).await {
                    Ok(()) => Some(i),
                    Err(e) => {
                        assert_eq!(e.kind(), StoreErrorKind::Conflict, "{e}");
                        None
                    }
                }
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        winners.extend(task.await.expect("task"));
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let stored = replicas[1].get("Tool", "ns", "t").await.expect("get");
    assert_eq!(stored.body, format!(r#"{{"writer":{}}}"#, winners[0]));
    drop(replicas);
    databases.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_appending_audit_keep_one_unbroken_chain() {
    let Some(server) = server("replicas_appending_audit_keep_one_unbroken_chain") else {
        return;
    };
    let databases = Databases::new(server);
    let replicas = replicas(&databases).await;
    const WRITERS: usize = 16;
    const EACH: usize = 10;
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = Arc::clone(&replicas[w % 2]);
            tokio::spawn(async move {
                let mut numbers = Vec::new();
                for i in 0..EACH {
                    // Some entries ride on an update, as a settled call's
                    // do (numbered once linked); the others are appended.
                    if i % 3 == 0 {
                        let name = format!("w{w}-{i}");
                        store
                            .create(record("ToolCall", "ns", &name), Durability::Sync)
                            .await
                            .expect("create");
                        let mut done = record("ToolCall", "ns", &name);
                        done.resource_version = 2;
                        store
                            .update_audited(done, 1, format!("w{w} e{i}"), Durability::Deferred)
                            .await
                            .expect("update_audited");
                    } else {
                        let appended =
                            store.append_audit("ns", format!("w{w} e{i}"), Durability::Sync);
                        numbers.push(appended.await.expect("append"));
                    }
                }
                numbers
            })
        })
        .collect();
    let mut numbers = Vec::new();
    for task in tasks {
        numbers.extend(task.await.expect("task"));
    }
    let appended = numbers.len();
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers.len(), appended, "no number given twice");
    let total = (WRITERS * EACH) as u64;
    assert!(numbers.iter().all(|&n| (1..=total).contains(&n)));

    for store in &replicas {
        let chain = store.list_audit("ns", 0, 1000).await.expect("list");
        assert_eq!(chain.len() as u64, total);
        let mut prev = GENESIS.to_owned();
        for (i, entry) in chain.iter().enumerate() {
            assert_eq!(entry.seq, i as u64 + 1);
            assert_eq!(
                entry.prev, prev,
                "entry {} links to the one before",
                entry.seq
            );
            assert_eq!(entry.hash, chain_hash(&prev, &entry.body));
            prev = entry.hash.clone();
        }
        let mut bodies: Vec<_> = chain.iter().map(|e| e.body.clone()).collect();
        bodies.sort();
        bodies.dedup();
        assert_eq!(bodies.len() as u64, total, "every entry landed once");
    }
    drop(replicas);
    databases.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_appending_events_share_one_numbering() {
    let Some(server) = server("replicas_appending_events_share_one_numbering") else {
        return;
    };
    let databases = Databases::new(server);
    let replicas = replicas(&databases).await;
    let tasks: Vec<_> = (0..16)
        .map(|w| {
            let store = Arc::clone(&replicas[w % 2]);
            tokio::spawn(async move {
                let mut numbers = Vec::new();
                for i in 0..10 {
                    let event = EventRecord {
                        namespace: "ns".into(),
                        execution: "run".into(),
                        sequence: 0,
                        body: format!("w{w} e{i}"),
                    };
                    numbers.push(
                        store
                            .append_event(event, Durability::Deferred)
                            .await
                            .expect("append"),
                    );
                }
                numbers
            })
        })
        .collect();
    let mut numbers = Vec::new();
    for task in tasks {
        numbers.extend(task.await.expect("task"));
    }
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=160).collect::<Vec<_>>());
    let events = replicas[1]
        .list_events("ns", "run", 0, 1000)
        .await
        .expect("list");
    let sequences: Vec<_> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (1..=160).collect::<Vec<_>>());
    drop(replicas);
    databases.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_at_once_migrate_once() {
    let Some(server) = server("replicas_starting_at_once_migrate_once") else {
        return;
    };
    let databases = Databases::new(server);
    let url = databases.create().await;
    let opening: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(
                async move { PostgresStore::connect(&url, PostgresOptions::default()).await },
            )
        })
        .collect();
    let mut stores = Vec::new();
    for task in opening {
        stores.push(task.await.expect("task").expect("every replica opens"));
    }
    for store in &stores {
        store.ping().await.expect("ping");
    }
    drop(stores);
    databases.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_replica_hears_the_others_commits() {
    let Some(server) = server("each_replica_hears_the_others_commits") else {
        return;
    };
    let databases = Databases::new(server);
    let replicas = replicas(&databases).await;
    let mut heard = replicas[1]
        .changes()
        .expect("a shared store reports changes");
    // The listener connects in the background: write until it hears one.
    let expected = crate::Change {
        kind: "ToolCall".into(),
        namespace: "ns".into(),
        name: "c".into(),
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    replicas[0]
        .create(record("ToolCall", "ns", "c"), Durability::Sync)
        .await
        .expect("create");
    let mut version = 1;
    loop {
        let wait = std::time::Duration::from_millis(200);
        if let Ok(change) = tokio::time::timeout(wait, heard.recv()).await {
            if change.expect("receive") == expected {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no change heard within 10 s"
        );
        let mut again = record("ToolCall", "ns", "c");
        again.resource_version = version + 1;
        replicas[0]
            .update(again, version, Durability::Sync)
            .await
            .expect("update");
        version += 1;
    }
    let event = EventRecord {
        namespace: "ns".into(),
        execution: "run".into(),
        sequence: 0,
        body: "e".into(),
    };
    replicas[0]
        .append_event(event, Durability::Sync)
        .await
        .expect("append");
    // Changes of "c" the loop made after the one it heard may come first,
    // and so may the "anything may have changed" of a listener that
    // connected late (seen once under load).
    let change = loop {
        let change = tokio::time::timeout_at(deadline, heard.recv())
            .await
            .expect("no event heard")
            .expect("receive");
        if change != expected && change != crate::Change::anything() {
            break change;
        }
    };
    assert_eq!(
        (change.kind.as_str(), change.name.as_str()),
        ("Event", "run")
    );
    drop(replicas);
    databases.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_hears_its_own_commits_at_once_and_once() {
    let Some(server) = server("a_store_hears_its_own_commits_at_once_and_once") else {
        return;
    };
    let databases = Databases::new(server);
    let replicas = replicas(&databases).await;
    let mut heard = replicas[0]
        .changes()
        .expect("a shared store reports changes");
    replicas[0]
        .create(record("ToolCall", "ns", "mine"), Durability::Sync)
        .await
        .expect("create");
    // Handed over before the write returns, without a trip to the server
    // (after the other replica's `*` as it started, maybe).
    let change = loop {
        match heard.try_recv().expect("heard as the write returns") {
            change if change == crate::Change::anything() => continue,
            change => break change,
        }
    };
    assert_eq!(
        (change.kind.as_str(), change.name.as_str()),
        ("ToolCall", "mine")
    );
    // Its own notification, which the other replica hears, is not heard
    // here again (the other replica's `*` as it started may be).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(500);
    while let Ok(again) = tokio::time::timeout_at(deadline, heard.recv()).await {
        let again = again.expect("receive");
        assert_eq!(again, crate::Change::anything(), "heard again");
    }
    drop(replicas);
    databases.drop_all().await;
}
