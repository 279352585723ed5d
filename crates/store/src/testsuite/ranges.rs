//! Lists narrowed to a creation-time range: the ledger's time filter.

use super::{query, record};
use crate::{Durability, ListQuery, Store, StoreErrorKind};

/// Stores ToolCalls created at these unix milliseconds, in this order (so
/// that `seq` and creation order differ), named by their time and
/// position; a call with no time and another kind's object, at 3000, too.
async fn calls_at(store: &dyn Store, times: &[i64]) {
    for (i, ms) in times.iter().enumerate() {
        let mut r = record("ToolCall", "ns", &format!("c{ms}-{i}"));
        r.index.created_ms = Some(*ms);
        r.index.tool = Some(if i % 2 == 0 { "even" } else { "odd" }.into());
        store.create(r, Durability::Sync).await.expect("create");
    }
    let mut untimed = record("ToolCall", "ns", "untimed");
    untimed.index.created_ms = None;
    store
        .create(untimed, Durability::Sync)
        .await
        .expect("create");
    let mut other = record("Artifact", "ns", "c3000-other");
    other.index.created_ms = Some(3_000);
    store.create(other, Durability::Sync).await.expect("create");
}

/// Every page's names, following `continue` tokens.
async fn pages(store: &dyn Store, mut q: ListQuery) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    loop {
        let page = store.list(q.clone()).await.expect("list");
        pages.push(page.items.iter().map(|r| r.name.clone()).collect());
        match page.continue_token {
            Some(token) => q.continue_from = Some(token),
            None => return pages,
        }
    }
}

fn ranged(since: Option<i64>, before: Option<i64>, limit: usize) -> ListQuery {
    ListQuery {
        created_since_ms: since,
        created_before_ms: before,
        ..query("ToolCall", "ns", limit)
    }
}

/// A range keeps calls created at or after its start and before its end,
/// newest created first (ties by `seq`, newest first), paged by keyset;
/// counts (bounded ones too) and index filters narrow alike, and a token
/// of the unranged order is refused.
pub async fn a_list_narrows_to_a_creation_range_and_pages(store: &dyn Store) {
    calls_at(store, &[1_000, 5_000, 2_000, 4_000, 3_000, 6_000, 4_000]).await;
    let names = |pages: Vec<Vec<String>>| pages.concat();
    assert_eq!(
        pages(store, ranged(Some(2_000), Some(6_000), 2)).await,
        vec![
            vec!["c5000-1", "c4000-6"],
            vec!["c4000-3", "c3000-4"],
            vec!["c2000-2"],
        ]
    );
    assert_eq!(
        names(pages(store, ranged(Some(4_000), None, 10)).await),
        ["c6000-5", "c5000-1", "c4000-6", "c4000-3"]
    );
    assert_eq!(
        names(pages(store, ranged(None, Some(2_001), 1)).await),
        ["c2000-2", "c1000-0"]
    );
    assert!(names(pages(store, ranged(Some(7_000), None, 10)).await).is_empty());
    let mut even = ranged(Some(2_000), Some(5_000), 10);
    even.index.tool = Some("even".into());
    assert_eq!(
        names(pages(store, even.clone()).await),
        ["c4000-6", "c3000-4", "c2000-2"]
    );
    assert_eq!(store.count(even.clone()).await.expect("count"), 3);
    let bounded = |cap| store.count_at_most(even.clone(), cap);
    assert_eq!(bounded(2).await.expect("count"), 2, "stops at its cap");
    assert_eq!(bounded(10).await.expect("count"), 3);

    let mut foreign = ranged(Some(0), None, 10);
    foreign.continue_from = Some("3".into());
    let refused = store.list(foreign).await.expect_err("a seq token");
    assert_eq!(refused.kind(), StoreErrorKind::InvalidArgument);
}

/// A namespace's ToolCalls, narrowed by no indexed column, list by
/// creation, newest first, with tokens of that order; narrowed by one (or
/// across namespaces) by `seq`; every other kind by `seq`, a creation time
/// of its own being no index of it.
pub async fn calls_list_by_creation_and_other_kinds_by_seq(store: &dyn Store) {
    for (name, ms, tool) in [("a", 3_000, "t"), ("b", 1_000, "t"), ("c", 2_000, "u")] {
        let mut r = record("ToolCall", "ns", name);
        r.index.created_ms = Some(ms);
        r.index.tool = Some(tool.into());
        store.create(r, Durability::Sync).await.expect("create");
    }
    for name in ["p1", "p2", "p3"] {
        let mut r = record("Policy", "ns", name);
        r.index.created_ms = Some(9_000);
        store.create(r, Durability::Sync).await.expect("create");
    }
    let all = pages(store, query("ToolCall", "ns", 2)).await;
    assert_eq!(all, vec![vec!["a", "c"], vec!["b"]]);
    let first = store.list(query("ToolCall", "ns", 2)).await.expect("list");
    let token = first.continue_token.expect("a second page");
    assert!(
        token.starts_with("2000."),
        "a token of creation order: {token}"
    );

    let mut by_tool = query("ToolCall", "ns", 10);
    by_tool.index.tool = Some("t".into());
    assert_eq!(pages(store, by_tool).await.concat(), ["b", "a"]);
    let everywhere = query("ToolCall", "", 10);
    assert_eq!(pages(store, everywhere).await.concat(), ["c", "b", "a"]);
    assert_eq!(
        pages(store, query("Policy", "ns", 2)).await,
        vec![vec!["p3", "p2"], vec!["p1"]]
    );
    assert_eq!(
        store.count(query("Policy", "ns", 0)).await.expect("count"),
        3
    );
    assert_eq!(
        store
            .count(query("ToolCall", "ns", 0))
            .await
            .expect("count"),
        3
    );

    // A call without a creation time (written around joch) is no row of
    // the list by creation, but one of every row's.
    let mut untimed = record("ToolCall", "ns", "u");
    untimed.index.created_ms = None;
    store
        .create(untimed, Durability::Sync)
        .await
        .expect("create");
    assert_eq!(
        pages(store, query("ToolCall", "ns", 10)).await.concat(),
        ["a", "c", "b"]
    );
    let every_row = ListQuery {
        every_row: true,
        ..query("ToolCall", "ns", 2)
    };
    assert_eq!(
        pages(store, every_row).await,
        vec![vec!["u", "c"], vec!["b", "a"]]
    );
}
