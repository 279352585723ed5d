//! The shared store for several replicas: one PostgreSQL database.
//!
//! Every joch replica opens its own connection pool on the same database;
//! the database, not the process, keeps the store's promises:
//! - an idempotency claim is one `INSERT ... ON CONFLICT` that replaces a
//!   claim only once it has expired, in the same transaction as the call's
//!   insert, so one key admits one call across all replicas;
//! - `update` and `delete` compare `resource_version` in their `WHERE`
//!   clause, so of two replicas writing the same version one gets `Conflict`;
//! - an event append, and the link of audit entries into their chain
//!   (`chain.rs`), first lock the chain's head row (an upsert on
//!   `event_heads` or `audit_heads`) until they commit, so appends to one
//!   execution or namespace take turns: numbers are never shared or
//!   skipped, the audit chain never forks, and a reader that sees entry N
//!   sees all entries before it;
//! - creates and updates, audited or not, queue for a batcher task that
//!   commits all those waiting in one transaction (`batches.rs`): concurrent
//!   calls share one commit and one WAL flush. An audit entry is queued in
//!   its write's transaction and linked after it commits, so no write waits
//!   for another replica's audit lock. (A create that claims an idempotency
//!   key, a delete and an event append commit on their own.)
//!
//! Every acknowledged write has committed, whatever its [`Durability`]:
//! PostgreSQL already flushes the commits of concurrent sessions together,
//! so deferring ours would save little, and the difference would be a reply
//! that a crash could take back. (As with any PostgreSQL client, "committed" means
//! "durable" only while the server runs with `synchronous_commit` on, its
//! default.)

mod batches;
mod blobs;
mod bulk;
mod chain;
mod changes;
mod migrate;
mod reads;
mod statistics;
mod writes;

use std::time::Duration;

use async_trait::async_trait;
pub use blobs::PostgresBlobs;
use sqlx_core::executor::Executor;
use sqlx_postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::{
    AuditRecord, CostQuery, CostTotal, Durability, EventRecord, IdempotencyClaim, ListQuery, Page,
    RateCell, Record, Store, StoreError,
};

/// How a [`PostgresStore`] uses the database.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Most connections this store's pool opens (default 16). Each replica
    /// has its own pool; the server's `max_connections` bounds their sum.
    pub max_connections: u32,
    /// How long a call waits for a connection (opening one if the pool has
    /// room) before failing with `Unavailable` (default 5 s). While the
    /// server is down, every call fails after this long.
    pub acquire_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
        }
    }
}

/// Every connection's isolation level. The claims and appends rely on READ
/// COMMITTED: a statement that waited for a row lock then acts on the
/// row's latest version. Under a stricter default it would fail with a
/// serialization error instead, so the server's default is not trusted.
const READ_COMMITTED: &str = "SET default_transaction_isolation = 'read committed'";

/// The PostgreSQL store. Cheap to share behind an `Arc`; any number of them,
/// in any number of processes, may use one database at once. Writes commit
/// before they return, `Durability::Deferred` ones included.
pub struct PostgresStore {
    pool: PgPool,
    changes: tokio::sync::broadcast::Sender<crate::Change>,
    listener: tokio::task::JoinHandle<()>,
    notifier: changes::Notifier,
    announcer: tokio::task::JoinHandle<()>,
    batches: batches::Batcher,
    batcher: tokio::task::JoinHandle<()>,
    linker: tokio::task::JoinHandle<()>,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.listener.abort();
        self.announcer.abort();
        self.batcher.abort();
        self.linker.abort();
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`,
    /// with libpq-style query parameters such as `sslmode`) and brings its
    /// schema up to date. `Unavailable` if the server cannot be reached
    /// within `options.acquire_timeout`.
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<Self, StoreError> {
        // The error never repeats the URL: it may hold a password.
        let connect: PgConnectOptions = url
            .parse()
            .map_err(|e| StoreError::InvalidArgument(format!("invalid PostgreSQL URL: {e}")))?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .after_connect(|conn, _| {
                Box::pin(async move { conn.execute(READ_COMMITTED).await.map(drop) })
            })
            .connect_with(connect.clone())
            .await
            .map_err(|e| {
                StoreError::Unavailable(match e {
                    // The pool retried a refused connection until its deadline.
                    sqlx_core::Error::PoolTimedOut => format!(
                        "cannot connect to PostgreSQL: no answer within {:?}",
                        options.acquire_timeout
                    ),
                    e => format!("cannot connect to PostgreSQL: {}", describe(&e)),
                })
            })?;
        migrate::run(&pool).await?;
        let origin = changes::Origin::new();
        let (changes, listener) = changes::spawn(pool.clone(), origin.clone());
        let (notifier, announcer) =
            changes::Notifier::spawn(connect.clone(), origin, changes.clone());
        let (chains, linker) = chain::Linker::spawn(pool.clone());
        let (batches, batcher) = batches::Batcher::spawn(connect, options.acquire_timeout, chains);
        tracing::info!(
            max_connections = options.max_connections,
            "PostgreSQL store ready"
        );
        Ok(Self {
            pool,
            changes,
            listener,
            notifier,
            announcer,
            batches,
            batcher,
            linker,
        })
    }

    /// Artifact contents kept in this database, shared by every replica.
    pub fn blobs(&self) -> PostgresBlobs {
        PostgresBlobs {
            pool: self.pool.clone(),
        }
    }

    /// Tells this store's subscribers and every other replica that
    /// `record` changed, once its write has committed: `Ok` passes through.
    fn announce<T>(
        &self,
        record: (&str, &str, &str),
        written: Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if written.is_ok() {
            self.notifier.changed(record.0, record.1, record.2);
        }
        written
    }

    /// Closes every connection, waiting for calls in flight to finish; later
    /// calls fail with `Unavailable`. Dropping the store closes them too,
    /// without waiting.
    pub async fn close(&self) {
        self.batches.close().await;
        self.pool.close().await;
    }
}

/// What went wrong, in words that say where to look.
fn describe(e: &sqlx_core::Error) -> String {
    use sqlx_core::Error;
    match e {
        Error::PoolTimedOut => "no PostgreSQL connection became available in time: \
                                the server is unreachable, or every pooled connection is busy"
            .to_owned(),
        Error::PoolClosed => "the PostgreSQL store was closed".to_owned(),
        Error::Io(io) => format!("cannot reach PostgreSQL: {io}"),
        Error::Database(db) => match db.code() {
            Some(code) => format!("PostgreSQL: {} (SQLSTATE {code})", db.message()),
            None => format!("PostgreSQL: {}", db.message()),
        },
        other => format!("PostgreSQL: {other}"),
    }
}

/// A write of a measured call (`timing`): its whole round trip to
/// PostgreSQL counts as its commit (the writes are not queued here).
async fn timed<T>(write: impl Future<Output = T>) -> T {
    let started = std::time::Instant::now();
    let written = write.await;
    let zero = std::time::Duration::ZERO;
    crate::timing::waited(zero, started.elapsed(), zero);
    written
}

/// A record's kind, namespace and name, as a change names them.
fn key(r: &Record) -> (&str, &str, &str) {
    (&r.kind, &r.namespace, &r.name)
}

fn owned_key(r: &Record) -> (String, String, String) {
    (r.kind.clone(), r.namespace.clone(), r.name.clone())
}

fn borrowed(k: &(String, String, String)) -> (&str, &str, &str) {
    (&k.0, &k.1, &k.2)
}

fn unavailable(e: sqlx_core::Error) -> StoreError {
    StoreError::Unavailable(describe(&e))
}

#[async_trait]
impl Store for PostgresStore {
    async fn create(&self, record: Record, _: Durability) -> Result<(), StoreError> {
        let changed = owned_key(&record);
        let written = timed(self.batches.write(batches::Write::Create(record), None)).await;
        self.announce(borrowed(&changed), written)
    }

    async fn create_claimed(
        &self,
        record: Record,
        claim: IdempotencyClaim,
        _: Durability,
    ) -> Result<(), StoreError> {
        let written = timed(writes::create(&self.pool, &record, Some(&claim))).await;
        self.announce(key(&record), written)
    }

    async fn create_audited(
        &self,
        record: Record,
        audit: String,
        _: Durability,
    ) -> Result<(), StoreError> {
        let changed = owned_key(&record);
        let written = timed(
            self.batches
                .write(batches::Write::Create(record), Some(audit)),
        )
        .await;
        self.announce(borrowed(&changed), written)
    }

    async fn purge_expired_keys(&self, now_ms: i64) -> Result<usize, StoreError> {
        writes::purge_keys(&self.pool, now_ms).await
    }

    async fn update(
        &self,
        record: Record,
        expected_version: u64,
        _: Durability,
    ) -> Result<(), StoreError> {
        let changed = owned_key(&record);
        let write = batches::Write::Update {
            record,
            expected: expected_version,
        };
        let written = timed(self.batches.write(write, None)).await;
        self.announce(borrowed(&changed), written)
    }

    async fn update_audited(
        &self,
        record: Record,
        expected_version: u64,
        audit: String,
        _: Durability,
    ) -> Result<(), StoreError> {
        let changed = owned_key(&record);
        let write = batches::Write::Update {
            record,
            expected: expected_version,
        };
        let written = timed(self.batches.write(write, Some(audit))).await;
        self.announce(borrowed(&changed), written)
    }

    async fn delete(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        expected_version: Option<u64>,
    ) -> Result<Record, StoreError> {
        let deleted = writes::delete(&self.pool, kind, namespace, name, expected_version).await;
        self.announce((kind, namespace, name), deleted)
    }

    async fn get(&self, kind: &str, namespace: &str, name: &str) -> Result<Record, StoreError> {
        reads::get(&self.pool, kind, namespace, name).await
    }

    async fn list(&self, query: ListQuery) -> Result<Page, StoreError> {
        reads::list(&self.pool, &query).await
    }

    async fn append_event(&self, event: EventRecord, _: Durability) -> Result<u64, StoreError> {
        let appended = writes::append_event(&self.pool, &event).await;
        self.announce(("Event", &event.namespace, &event.execution), appended)
    }

    async fn append_audit(
        &self,
        namespace: &str,
        body: String,
        _: Durability,
    ) -> Result<u64, StoreError> {
        chain::link_all(&self.pool, namespace, Some(&body)).await
    }

    async fn list_audit(
        &self,
        namespace: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        chain::link_queued(&self.pool, namespace).await?;
        reads::list_audit(&self.pool, namespace, after, limit).await
    }

    async fn audit_of(&self, namespace: &str, name: &str) -> Result<Vec<AuditRecord>, StoreError> {
        chain::link_queued(&self.pool, namespace).await?;
        reads::audit_of(&self.pool, namespace, name).await
    }

    async fn audit_heads(&self) -> Result<Vec<AuditRecord>, StoreError> {
        chain::link_all_queued(&self.pool).await?;
        reads::audit_heads(&self.pool).await
    }

    async fn list_events(
        &self,
        namespace: &str,
        execution: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        reads::list_events(&self.pool, namespace, execution, after, limit).await
    }

    async fn count(&self, query: ListQuery) -> Result<u64, StoreError> {
        reads::count(&self.pool, &query, None).await
    }

    async fn count_at_most(&self, query: ListQuery, cap: u64) -> Result<u64, StoreError> {
        reads::count(&self.pool, &query, Some(cap)).await
    }

    async fn cost_totals(&self, query: CostQuery) -> Result<Vec<CostTotal>, StoreError> {
        reads::cost_totals(&self.pool, &query).await
    }

    async fn take_rate(&self, cell: &RateCell, now_ms: i64) -> Result<Option<u64>, StoreError> {
        writes::take_rate(&self.pool, cell, now_ms).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        reads::ping(&self.pool).await
    }

    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<crate::Change>> {
        Some(self.changes.subscribe())
    }
}

#[cfg(test)]
mod tests;
