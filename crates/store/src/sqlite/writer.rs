//! The single writer thread and its group commit.
//!
//! Every write waiting in the queue when the writer is free joins one
//! transaction, which is committed once without an fsync
//! (`synchronous=NORMAL`). Deferred writes are answered at their commit;
//! synced ones once a sync of the WAL that began after it has returned
//! (`sync.rs`), which runs beside the next batches rather than before
//! them. So a write that arrives during a sync waits for the writer's
//! next turn, not for the disk, and the batch size grows with load by
//! itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::sync::{Held, Syncs};
use super::{rows, unavailable};
use crate::{Durability, EventRecord, IdempotencyClaim, RateCell, Record, StoreError};

/// Most writes in one transaction; bounds the latency of the first in a batch.
const MAX_BATCH: usize = 512;
/// Writes that may wait for the writer before submitters feel back-pressure.
const QUEUE: usize = 4096;

pub(super) enum Write {
    Create {
        record: Record,
        claim: Option<IdempotencyClaim>,
        /// An audit entry to append in the same write.
        audit: Option<String>,
    },
    PurgeKeys {
        now_ms: i64,
    },
    AppendEvent(EventRecord),
    AppendAudit {
        namespace: String,
        body: String,
    },
    TakeRate {
        cell: RateCell,
        now_ms: i64,
    },
    Update {
        record: Record,
        expected_version: u64,
        /// An audit entry to append in the same write.
        audit: Option<String>,
    },
    Delete {
        kind: String,
        namespace: String,
        name: String,
        expected_version: Option<u64>,
    },
}

pub(super) struct WriteRequest {
    pub write: Write,
    pub durability: Durability,
    /// When it was sent: its wait for a batch to begin is the call's queue.
    pub queued: Instant,
    pub reply: oneshot::Sender<Answer>,
}

/// A write's result, with how long it waited for its batch to begin and
/// then for its answer (its commit, for a synced write).
pub(super) struct Answer {
    pub result: Result<Written, StoreError>,
    pub queue: Duration,
    pub commit: Duration,
}

/// What a write hands back.
pub(super) enum Written {
    Nothing,
    Removed(Box<Record>),
    Purged(usize),
    Appended(u64),
    /// `None` when taken, else milliseconds until one could be.
    Rate(Option<u64>),
}

pub(super) fn spawn(
    conn: Connection,
    syncs: Arc<Syncs>,
) -> Result<mpsc::Sender<WriteRequest>, StoreError> {
    let (tx, rx) = mpsc::channel(QUEUE);
    std::thread::Builder::new()
        .name("joch-sqlite-writer".to_owned())
        .spawn(move || run(conn, rx, &syncs))
        .map_err(|e| {
            StoreError::Unavailable(format!("cannot start the store's writer thread: {e}"))
        })?;
    Ok(tx)
}

fn run(mut conn: Connection, mut rx: mpsc::Receiver<WriteRequest>, syncs: &Syncs) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = rx.blocking_recv() {
        syncs.wait_for_room();
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let held = commit_batch(&mut conn, &mut batch);
        syncs.answer(held, rx.is_empty());
    }
    syncs.stop();
    tracing::debug!("store writer stopped: all handles dropped");
}

/// Commits a batch and answers its deferred writes; returns its synced
/// writes' answers, to be sent once a sync covers the commit.
fn commit_batch(conn: &mut Connection, batch: &mut Vec<WriteRequest>) -> Vec<Held> {
    let began = Instant::now();
    let answer = |request_queued: Instant, result| Answer {
        result,
        queue: began.saturating_duration_since(request_queued),
        commit: began.elapsed(),
    };
    metrics::histogram!("joch_store_batch_size").record(batch.len() as f64);
    // IMMEDIATE: the write lock is taken at BEGIN, where the busy timeout
    // waits it out. A DEFERRED transaction reads first and upgrades at its
    // first write, and an upgrade that finds the WAL header changed since
    // its read began fails at once with SQLITE_BUSY (SQLite cannot wait:
    // the transaction already read), which the bench's soak saw as a whole
    // batch answered `database is locked`.
    let tx = match conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            let message = e.to_string();
            for request in batch.drain(..) {
                let failed = Err(StoreError::Unavailable(message.clone()));
                let _ = request.reply.send(answer(request.queued, failed));
            }
            return Vec::new();
        }
    };
    // A failing write (a duplicate name, a stale version, a held key) rolls
    // back to its savepoint; the rest of the batch commits.
    let applied: Vec<_> = batch
        .drain(..)
        .map(|request| {
            let result = apply_atomically(&tx, &request.write);
            (request, result)
        })
        .collect();
    let committed = tx.commit().map_err(|e| unavailable(e).to_string());
    metrics::histogram!("joch_store_commit_seconds").record(began.elapsed().as_secs_f64());
    // Every answer follows the commit: a deferred write acknowledged before
    // it would be lost to a `kill -9` in between.
    let mut held = Vec::new();
    for (request, result) in applied {
        let result = match &committed {
            Ok(()) => result,
            Err(message) => Err(StoreError::Unavailable(message.clone())),
        };
        let answer = answer(request.queued, result);
        match request.durability {
            // A refused write waits too: what refused it (a held key, a
            // newer version) may be a write that is not yet synced.
            Durability::Sync if committed.is_ok() => held.push(Held {
                reply: request.reply,
                answer,
                began,
            }),
            _ => drop(request.reply.send(answer)),
        }
    }
    held
}

/// Applies one write so that, if it fails, none of it stays in the batch.
/// One statement that fails undoes itself; a write of several (a claim or
/// an audit entry beside the record) runs inside a savepoint.
fn apply_atomically(conn: &Connection, write: &Write) -> Result<Written, StoreError> {
    let compound = match write {
        Write::Create { claim, audit, .. } => claim.is_some() || audit.is_some(),
        Write::Update { audit, .. } => audit.is_some(),
        _ => false,
    };
    if !compound {
        return apply(conn, write);
    }
    statement(conn, "SAVEPOINT write")?;
    let result = apply(conn, write);
    if result.is_err() {
        statement(conn, "ROLLBACK TO write")?;
    }
    statement(conn, "RELEASE write")?;
    result
}

/// Runs a statement without parameters, prepared once per connection.
fn statement(conn: &Connection, sql: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute([]))
        .map(drop)
        .map_err(unavailable)
}

fn apply(conn: &Connection, write: &Write) -> Result<Written, StoreError> {
    match write {
        Write::Create {
            record,
            claim,
            audit,
        } => {
            if let Some(claim) = claim {
                rows::claim_key(conn, &record.namespace, &record.name, claim)?;
            }
            rows::insert(conn, record)?;
            audited(conn, &record.namespace, audit.as_deref())
        }
        Write::Update {
            record,
            expected_version,
            audit,
        } => {
            rows::update(conn, record, *expected_version)?;
            audited(conn, &record.namespace, audit.as_deref())
        }
        Write::Delete {
            kind,
            namespace,
            name,
            expected_version,
        } => rows::delete(conn, kind, namespace, name, *expected_version)
            .map(|r| Written::Removed(Box::new(r))),
        Write::PurgeKeys { now_ms } => rows::purge_keys(conn, *now_ms).map(Written::Purged),
        Write::AppendEvent(event) => rows::append_event(conn, event).map(Written::Appended),
        Write::AppendAudit { namespace, body } => {
            rows::append_audit(conn, namespace, body).map(Written::Appended)
        }
        Write::TakeRate { cell, now_ms } => rows::take_rate(conn, cell, *now_ms).map(Written::Rate),
    }
}

fn audited(conn: &Connection, namespace: &str, audit: Option<&str>) -> Result<Written, StoreError> {
    match audit {
        Some(body) => rows::append_audit(conn, namespace, body).map(Written::Appended),
        None => Ok(Written::Nothing),
    }
}
