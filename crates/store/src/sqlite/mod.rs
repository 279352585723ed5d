//! The embedded default store: one SQLite file in WAL mode.
//!
//! All writes go through one writer thread that group-commits: it takes every
//! write waiting in its queue and applies them in one transaction; a sync of
//! the WAL, beside the next batches, then acknowledges the batches committed
//! before it began, so durability costs one fsync per group, not per call. Reads run on a small pool of read-only connections, which WAL lets
//! proceed while the writer commits.

mod migrate;
mod readers;
mod rows;
mod sync;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::{mpsc, oneshot};

use crate::{
    AuditRecord, CostQuery, CostTotal, Durability, EventRecord, IdempotencyClaim, ListQuery, Page,
    RateCell, Record, Store, StoreError,
};
use readers::Readers;
use writer::{Write, WriteRequest, Written};

/// Read connections kept open; WAL lets them all read while the writer writes.
const READERS: usize = 4;

/// The SQLite store. Cheap to share behind an `Arc`; dropping the last handle
/// lets the writer finish its queue and close.
pub struct SqliteStore {
    path: PathBuf,
    writes: mpsc::Sender<WriteRequest>,
    syncs: Arc<sync::Syncs>,
    readers: Readers,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and brings its
    /// schema up to date.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let mut conn = Connection::open(&path).map_err(unavailable)?;
        // Savepoints journal in memory, not in temp files. (A WAL checkpoint
        // every 16 MiB rather than SQLite's 4 was tried: one caller's calls
        // got slower, 0.32 -> 0.45 ms, and 64 callers' no faster. Every
        // 1 MiB: the commit stage's p99 at 5,000 calls/s fell, 1.49 against
        // 1.85 ms, but a call's own p99 did not; see bench/RESULTS.md.)
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             PRAGMA busy_timeout = 5000;
             PRAGMA temp_store = MEMORY;",
        )
        .map_err(unavailable)?;
        migrate::run(&mut conn)?;
        // From here on the writer's commits do not sync; `sync.rs` does,
        // beside the next commits.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(unavailable)?;
        let syncs = sync::Syncs::start(&path)?;
        let readers = (0..READERS)
            .map(|_| open_reader(&path))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            path,
            writes: writer::spawn(conn, syncs.clone())?,
            syncs,
            readers: Readers::new(readers),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many syncs of the WAL this store has run; each acknowledged the
    /// synced writes of every batch committed before it began.
    pub fn syncs(&self) -> u64 {
        self.syncs.done()
    }

    async fn write(&self, write: Write, durability: Durability) -> Result<Written, StoreError> {
        let (reply, answer) = oneshot::channel();
        let sent = std::time::Instant::now();
        self.writes
            .send(WriteRequest {
                write,
                durability,
                queued: sent,
                reply,
            })
            .await
            .map_err(|_| StoreError::Unavailable("the writer has stopped".to_owned()))?;
        let answer = answer.await.map_err(|_| {
            StoreError::Unavailable("the writer stopped before answering".to_owned())
        })?;
        let handoff = sent.elapsed().saturating_sub(answer.queue + answer.commit);
        crate::timing::waited(answer.queue, answer.commit, handoff);
        answer.result
    }
}

fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(unavailable)?;
    // A reader's own page cache at SQLite's default (2 MiB) held the same
    // recent pages as the other readers' and the OS's, and filled slowly as
    // the ledger grew: the soak's heap rose by ~10 MB over its first
    // minutes, then stayed there. At 256 KiB each, it holds flat.
    conn.execute_batch("PRAGMA busy_timeout = 5000; PRAGMA cache_size = -256;")
        .map_err(unavailable)?;
    Ok(conn)
}

fn unavailable(e: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

#[async_trait]
impl Store for SqliteStore {
    async fn create(&self, record: Record, durability: Durability) -> Result<(), StoreError> {
        let write = Write::Create {
            record,
            claim: None,
            audit: None,
        };
        self.write(write, durability).await.map(drop)
    }

    async fn create_claimed(
        &self,
        record: Record,
        claim: IdempotencyClaim,
        durability: Durability,
    ) -> Result<(), StoreError> {
        let write = Write::Create {
            record,
            claim: Some(claim),
            audit: None,
        };
        self.write(write, durability).await.map(drop)
    }

    async fn create_audited(
        &self,
        record: Record,
        audit: String,
        durability: Durability,
    ) -> Result<(), StoreError> {
        let write = Write::Create {
            record,
            claim: None,
            audit: Some(audit),
        };
        self.write(write, durability).await.map(drop)
    }

    async fn purge_expired_keys(&self, now_ms: i64) -> Result<usize, StoreError> {
        match self
            .write(Write::PurgeKeys { now_ms }, Durability::Sync)
            .await?
        {
            Written::Purged(n) => Ok(n),
            _ => Err(StoreError::Unavailable(
                "purge returned no count".to_owned(),
            )),
        }
    }

    async fn update(
        &self,
        record: Record,
        expected_version: u64,
        durability: Durability,
    ) -> Result<(), StoreError> {
        self.write(
            Write::Update {
                record,
                expected_version,
                audit: None,
            },
            durability,
        )
        .await
        .map(drop)
    }

    async fn update_audited(
        &self,
        record: Record,
        expected_version: u64,
        audit: String,
        durability: Durability,
    ) -> Result<(), StoreError> {
        let write = Write::Update {
            record,
            expected_version,
            audit: Some(audit),
        };
        self.write(write, durability).await.map(drop)
    }

    async fn delete(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        expected_version: Option<u64>,
    ) -> Result<Record, StoreError> {
        let write = Write::Delete {
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            expected_version,
        };
        match self.write(write, Durability::Sync).await? {
            Written::Removed(record) => Ok(*record),
            _ => Err(StoreError::Unavailable(
                "delete returned no record".to_owned(),
            )),
        }
    }

    async fn get(&self, kind: &str, namespace: &str, name: &str) -> Result<Record, StoreError> {
        let (kind, namespace, name) = (kind.to_owned(), namespace.to_owned(), name.to_owned());
        self.readers
            .run(move |conn| rows::get(conn, &kind, &namespace, &name))
            .await
    }

    async fn list(&self, query: ListQuery) -> Result<Page, StoreError> {
        self.readers.run(move |conn| rows::list(conn, &query)).await
    }

    async fn append_event(
        &self,
        event: EventRecord,
        durability: Durability,
    ) -> Result<u64, StoreError> {
        match self.write(Write::AppendEvent(event), durability).await? {
            Written::Appended(sequence) => Ok(sequence),
            _ => Err(StoreError::Unavailable(
                "append returned no sequence".to_owned(),
            )),
        }
    }

    async fn append_audit(
        &self,
        namespace: &str,
        body: String,
        durability: Durability,
    ) -> Result<u64, StoreError> {
        let write = Write::AppendAudit {
            namespace: namespace.to_owned(),
            body,
        };
        match self.write(write, durability).await? {
            Written::Appended(seq) => Ok(seq),
            _ => Err(StoreError::Unavailable(
                "append returned no sequence".to_owned(),
            )),
        }
    }

    async fn list_audit(
        &self,
        namespace: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let namespace = namespace.to_owned();
        self.readers
            .run(move |conn| rows::list_audit(conn, &namespace, after, limit))
            .await
    }

    async fn audit_of(&self, namespace: &str, name: &str) -> Result<Vec<AuditRecord>, StoreError> {
        let (namespace, name) = (namespace.to_owned(), name.to_owned());
        self.readers
            .run(move |conn| rows::audit_of(conn, &namespace, &name))
            .await
    }

    async fn audit_heads(&self) -> Result<Vec<AuditRecord>, StoreError> {
        self.readers.run(rows::audit_heads).await
    }

    async fn list_events(
        &self,
        namespace: &str,
        execution: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let (namespace, execution) = (namespace.to_owned(), execution.to_owned());
        self.readers
            .run(move |conn| rows::list_events(conn, &namespace, &execution, after, limit))
            .await
    }

    async fn count(&self, query: ListQuery) -> Result<u64, StoreError> {
        self.readers
            .run(move |conn| rows::count(conn, &query, None))
            .await
    }

    async fn count_at_most(&self, query: ListQuery, cap: u64) -> Result<u64, StoreError> {
        self.readers
            .run(move |conn| rows::count(conn, &query, Some(cap)))
            .await
    }

    async fn cost_totals(&self, query: CostQuery) -> Result<Vec<CostTotal>, StoreError> {
        self.readers
            .run(move |conn| rows::cost_totals(conn, &query))
            .await
    }

    async fn take_rate(&self, cell: &RateCell, now_ms: i64) -> Result<Option<u64>, StoreError> {
        let write = Write::TakeRate {
            cell: cell.clone(),
            now_ms,
        };
        // The allowance needs no fsync: after a crash it is only a little more generous.
        match self.write(write, Durability::Deferred).await? {
            Written::Rate(wait) => Ok(wait),
            _ => Err(StoreError::Unavailable(
                "the writer answered a rate cell with something else".to_owned(),
            )),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        if self.writes.is_closed() {
            return Err(StoreError::Unavailable("the writer has stopped".to_owned()));
        }
        self.readers
            .run(|conn| {
                conn.query_row("SELECT 1", [], |_| Ok(()))
                    .map_err(unavailable)
            })
            .await
    }
}

#[cfg(test)]
mod tests;
