//! Writes committed in batches: every create and update of a store, with
//! or without an audit entry.
//!
//! One task per store takes every write waiting, applies them all in one
//! transaction and commits once, so that concurrent calls share a commit
//! and its WAL flush instead of each waiting for its own; the batch grows
//! with load by itself. While batches commit, the next ones are applied
//! ([`IN_FLIGHT`]). An audit entry is queued with its write, in the same
//! transaction, and linked into its chain once committed (`chain.rs`): a
//! batch locks no row but the records it writes.
//!
//! A write refused on its own (a stale version, a name taken) is answered
//! with its refusal and leaves the rest of the batch alone: neither
//! statement aborts the transaction. Anything else (the server gone) fails
//! the whole batch, and nothing of it is kept.

use std::collections::{BTreeSet, HashSet};

use std::time::Duration;

use sqlx_core::executor::Executor;
use sqlx_postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use tokio::sync::{mpsc, oneshot};

use super::chain::{self, Linker};
use super::statistics::FirstStatistics;
use super::{bulk, unavailable, writes};
use crate::{Record, StoreError};

/// Most writes in one transaction.
const MAX_BATCH: usize = 256;
/// Batches in flight at once: while some wait for their commits to be
/// flushed, the next applies its writes. They lock only the records they
/// write, in the one order every batch uses, so they wait for each other
/// only where they write the same record, never in a circle.
const IN_FLIGHT: usize = 2;
/// Writes that may wait for the batcher before submitters feel back-pressure.
const QUEUE: usize = 4096;
/// How the batcher's own connections plan (after the isolation level every
/// connection of the store sets, `mod.rs`). A batch's statements are
/// prepared once per connection and planned once, generically
/// (`bulk.rs`): parsing and planning them for every batch took about a
/// third of the server's CPU (bench/RESULTS.md, 2026-11-29, 07:50–09:30
/// UTC). A generic plan must be right at any table size, and these
/// statements only ever look records up by key, so a connection that only
/// runs them rules out what a plan made while the table was small would
/// pick and keep as it grows: scanning the table, and joining by hash or
/// merge (which scan it whole too).
const PLANNING: &str = "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off;
                        SET enable_hashjoin = off; SET enable_mergejoin = off";

/// What a write changes.
pub(super) enum Write {
    /// Inserts the record.
    Create(Record),
    /// Replaces the record if its version is still `expected`.
    Update { record: Record, expected: u64 },
}

impl Write {
    fn record(&self) -> &Record {
        match self {
            Write::Create(r) | Write::Update { record: r, .. } => r,
        }
    }

    /// The order in which a batch takes its row locks. Every replica's
    /// batches take them in this one order, so two cannot deadlock.
    fn lock_order(&self) -> (&str, &str, &str) {
        let r = self.record();
        (&r.namespace, &r.kind, &r.name)
    }
}

struct Request {
    write: Write,
    audit: Option<String>,
    reply: oneshot::Sender<Result<(), StoreError>>,
}

/// The submitting side of a store's batcher; the task stops when it drops.
pub(super) struct Batcher {
    requests: mpsc::Sender<Request>,
    pool: PgPool,
}

impl Batcher {
    /// Starts the batcher, on connections of its own to the server
    /// `options` names (at most [`IN_FLIGHT`], opened as needed).
    pub(super) fn spawn(
        options: PgConnectOptions,
        acquire_timeout: Duration,
        linker: Linker,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let pool = PgPoolOptions::new()
            .max_connections(IN_FLIGHT as u32)
            .acquire_timeout(acquire_timeout)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    conn.execute(super::READ_COMMITTED).await?;
                    conn.execute(PLANNING).await.map(drop)
                })
            })
            .connect_lazy_with(options);
        let (requests, receiver) = mpsc::channel(QUEUE);
        let task = tokio::spawn(run(pool.clone(), linker, receiver));
        (Self { requests, pool }, task)
    }

    /// Closes the batcher's connections, waiting for the batches in flight;
    /// later writes fail with `Unavailable`.
    pub(super) async fn close(&self) {
        self.pool.close().await;
    }

    /// Applies `write` and queues `audit`, if any, for its namespace's
    /// chain, both committed when this returns `Ok`.
    pub(super) async fn write(
        &self,
        write: Write,
        audit: Option<String>,
    ) -> Result<(), StoreError> {
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

async fn run(pool: PgPool, linker: Linker, mut receiver: mpsc::Receiver<Request>) {
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
        let (pool, linker) = (pool.clone(), linker.clone());
        committing.spawn(async move { commit_batch(&pool, &linker, batch).await });
    }
    while committing.join_next().await.is_some() {}
}

async fn commit_batch(pool: &PgPool, linker: &Linker, mut batch: Vec<Request>) {
    // Stable: two writes of one record keep the order they came in.
    batch.sort_by(|a, b| a.write.lock_order().cmp(&b.write.lock_order()));
    match apply(pool, &batch).await {
        Ok((answers, chains)) => {
            if !chains.is_empty() {
                linker.queued(chains);
            }
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

/// One transaction: every write, then the entries of the writes that were
/// not refused, queued. The answers are in `batch`'s order, with the
/// namespaces whose entries were queued.
async fn apply(
    pool: &PgPool,
    batch: &[Request],
) -> Result<(Vec<Result<(), StoreError>>, Vec<String>), StoreError> {
    let mut tx = pool.begin().await.map_err(unavailable)?;
    // The creates first, all in one statement; then the updates. Writes of
    // one batch are concurrent (none was answered before another came), so
    // any order between them is one a caller could have seen.
    let mut answers = created(&mut tx, batch).await?;
    updated(&mut tx, batch, &mut answers).await?;
    let entries: Vec<(&str, &str)> = batch
        .iter()
        .zip(&answers)
        .filter(|(_, answer)| answer.is_ok())
        .filter_map(|(r, _)| Some((r.write.record().namespace.as_str(), r.audit.as_deref()?)))
        .collect();
    chain::enqueue(&mut tx, &entries).await?;
    tx.commit().await.map_err(unavailable)?;
    let chains: BTreeSet<&str> = entries.iter().map(|&(namespace, _)| namespace).collect();
    Ok((answers, chains.into_iter().map(str::to_owned).collect()))
}

/// Inserts the batch's new records in one statement (a round trip, not one
/// per record): the answer of each create (`AlreadyExists` when its name
/// was taken, by an earlier write or an earlier create of this batch), and
/// `Ok` for every other write.
async fn created(
    conn: &mut PgConnection,
    batch: &[Request],
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
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
                    true => Ok(()),
                    false => Err(StoreError::AlreadyExists {
                        kind: r.kind.clone(),
                        name: r.name.clone(),
                    }),
                }
            }
            Write::Update { .. } => Ok(()),
        })
        .collect())
}

/// Applies the batch's updates: the first of each record's in one
/// statement ([`bulk::replace_all`]), a second of the same record (rare:
/// writes of one batch are concurrent) on its own after it. Each update's
/// answer goes into `answers`.
async fn updated(
    conn: &mut PgConnection,
    batch: &[Request],
    answers: &mut [Result<(), StoreError>],
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
            true => Ok(()),
            false => match writes::not_replaced(conn, r, expected).await {
                e @ StoreError::Unavailable(_) => return Err(e),
                refused => Err(refused),
            },
        };
    }
    for (i, r, expected) in repeats {
        answers[i] = match writes::replace(conn, r, expected).await {
            Err(e @ StoreError::Unavailable(_)) => return Err(e),
            other => other,
        };
    }
    Ok(())
}
