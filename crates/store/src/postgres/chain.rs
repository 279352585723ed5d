//! The audit chains: entries queued with their records, linked off the
//! commit path.
//!
//! An audited write queues its entry in `audit_queue`, in the write's own
//! transaction, and locks no shared row: the writes of every replica (and
//! a replica's batches in flight) commit side by side, sharing their WAL
//! flushes. A link then moves a namespace's queued entries into `audit`,
//! numbered and hashed after its last one, under a lock on the namespace's
//! `audit_heads` row held until it commits, so the chain cannot fork and a
//! reader that sees entry N sees all before it. The head is locked once
//! per link, which takes every entry queued by then, not once per write.
//!
//! Who links:
//! - each replica's [`Linker`] task, as soon as a batch that queued entries
//!   has committed;
//! - any reader of a chain, before it reads (`link_queued`), so that an
//!   acknowledged write's entry is in the chain for every reader;
//! - the linker's sweep, every [`SWEEP`], for entries queued by a replica
//!   that died before linking them.

use std::collections::BTreeSet;
use std::time::Duration;

use sqlx_core::query::query;
use sqlx_core::query_as::query_as;
use sqlx_core::query_scalar::query_scalar;
use sqlx_core::row::Row;
use sqlx_postgres::PgPool;
use tokio::sync::mpsc;

use super::unavailable;
use crate::StoreError;

/// How often a linker looks for entries queued with nobody to link them.
const SWEEP: Duration = Duration::from_secs(1);
/// The linker's rest after a link: one link per namespace and pause at
/// most, however many batches commit (readers link for themselves). A
/// link is a transaction of four statements and a synced commit, and
/// every replica links: at 50 ms, three replicas' links took the server
/// 49–64 µs of CPU per external-write call, at 200 ms 39–41
/// (bench/RESULTS.md, 2026-11-29, 13:30–15:00 UTC).
const PAUSE: Duration = Duration::from_millis(200);
/// Batches whose namespaces may wait for the linker; past that, the sweep
/// links them.
const QUEUE: usize = 1024;
/// Most queued entries one link takes, oldest first: a backlog is linked
/// in transactions of bounded size.
pub(super) const MOST: i64 = 4096;

/// What one link did.
struct Linked {
    /// The number of the chain's last entry.
    last: u64,
    /// Whether it left queued entries (it took [`MOST`]), and `body`.
    more: bool,
}

/// Links `namespace`'s oldest queued entries (at most [`MOST`]), then
/// `body` if given and none are left, in one transaction.
async fn link(pool: &PgPool, namespace: &str, body: Option<&str>) -> Result<Linked, StoreError> {
    let mut tx = pool.begin().await.map_err(unavailable)?;
    // A no-op update on conflict: its only purpose is the row lock, and it
    // returns the head as the last linker left it.
    let head = query(
        "INSERT INTO audit_heads AS h (namespace, seq, hash) VALUES ($1, 0, $2)
         ON CONFLICT (namespace) DO UPDATE SET seq = h.seq
         RETURNING seq, hash",
    )
    .bind(namespace)
    .bind(joch_core::audit::GENESIS)
    .fetch_one(&mut *tx)
    .await
    .map_err(unavailable)?;
    let last: i64 = head.try_get(0).map_err(unavailable)?;
    let mut prev: String = head.try_get(1).map_err(unavailable)?;
    let mut queued: Vec<(i64, String)> = query_as(
        "DELETE FROM audit_queue WHERE id IN (
                 SELECT id FROM audit_queue WHERE namespace = $1 ORDER BY id LIMIT $2)
             RETURNING id, body",
    )
    .bind(namespace)
    .bind(MOST)
    .fetch_all(&mut *tx)
    .await
    .map_err(unavailable)?;
    queued.sort_unstable_by_key(|&(id, _)| id);
    let more = queued.len() as i64 == MOST;
    // What was queued before `body` is linked before it.
    let bodies: Vec<&str> = queued
        .iter()
        .map(|(_, body)| body.as_str())
        .chain(body.filter(|_| !more))
        .collect();
    let (mut seqs, mut prevs, mut hashes) = (Vec::new(), Vec::new(), Vec::new());
    for (seq, body) in (last + 1..).zip(&bodies) {
        let hash = joch_core::audit::chain_hash(&prev, body);
        seqs.push(seq);
        prevs.push(std::mem::replace(&mut prev, hash.clone()));
        hashes.push(hash);
    }
    let end = seqs.last().copied().unwrap_or(last);
    if !bodies.is_empty() {
        query(
            "WITH moved AS (UPDATE audit_heads SET seq = $2, hash = $3 WHERE namespace = $1)
             INSERT INTO audit (namespace, seq, prev, hash, body)
             SELECT $1, * FROM UNNEST($4::BIGINT[], $5::TEXT[], $6::TEXT[], $7::TEXT[])",
        )
        .bind(namespace)
        .bind(end)
        .bind(prev.as_str())
        .bind(&seqs)
        .bind(&prevs)
        .bind(&hashes)
        .bind(&bodies)
        .execute(&mut *tx)
        .await
        .map_err(unavailable)?;
    }
    tx.commit().await.map_err(unavailable)?;
    Ok(Linked {
        last: u64::try_from(end).unwrap_or_default(),
        more,
    })
}

/// Links all that `namespace` has queued, then `body` if given; returns
/// the number of the chain's last entry then.
pub(super) async fn link_all(
    pool: &PgPool,
    namespace: &str,
    body: Option<&str>,
) -> Result<u64, StoreError> {
    loop {
        let linked = link(pool, namespace, body).await?;
        if !linked.more {
            return Ok(linked.last);
        }
    }
}

/// Links `namespace`'s queued entries, if it has any: a reader of a chain
/// with nothing queued takes no lock.
pub(super) async fn link_queued(pool: &PgPool, namespace: &str) -> Result<(), StoreError> {
    let queued: bool =
        query_scalar("SELECT EXISTS (SELECT 1 FROM audit_queue WHERE namespace = $1)")
            .bind(namespace)
            .fetch_one(pool)
            .await
            .map_err(unavailable)?;
    if queued {
        link_all(pool, namespace, None).await?;
    }
    Ok(())
}

/// Links every namespace's queued entries.
pub(super) async fn link_all_queued(pool: &PgPool) -> Result<(), StoreError> {
    let namespaces: Vec<String> = query_scalar("SELECT DISTINCT namespace FROM audit_queue")
        .fetch_all(pool)
        .await
        .map_err(unavailable)?;
    for namespace in namespaces {
        link_all(pool, &namespace, None).await?;
    }
    Ok(())
}

/// The handle of a store's linker task; the task stops when it drops.
#[derive(Clone)]
pub(super) struct Linker {
    committed: mpsc::Sender<Vec<String>>,
}

impl Linker {
    pub(super) fn spawn(pool: PgPool) -> (Self, tokio::task::JoinHandle<()>) {
        let (committed, receiver) = mpsc::channel(QUEUE);
        (Self { committed }, tokio::spawn(run(pool, receiver)))
    }

    /// A batch that queued entries in `namespaces` has committed.
    pub(super) fn queued(&self, namespaces: Vec<String>) {
        // Full: the linker is behind, and its sweep links them.
        let _ = self.committed.try_send(namespaces);
    }
}

async fn run(pool: PgPool, mut committed: mpsc::Receiver<Vec<String>>) {
    let mut sweep = tokio::time::interval(SWEEP);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut batches = Vec::new();
    loop {
        tokio::select! {
            received = committed.recv_many(&mut batches, QUEUE) => {
                if received == 0 {
                    return;
                }
                let namespaces: BTreeSet<String> = batches.drain(..).flatten().collect();
                for namespace in namespaces {
                    // Failed: the namespace's next link, or the sweep, takes them.
                    if let Err(e) = link_all(&pool, &namespace, None).await {
                        tracing::warn!(%namespace, error = %e, "cannot link queued audit entries");
                    }
                }
                // The next link takes every batch committed meanwhile.
                tokio::time::sleep(PAUSE).await;
            }
            _ = sweep.tick() => {
                if let Err(e) = link_all_queued(&pool).await {
                    tracing::warn!(error = %e, "cannot link queued audit entries");
                }
            }
        }
    }
}
