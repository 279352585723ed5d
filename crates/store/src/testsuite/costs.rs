//! Cost sums and counts over the index columns.

use super::{query, record};
use crate::{Durability, Store};

/// Cost totals: exact sums, grouped, filtered by window, scope and currency;
/// calls without a cost do not count, and a cost set by an update does.
pub async fn costs_sum_by_group_window_and_currency(store: &dyn Store) {
    use crate::{CostGroup, CostQuery, CostTotal};
    use joch_core::object::IndexedCost;
    let calls = [
        (
            "1",
            "ns",
            "search",
            "bot",
            "run-1",
            Some((10_000, "USD", 1_000)),
        ),
        (
            "2",
            "ns",
            "search",
            "bot",
            "run-2",
            Some((20_000, "USD", 2_000)),
        ),
        (
            "3",
            "ns",
            "refund",
            "bot",
            "run-1",
            Some((500_000, "USD", 3_000)),
        ),
        (
            "4",
            "ns",
            "refund",
            "clerk",
            "run-3",
            Some((7, "credits", 3_000)),
        ),
        ("5", "ns", "search", "bot", "run-1", None),
        (
            "6",
            "other",
            "search",
            "bot",
            "run-9",
            Some((1_000_000, "USD", 3_000)),
        ),
    ];
    for (name, ns, tool, agent, execution, cost) in calls {
        let mut r = record("ToolCall", ns, name);
        r.index.tool = Some(tool.into());
        r.index.agent = Some(agent.into());
        r.index.execution = Some(execution.into());
        r.index.cost = cost.map(|(micros, currency, at_ms)| IndexedCost {
            micros,
            currency: currency.into(),
            at_ms,
        });
        store.create(r, Durability::Sync).await.expect("create");
    }
    let totals = |q: CostQuery| async move { store.cost_totals(q).await.expect("costs") };
    let total = |key: &str, currency: &str, micros: i64, calls: u64| CostTotal {
        key: key.into(),
        currency: currency.into(),
        micros,
        calls,
    };
    let ns = |group_by| CostQuery {
        namespace: "ns".into(),
        group_by,
        ..CostQuery::default()
    };
    assert_eq!(
        totals(ns(CostGroup::Tool)).await,
        [
            total("refund", "USD", 500_000, 1),
            total("search", "USD", 30_000, 2),
            total("refund", "credits", 7, 1),
        ]
    );
    let run_1 = CostQuery {
        execution: Some("run-1".into()),
        ..ns(CostGroup::All)
    };
    assert_eq!(totals(run_1).await, [total("", "USD", 510_000, 2)]);
    let since = CostQuery {
        since_ms: Some(2_000),
        currency: Some("USD".into()),
        ..ns(CostGroup::Agent)
    };
    assert_eq!(totals(since).await, [total("bot", "USD", 520_000, 2)]);
    let everywhere = CostQuery {
        currency: Some("USD".into()),
        group_by: CostGroup::Namespace,
        ..CostQuery::default()
    };
    assert_eq!(
        totals(everywhere).await,
        [
            total("other", "USD", 1_000_000, 1),
            total("ns", "USD", 530_000, 3)
        ]
    );

    // A call that settles later gains its cost by an update.
    let mut r = store.get("ToolCall", "ns", "5").await.expect("get");
    r.index.cost = Some(IndexedCost {
        micros: 1,
        currency: "USD".into(),
        at_ms: 4_000,
    });
    let version = r.resource_version;
    r.resource_version += 1;
    store
        .update(r, version, Durability::Sync)
        .await
        .expect("update");
    let later = CostQuery {
        since_ms: Some(4_000),
        ..ns(CostGroup::All)
    };
    assert_eq!(totals(later).await, [total("", "USD", 1, 1)]);
}

/// Counts use the same index filters as lists, checksum included.
pub async fn count_follows_the_index_columns(store: &dyn Store) {
    for (name, execution, checksum) in [
        ("1", "run", "a"),
        ("2", "run", "a"),
        ("3", "run", "b"),
        ("4", "other", "a"),
    ] {
        let mut r = record("ToolCall", "ns", name);
        r.index.execution = Some(execution.into());
        r.index.checksum = Some(checksum.into());
        store.create(r, Durability::Sync).await.expect("create");
    }
    let mut q = query("ToolCall", "ns", 1);
    assert_eq!(
        store.count(q.clone()).await.expect("count"),
        4,
        "limit does not cap a count"
    );
    q.index.execution = Some("run".into());
    q.index.checksum = Some("a".into());
    assert_eq!(store.count(q.clone()).await.expect("count"), 2);
    q.namespace = "elsewhere".into();
    assert_eq!(store.count(q).await.expect("count"), 0);
}
