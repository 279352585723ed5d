//! A store whose writes land but whose answers can be lost, as when the
//! database dies between a commit and its reply: the write is kept, and
//! the writer hears `Unavailable`. Wraps a real store, for the tests of
//! what a caller does when it cannot know whether its write landed.

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use crate::{
    AuditRecord, Change, CostQuery, CostTotal, Durability, EventRecord, IdempotencyClaim,
    ListQuery, Page, RateCell, Record, Store, StoreError,
};

/// `inner`, but the answers of the next [`lose`](Self::lose)`(n)` writes
/// that create a record are lost once each has landed.
pub struct LostAnswers<S> {
    inner: S,
    to_lose: AtomicUsize,
}

impl<S: Store> LostAnswers<S> {
    /// `inner`, every answer kept until [`lose`](Self::lose) is called.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            to_lose: AtomicUsize::new(0),
        }
    }

    /// Loses the answers of the next `n` creates.
    pub fn lose(&self, n: usize) {
        self.to_lose.store(n, Ordering::SeqCst);
    }

    /// The answer the writer hears to `written`, a create that landed or not.
    fn heard<T>(&self, written: Result<T, StoreError>) -> Result<T, StoreError> {
        let take = |n: usize| n.checked_sub(1);
        match written {
            Ok(_)
                if self
                    .to_lose
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take)
                    .is_ok() =>
            {
                Err(StoreError::Unavailable("the answer was lost".to_owned()))
            }
            other => other,
        }
    }
}

#[async_trait]
impl<S: Store> Store for LostAnswers<S> {
    async fn create(&self, record: Record, durability: Durability) -> Result<(), StoreError> {
        self.heard(self.inner.create(record, durability).await)
    }

    async fn create_claimed(
        &self,
        record: Record,
        claim: IdempotencyClaim,
        durability: Durability,
    ) -> Result<(), StoreError> {
        self.heard(self.inner.create_claimed(record, claim, durability).await)
    }

    async fn create_audited(
        &self,
        record: Record,
        audit: String,
        durability: Durability,
    ) -> Result<(), StoreError> {
        self.heard(self.inner.create_audited(record, audit, durability).await)
    }

    async fn purge_expired_keys(&self, now_ms: i64) -> Result<usize, StoreError> {
        self.inner.purge_expired_keys(now_ms).await
    }

    async fn update(
        &self,
        record: Record,
        expected_version: u64,
        durability: Durability,
    ) -> Result<(), StoreError> {
        self.inner
            .update(record, expected_version, durability)
            .await
    }

    async fn update_audited(
        &self,
        record: Record,
        expected_version: u64,
        audit: String,
        durability: Durability,
    ) -> Result<(), StoreError> {
        let inner = &self.inner;
        inner
            .update_audited(record, expected_version, audit, durability)
            .await
    }

    async fn delete(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        expected_version: Option<u64>,
    ) -> Result<Record, StoreError> {
        let inner = &self.inner;
        inner.delete(kind, namespace, name, expected_version).await
    }

    async fn get(&self, kind: &str, namespace: &str, name: &str) -> Result<Record, StoreError> {
        self.inner.get(kind, namespace, name).await
    }

    async fn list(&self, query: ListQuery) -> Result<Page, StoreError> {
        self.inner.list(query).await
    }

    async fn append_event(
        &self,
        event: EventRecord,
        durability: Durability,
    ) -> Result<u64, StoreError> {
        self.inner.append_event(event, durability).await
    }

    async fn append_audit(
        &self,
        namespace: &str,
        body: String,
        durability: Durability,
    ) -> Result<u64, StoreError> {
        self.inner.append_audit(namespace, body, durability).await
    }

    async fn list_audit(
        &self,
        namespace: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        self.inner.list_audit(namespace, after, limit).await
    }

    async fn audit_of(&self, namespace: &str, name: &str) -> Result<Vec<AuditRecord>, StoreError> {
        self.inner.audit_of(namespace, name).await
    }

    async fn audit_heads(&self) -> Result<Vec<AuditRecord>, StoreError> {
        self.inner.audit_heads().await
    }

    async fn list_events(
        &self,
        namespace: &str,
        execution: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let inner = &self.inner;
        inner.list_events(namespace, execution, after, limit).await
    }

    async fn count(&self, query: ListQuery) -> Result<u64, StoreError> {
        self.inner.count(query).await
    }

    async fn count_at_most(&self, query: ListQuery, cap: u64) -> Result<u64, StoreError> {
        self.inner.count_at_most(query, cap).await
    }

    async fn cost_totals(&self, query: CostQuery) -> Result<Vec<CostTotal>, StoreError> {
        self.inner.cost_totals(query).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }

    async fn take_rate(&self, cell: &RateCell, now_ms: i64) -> Result<Option<u64>, StoreError> {
        self.inner.take_rate(cell, now_ms).await
    }

    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<Change>> {
        self.inner.changes()
    }
}
