//! The behaviours every [`Store`] must have. Each function takes a fresh,
//! empty store and checks one behaviour; a store implementation's tests
//! invoke [`store_suite!`](crate::store_suite), which makes each its own
//! test, with stores of its own making. [`postgres`] is the one PostgreSQL
//! fixture of the store, end-to-end and bench runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use joch_core::LabelSelector;
use joch_core::object::IndexFields;

use crate::{Durability, ListQuery, Record, Store, StoreErrorKind};

mod audit;
mod costs;
mod keys;
mod lost_answers;
#[cfg(feature = "postgres")]
pub mod postgres;
mod ranges;
mod rates;
pub use audit::*;
pub use costs::*;
pub use keys::*;
pub use lost_answers::LostAnswers;
pub use ranges::*;
pub use rates::*;

/// One `#[tokio::test]` per behaviour, each on a new store from `$new`:
/// an async fn taking the test's name and returning
/// `Option<(Arc<dyn Store>, Cleanup)>` (`None` skips the test, as a store
/// whose server is not configured does); the cleanup runs after the
/// behaviour passed. A store implementation's tests invoke it once.
#[macro_export]
macro_rules! store_suite {
    ($new:path) => {
        $crate::store_suite!(@each $new;
            ref create_then_get_returns_the_same_record,
            ref create_refuses_a_taken_name,
            ref names_are_scoped_by_kind_and_namespace,
            ref update_checks_the_version,
            ref delete_checks_the_version_and_removes,
            ref list_is_newest_first_and_pages,
            ref list_filters_on_index_and_labels,
            ref list_refuses_a_foreign_continue_token,
            ref a_list_narrows_to_a_creation_range_and_pages,
            ref calls_list_by_creation_and_other_kinds_by_seq,
            ref deferred_writes_commit_with_the_next_synced_one,
            arc concurrent_writers_all_land,
            ref a_key_is_claimed_once,
            ref a_failed_create_leaves_its_key_free,
            ref keys_are_scoped_by_namespace_and_tool,
            ref expired_keys_are_replaced_and_purged,
            arc concurrent_claims_of_one_key_have_one_winner,
            ref events_are_numbered_per_execution_in_order,
            ref count_follows_the_index_columns,
            ref costs_sum_by_group_window_and_currency,
            ref audit_entries_chain_per_namespace,
            ref an_audited_create_lands_with_its_entry_or_not_at_all,
            ref a_settled_call_is_written_with_its_entry,
            ref heads_and_checkpoints_are_per_namespace,
            ref a_records_audit_entries_are_found_by_name,
            ref a_rate_cell_allows_its_burst_then_one_per_interval,
            arc concurrent_takers_share_one_allowance,
        );
    };
    (@each $new:path; $($how:ident $behaviour:ident,)*) => {
        $(
            #[tokio::test]
            async fn $behaviour() {
                let Some((store, cleanup)) = $new(stringify!($behaviour)).await else {
                    return;
                };
                $crate::store_suite!(@call $how $behaviour store);
                cleanup.await;
            }
        )*
    };
    (@call ref $behaviour:ident $store:ident) => {
        $crate::testsuite::$behaviour(&*$store).await
    };
    (@call arc $behaviour:ident $store:ident) => {
        $crate::testsuite::$behaviour($store.clone()).await
    };
}

/// What a store's maker hands [`store_suite!`] to run once the behaviour
/// passed: drops a database, removes a directory.
pub type Cleanup = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Events get 1, 2, 3... per execution, and list oldest first after a cursor.
pub async fn events_are_numbered_per_execution_in_order(store: &dyn Store) {
    let event = |execution: &str, body: &str| crate::EventRecord {
        namespace: "ns".to_owned(),
        execution: execution.to_owned(),
        sequence: 0,
        body: body.to_owned(),
    };
    let mut numbers = Vec::new();
    for (execution, body) in [("a", "1"), ("b", "1"), ("a", "2"), ("a", "3")] {
        numbers.push(
            store
                .append_event(event(execution, body), Durability::Sync)
                .await
                .expect("append"),
        );
    }
    assert_eq!(numbers, [1, 1, 2, 3]);
    let after_one = store.list_events("ns", "a", 1, 10).await.expect("list");
    let bodies: Vec<_> = after_one
        .iter()
        .map(|e| (e.sequence, e.body.as_str()))
        .collect();
    assert_eq!(bodies, [(2, "2"), (3, "3")]);
    assert_eq!(
        store
            .list_events("ns", "a", 0, 1)
            .await
            .expect("list")
            .len(),
        1
    );
    assert!(
        store
            .list_events("other", "a", 0, 10)
            .await
            .expect("list")
            .is_empty()
    );
}

/// A record of `kind`, with a body that names it; a ToolCall is stamped with a creation time, later
/// than the one made before it, as the engine stamps every call.
pub fn record(kind: &str, namespace: &str, name: &str) -> Record {
    static CREATED_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1 << 40);
    let created_ms = (kind == crate::CREATION_INDEXED)
        .then(|| CREATED_MS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    Record {
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        resource_version: 1,
        labels: BTreeMap::new(),
        index: IndexFields {
            created_ms,
            ..IndexFields::default()
        },
        body: format!(r#"{{"name":"{name}"}}"#),
    }
}

pub(crate) fn query(kind: &str, namespace: &str, limit: usize) -> ListQuery {
    ListQuery {
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        limit,
        ..ListQuery::default()
    }
}

/// What is written is what is read.
pub async fn create_then_get_returns_the_same_record(store: &dyn Store) {
    let mut r = record("Tool", "ns", "a.b");
    r.labels.insert("team".into(), "x".into());
    r.index.tool = Some("t".into());
    store
        .create(r.clone(), Durability::Sync)
        .await
        .expect("create");
    assert_eq!(store.get("Tool", "ns", "a.b").await.expect("get"), r);
    let missing = store.get("Tool", "ns", "nope").await.expect_err("missing");
    assert_eq!(missing.kind(), StoreErrorKind::NotFound);
}

/// A second create of the same name fails and keeps the first.
pub async fn create_refuses_a_taken_name(store: &dyn Store) {
    store
        .create(record("Tool", "ns", "a"), Durability::Sync)
        .await
        .expect("create");
    let mut again = record("Tool", "ns", "a");
    again.body = r#"{"other":true}"#.into();
    let err = store
        .create(again, Durability::Sync)
        .await
        .expect_err("duplicate");
    assert_eq!(err.kind(), StoreErrorKind::AlreadyExists);
    assert_eq!(
        store.get("Tool", "ns", "a").await.expect("get").body,
        record("Tool", "ns", "a").body
    );
}

/// The same name in another namespace or kind is another object.
pub async fn names_are_scoped_by_kind_and_namespace(store: &dyn Store) {
    for (kind, ns) in [("Tool", "a"), ("Tool", "b"), ("ToolCall", "a")] {
        store
            .create(record(kind, ns, "same"), Durability::Sync)
            .await
            .expect("create");
    }
    assert_eq!(
        store
            .list(query("Tool", "a", 10))
            .await
            .expect("list")
            .items
            .len(),
        1
    );
    store
        .delete("Tool", "a", "same", None)
        .await
        .expect("delete");
    store
        .get("Tool", "b", "same")
        .await
        .expect("other namespace kept");
    store
        .get("ToolCall", "a", "same")
        .await
        .expect("other kind kept");
}

/// Updates apply only against the current version.
pub async fn update_checks_the_version(store: &dyn Store) {
    store
        .create(record("Tool", "ns", "a"), Durability::Sync)
        .await
        .expect("create");
    let mut v2 = record("Tool", "ns", "a");
    v2.resource_version = 2;
    v2.body = r#"{"v":2}"#.into();
    store
        .update(v2.clone(), 1, Durability::Sync)
        .await
        .expect("update from 1");
    let stale = store
        .update(v2.clone(), 1, Durability::Sync)
        .await
        .expect_err("stale");
    assert_eq!(stale.kind(), StoreErrorKind::Conflict);
    assert_eq!(store.get("Tool", "ns", "a").await.expect("get"), v2);
    let missing = store
        .update(record("Tool", "ns", "zz"), 1, Durability::Sync)
        .await
        .expect_err("missing");
    assert_eq!(missing.kind(), StoreErrorKind::NotFound);
}

/// Deletes return the removed record and honour a version precondition.
pub async fn delete_checks_the_version_and_removes(store: &dyn Store) {
    store
        .create(record("Tool", "ns", "a"), Durability::Sync)
        .await
        .expect("create");
    let stale = store
        .delete("Tool", "ns", "a", Some(7))
        .await
        .expect_err("stale");
    assert_eq!(stale.kind(), StoreErrorKind::Conflict);
    let removed = store
        .delete("Tool", "ns", "a", Some(1))
        .await
        .expect("delete");
    assert_eq!(removed, record("Tool", "ns", "a"));
    assert_eq!(
        store.get("Tool", "ns", "a").await.expect_err("gone").kind(),
        StoreErrorKind::NotFound
    );
    let again = store
        .delete("Tool", "ns", "a", None)
        .await
        .expect_err("gone");
    assert_eq!(again.kind(), StoreErrorKind::NotFound);
}

/// Lists come newest first, in pages that together hold every item once.
pub async fn list_is_newest_first_and_pages(store: &dyn Store) {
    for i in 0..7 {
        store
            .create(record("ToolCall", "ns", &format!("c{i}")), Durability::Sync)
            .await
            .expect("create");
    }
    let mut names = Vec::new();
    let mut token = None;
    loop {
        let mut q = query("ToolCall", "ns", 3);
        q.continue_from = token;
        let page = store.list(q).await.expect("list");
        assert!(page.items.len() <= 3);
        names.extend(page.items.into_iter().map(|r| r.name));
        token = page.continue_token;
        if token.is_none() {
            break;
        }
    }
    assert_eq!(names, ["c6", "c5", "c4", "c3", "c2", "c1", "c0"]);
}

/// Index columns and label selectors narrow a list.
pub async fn list_filters_on_index_and_labels(store: &dyn Store) {
    for (name, tool, phase, team) in [
        ("1", "a", "Succeeded", "x"),
        ("2", "b", "Failed", "y"),
        ("3", "a", "Failed", "y"),
    ] {
        let mut r = record("ToolCall", "ns", name);
        r.index.tool = Some(tool.into());
        r.index.phase = Some(phase.into());
        r.labels.insert("team".into(), team.into());
        store.create(r, Durability::Sync).await.expect("create");
    }
    let names = |q: ListQuery| async move {
        store
            .list(q)
            .await
            .expect("list")
            .items
            .into_iter()
            .map(|r| r.name)
            .collect::<Vec<_>>()
    };
    let mut by_tool = query("ToolCall", "ns", 10);
    by_tool.index.tool = Some("a".into());
    assert_eq!(names(by_tool.clone()).await, ["3", "1"]);
    by_tool.index.phase = Some("Failed".into());
    assert_eq!(names(by_tool).await, ["3"]);
    let mut by_label = query("ToolCall", "ns", 1);
    by_label.selector = LabelSelector::parse("team=y").expect("selector");
    let page = store.list(by_label.clone()).await.expect("list");
    assert_eq!(page.items[0].name, "3");
    by_label.continue_from = page.continue_token;
    assert_eq!(names(by_label).await, ["2"]);
}

/// A token the store never issued is the caller's mistake, not an outage.
pub async fn list_refuses_a_foreign_continue_token(store: &dyn Store) {
    let mut q = query("Tool", "ns", 10);
    q.continue_from = Some("not-a-token".into());
    assert_eq!(
        store.list(q).await.expect_err("bad token").kind(),
        StoreErrorKind::InvalidArgument
    );
}

/// Deferred writes are visible once a later synced write is acknowledged.
pub async fn deferred_writes_commit_with_the_next_synced_one(store: &dyn Store) {
    let pending = record("ToolCall", "ns", "d");
    store
        .create(pending.clone(), Durability::Deferred)
        .await
        .expect("deferred");
    let mut done = pending;
    done.resource_version = 2;
    store
        .update(done.clone(), 1, Durability::Sync)
        .await
        .expect("synced");
    assert_eq!(store.get("ToolCall", "ns", "d").await.expect("get"), done);
}

/// Many concurrent writers: every write lands exactly once.
pub async fn concurrent_writers_all_land(store: Arc<dyn Store>) {
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                for i in 0..50 {
                    store
                        .create(
                            record("ToolCall", "ns", &format!("t{t}-{i}")),
                            Durability::Sync,
                        )
                        .await
                        .expect("create");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer task");
    }
    let page = store
        .list(query("ToolCall", "ns", 10_000))
        .await
        .expect("list");
    let mut names: Vec<_> = page.items.into_iter().map(|r| r.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 800);
}
