//! Rate cells: the allowance replicas share.

use std::sync::Arc;

use crate::{RateCell, Store};

fn cell(namespace: &str, limit: &str, key: &str) -> RateCell {
    RateCell {
        namespace: namespace.to_owned(),
        limit: limit.to_owned(),
        key: key.to_owned(),
        interval_ms: 1_000,
        tolerance_ms: 3_000,
    }
}

/// A burst of three, then one a second; cells are separate per namespace,
/// limit and key.
pub async fn a_rate_cell_allows_its_burst_then_one_per_interval(store: &dyn Store) {
    let now = 1_700_000_000_000;
    let ours = cell("ns", "calls@60/min", "agent-a");
    for _ in 0..3 {
        assert_eq!(store.take_rate(&ours, now).await.ok(), Some(None));
    }
    assert_eq!(store.take_rate(&ours, now).await.ok(), Some(Some(1_000)));
    assert_eq!(store.take_rate(&ours, now + 999).await.ok(), Some(Some(1)));
    assert_eq!(store.take_rate(&ours, now + 1_000).await.ok(), Some(None));
    assert_eq!(
        store.take_rate(&ours, now + 1_000).await.ok(),
        Some(Some(1_000))
    );
    for other in [
        cell("ns", "calls@60/min", "agent-b"),
        cell("ns", "calls@30/min", "agent-a"),
        cell("other", "calls@60/min", "agent-a"),
    ] {
        assert_eq!(
            store.take_rate(&other, now).await.ok(),
            Some(None),
            "{other:?}"
        );
    }
    // A cell whose allowance is whole again can go: at `now + 1s` the three
    // others are (one call each), ours only at `now + 4s` (four calls).
    assert_eq!(store.purge_expired_keys(now + 1_000).await.ok(), Some(3));
    assert_eq!(store.purge_expired_keys(now + 3_999).await.ok(), Some(0));
    assert_eq!(store.purge_expired_keys(now + 4_000).await.ok(), Some(1));
    for _ in 0..3 {
        assert_eq!(store.take_rate(&ours, now + 4_000).await.ok(), Some(None));
    }
}

/// Many takers at once get exactly the burst between them.
pub async fn concurrent_takers_share_one_allowance(store: Arc<dyn Store>) {
    let now = 1_700_000_000_000;
    let takers: Vec<_> = (0..20)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.take_rate(&cell("ns", "all", ""), now).await })
        })
        .collect();
    let mut taken = 0;
    for taker in takers {
        if let Ok(Ok(None)) = taker.await {
            taken += 1;
        }
    }
    assert_eq!(taken, 3, "the burst, and no more");
}
