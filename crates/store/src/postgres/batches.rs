//! Writes committed in batches: every create and update of a store, with
//! or without an audit entry.
//!
//! One task per store takes every write waiting, applies them all in one
//! transaction and commits once, so that concurrent calls share a commit
//! and its WAL flush instead of each waiting for its own; the batch grows
//! with load by itself. While a batch commits, the next one is applied
//! ([`IN_FLIGHT`]). An audit entry is linked to its namespace's last
//! one under a lock on the chain's head row, held until commit, so the
//! chain cannot fork: the lock is taken once per batch and namespace.
//!
//! A write refused on its own (a stale version, a name taken) is answered
//! with its refusal and leaves the rest of the batch alone: neither
//! statement aborts the transaction. Anything else (the server gone) fails
//! the whole batch, and nothing of it is kept.

use std::collections::{BTreeMap, HashSet};

use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_postgres::{PgConnection, PgPool};
use tokio::sync::{mpsc, oneshot};

use super::statistics::FirstStatistics;
use super::{bulk, unavailable, writes};
use crate::{Record, StoreError};

/// Most writes in one transaction.
const MAX_BATCH: usize = 256;
/// Batches in flight at once: while one waits for its commit to be
/// flushed, the next applies its writes. They lock what they share in the
/// one order every batch uses, so they wait for each other only where
/// they meet (always on an audit chain's head, whose order they keep),
/// never in a circle.
const IN_FLIGHT: usize = 2;
/// Writes that may wait for the batcher before submitters feel back-pressure.
const QUEUE: usize = 4096;

/// What a write changes (besides appending its entry, if it has one).
pub(super) enum Write {
    /// Inserts the record.
    Create(Record),
    /// Replaces the record if its version is still `expected`.
    Update { record: Record, expected: u64 },
    /// Nothing: the entry alone, in `namespace`'s chain.
    EntryOnly { namespace: String },
}

impl Write {
    fn namespace(&self) -> &str {
        match self {
            Write::Create(r) | Write::Update { record: r, .. } => &r.namespace,
            Write::EntryOnly { namespace } => namespace,
        }
    }

    /// The order in which a batch takes its row locks. Every replica's
    /// batches take them in this one order, so two cannot deadlock.
    fn lock_order(&self) -> (&str, &str, &str) {
        match self {
            Write::Create(r) | Write::Update { record: r, .. } => (&r.namespace, &r.kind, &r.name),
            Write::EntryOnly { namespace } => (namespace, "", ""),
        }
    }
}

struct Request {
    write: Write,
    audit: Option<String>,
    /// The entry's number in its chain (0 without an entry).
    reply: oneshot::Sender<Result<u64, StoreError>>,
}

/// The submitting side of a store's batcher; the task stops when it drops.
pub(super) struct Batcher {
    requests: mpsc::Sender<Request>,
}

impl Batcher {
    pub(super) fn spawn(pool: PgPool) -> (Self, tokio::task::JoinHandle<()>) {
        let (requests, receiver) = mpsc::channel(QUEUE);
        let task = tokio::spawn(run(pool, receiver));
        (Self { requests }, task)
    }

    /// Applies `write` and appends `audit`, if any, to its namespace's
    /// chain, both committed when this returns `Ok` with the entry's number
    /// (0 without an entry).
    pub(super) async fn write(
        &self,
        write: Write,
        audit: Option<String>,
    ) -> Result<u64, StoreError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || StoreError::Unavailable("the write batcher stopped".to_owned());
        self.requests
            .send(Request {
                write,
                audit,
                reply,
            })
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn run(pool: PgPool, mut receiver: mpsc::Receiver<Request>) {
    let mut statistics = FirstStatistics::new(pool.clone());
    // Dropped with this task, which aborts the batches it holds.
    let mut committing = tokio::task::JoinSet::new();
    loop {
        while committing.len() >= IN_FLIGHT {
            committing.join_next().await;
        }
        let mut batch = Vec::with_capacity(MAX_BATCH);
        if receiver.recv_many(&mut batch, MAX_BATCH).await == 0 {
            break;
        }
        statistics.written(batch.len());
        let pool = pool.clone();
        committing.spawn(async move { commit_batch(&pool, batch).await });
    }
    while committing.join_next().await.is_some() {}
}

async fn commit_batch(pool: &PgPool, mut batch: Vec<Request>) {
    // Stable: two writes of one record keep the order they came in.
    batch.sort_by(|a, b| a.write.lock_order().cmp(&b.write.lock_order()));
    match apply_and_link(pool, &batch).await {
        Ok(answers) => {
            for (request, answer) in batch.into_iter().zip(answers) {
                let _ = request.reply.send(answer);
            }
        }
        Err(e) => {
            let message = e.to_string();
            for request in batch {
                let _ = request
                    .reply
                    .send(Err(StoreError::Unavailable(message.clone())));
            }
        }
    }
}

/// One transaction: every write, then every entry of the writes that were
/// not refused. The answers are in `batch`'s order.
async fn apply_and_link(
    pool: &PgPool,
    batch: &[Request],
) -> Result<Vec<Result<u64, StoreError>>, StoreError> {
    let mut tx = pool.begin().await.map_err(unavailable)?;
    // The creates first, all in one statement; then the updates. Writes of
    // one batch are concurrent (none was answered before another came), so
    // any order between them is one a caller could have seen.
    let mut answers = created(&mut tx, batch).await?;
    updated(&mut tx, batch, &mut answers).await?;
    let mut chains: BTreeMap<&str, Vec<(usize, &str)>> = BTreeMap::new();
    for (i, request) in batch.iter().enumerate() {
        if let (Ok(_), Some(audit)) = (&answers[i], &request.audit) {
            let chain = chains.entry(request.write.namespace()).or_default();
            chain.push((i, audit.as_str()));
        }
    }
    for (namespace, members) in chains {
        let bodies: Vec<&str> = members.iter().map(|&(_, body)| body).collect();
        let first = link(&mut tx, namespace, &bodies).await?;
        for (offset, &(i, _)) in (0u64..).zip(&members) {
            answers[i] = Ok(first + offset);
        }
    }
    tx.commit().await.map_err(unavailable)?;
    Ok(answers)
}

/// Inserts the batch's new records in one statement (a round trip, not one
/// per record): the answer of each create (`AlreadyExists` when its name
/// was taken, by an earlier write or an earlier create of this batch), and
/// `Ok` for every other write.
async fn created(
    conn: &mut PgConnection,
    batch: &[Request],
) -> Result<Vec<Result<u64, StoreError>>, StoreError> {
    let mut firsts = HashSet::new();
    let mut creates = Vec::new();
    for request in batch {
        if let Write::Create(r) = &request.write {
            if firsts.insert((r.kind.as_str(), r.namespace.as_str(), r.name.as_str())) {
                creates.push(r);
            }
        }
    }
    let inserted = bulk::insert_all(conn, &creates).await?;
    let inserted: HashSet<_> = creates
        .iter()
        .zip(inserted)
        .filter(|(_, new)| *new)
        .map(|(r, _)| (r.kind.as_str(), r.namespace.as_str(), r.name.as_str()))
        .collect();
    let mut answered = HashSet::new();
    Ok(batch
        .iter()
        .map(|request| match &request.write {
            Write::Create(r) => {
                let key = (r.kind.as_str(), r.namespace.as_str(), r.name.as_str());
                match answered.insert(key) && inserted.contains(&key) {
                    true => Ok(0),
                    false => Err(StoreError::AlreadyExists {
                        kind: r.kind.clone(),
                        name: r.name.clone(),
                    }),
                }
            }
            _ => Ok(0),
        })
        .collect())
}

/// Applies the batch's updates: the first of each record's in one
/// statement ([`bulk::replace_all`]), a second of the same record (rare:
/// writes of one batch are concurrent) on its own after it. Each update's
/// answer goes into `answers` (`Ok(0)`: numbered once its namespace's
/// entries are linked).
async fn updated(
    conn: &mut PgConnection,
    batch: &[Request],
    answers: &mut [Result<u64, StoreError>],
) -> Result<(), StoreError> {
    let mut firsts = HashSet::new();
    let (mut bulk, mut repeats) = (Vec::new(), Vec::new());
    for (i, request) in batch.iter().enumerate() {
        if let Write::Update {
            record: r,
            expected,
        } = &request.write
        {
            match firsts.insert((r.kind.as_str(), r.namespace.as_str(), r.name.as_str())) {
                true => bulk.push((i, r, *expected)),
                false => repeats.push((i, r, *expected)),
            }
        }
    }
    let pairs: Vec<(&Record, u64)> = bulk.iter().map(|&(_, r, v)| (r, v)).collect();
    let replaced = bulk::replace_all(conn, &pairs).await?;
    for (&(i, r, expected), replaced) in bulk.iter().zip(replaced) {
        answers[i] = match replaced {
            true => Ok(0),
            false => match writes::not_replaced(conn, r, expected).await {
                e @ StoreError::Unavailable(_) => return Err(e),
                refused => Err(refused),
            },
        };
    }
    for (i, r, expected) in repeats {
        answers[i] = match writes::replace(conn, r, expected).await {
            Err(e @ StoreError::Unavailable(_)) => return Err(e),
            other => other.map(|()| 0),
        };
    }
    Ok(())
}

/// Links `bodies`, in order, after `namespace`'s last entry, inside the
/// caller's transaction, and returns the first one's number. The head row
/// stays locked until that transaction ends, so no other appender can read
/// the same last hash: the chain cannot fork.
async fn link(
    conn: &mut PgConnection,
    namespace: &str,
    bodies: &[&str],
) -> Result<u64, StoreError> {
    // A no-op update on conflict: its only purpose is the row lock, and it
    // returns the head as the last committed appender left it.
    let head = query(
        "INSERT INTO audit_heads AS h (namespace, seq, hash) VALUES ($1, 0, $2)
         ON CONFLICT (namespace) DO UPDATE SET seq = h.seq
         RETURNING seq, hash",
    )
    .bind(namespace)
    .bind(joch_core::audit::GENESIS)
    .fetch_one(&mut *conn)
    .await
    .map_err(unavailable)?;
    let last: i64 = head.try_get(0).map_err(unavailable)?;
    let mut prev: String = head.try_get(1).map_err(unavailable)?;
    let (mut seqs, mut prevs, mut hashes) = (Vec::new(), Vec::new(), Vec::new());
    for (seq, body) in (last + 1..).zip(bodies) {
        let hash = joch_core::audit::chain_hash(&prev, body);
        seqs.push(seq);
        prevs.push(std::mem::replace(&mut prev, hash.clone()));
        hashes.push(hash);
    }
    query(
        "WITH moved AS (UPDATE audit_heads SET seq = $2, hash = $3 WHERE namespace = $1)
         INSERT INTO audit (namespace, seq, prev, hash, body)
         SELECT $1, * FROM UNNEST($4::BIGINT[], $5::TEXT[], $6::TEXT[], $7::TEXT[])",
    )
    .bind(namespace)
    .bind(seqs.last().copied().unwrap_or(last))
    .bind(prev.as_str())
    .bind(&seqs)
    .bind(&prevs)
    .bind(&hashes)
    .bind(bodies)
    .execute(&mut *conn)
    .await
    .map_err(unavailable)?;
    Ok(u64::try_from(last + 1).unwrap_or_default())
}
