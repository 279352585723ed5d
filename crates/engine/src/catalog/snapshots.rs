//! Per-namespace snapshots of configuration the call path reads on every
//! call (a tool, the policies, the budgets), so that a call does not pay a
//! store read for each. Every write of those kinds goes through this
//! engine, which drops the snapshots it makes stale.
//!
//! A reader that loaded a snapshot while a write landed must not store it:
//! each cache has a generation, bumped by every invalidation, and a
//! snapshot is kept only if the generation did not move while it loaded.
//!
//! Keys are namespaces (or namespace and tool), which a client may name
//! freely: past [`MAX_ENTRIES`] the snapshots are emptied and reloaded as
//! needed, so memory stays bounded whatever names arrive.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Most snapshots one cache keeps.
pub(crate) const MAX_ENTRIES: usize = 4096;

/// Snapshots of `T` by key.
pub(crate) struct Snapshots<T> {
    generation: AtomicU64,
    entries: RwLock<HashMap<String, Arc<T>>>,
}

impl<T> Default for Snapshots<T> {
    fn default() -> Self {
        Self {
            generation: AtomicU64::new(0),
            entries: RwLock::new(HashMap::new()),
        }
    }
}

impl<T> Snapshots<T> {
    /// The snapshot for `key`, or `load`'s answer, kept unless a write
    /// intervened.
    pub(crate) async fn get_or_load<E, F>(&self, key: &str, load: F) -> Result<Arc<T>, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        if let Some(hit) = self.read().get(key) {
            return Ok(hit.clone());
        }
        let generation = self.generation.load(Ordering::Acquire);
        let loaded = Arc::new(load.await?);
        let mut entries = self.write();
        if self.generation.load(Ordering::Acquire) == generation {
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
            entries.insert(key.to_owned(), loaded.clone());
        }
        Ok(loaded)
    }

    /// Drops every snapshot: some of them may be stale.
    pub(crate) fn invalidate(&self) {
        let mut entries = self.write();
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.clear();
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<T>>> {
        self.entries.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<T>>> {
        self.entries.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_snapshot_is_served_until_invalidated() {
        let cache = Snapshots::<u32>::default();
        let first = cache.get_or_load("ns", async { Ok::<_, ()>(1) }).await;
        assert_eq!(first.map(|v| *v), Ok(1));
        let cached = cache.get_or_load("ns", async { Ok::<_, ()>(2) }).await;
        assert_eq!(cached.map(|v| *v), Ok(1), "served from the snapshot");
        cache.invalidate();
        let reloaded = cache.get_or_load("ns", async { Ok::<_, ()>(3) }).await;
        assert_eq!(reloaded.map(|v| *v), Ok(3));
    }

    #[tokio::test]
    async fn a_load_raced_by_a_write_is_not_kept() {
        let cache = Snapshots::<u32>::default();
        let stale = cache
            .get_or_load("ns", async {
                cache.invalidate(); // a write lands while the old value loads
                Ok::<_, ()>(1)
            })
            .await;
        assert_eq!(stale.map(|v| *v), Ok(1), "the loader still gets its answer");
        let fresh = cache.get_or_load("ns", async { Ok::<_, ()>(2) }).await;
        assert_eq!(fresh.map(|v| *v), Ok(2), "but it was not kept");
    }

    #[tokio::test]
    async fn fresh_keys_do_not_grow_it_past_its_bound() {
        let cache = Snapshots::<u32>::default();
        for n in 0..(3 * MAX_ENTRIES) {
            let key = format!("ns-{n}");
            let _ = cache.get_or_load(&key, async { Ok::<_, ()>(1) }).await;
            assert!(cache.read().len() <= MAX_ENTRIES);
        }
        assert!(!cache.read().is_empty(), "it still caches");
    }

    #[tokio::test]
    async fn failures_are_not_cached() {
        let cache = Snapshots::<u32>::default();
        assert_eq!(
            cache
                .get_or_load("ns", async { Err::<u32, _>("down") })
                .await,
            Err("down")
        );
        let loaded = cache.get_or_load("ns", async { Ok::<_, &str>(5) }).await;
        assert_eq!(loaded.map(|v| *v), Ok(5));
    }
}
