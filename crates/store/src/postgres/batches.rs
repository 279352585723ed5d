//! Writes committed in batches: every create and update of a store, with
//! or without an audit entry.
//!
//! One task per store takes every write waiting and applies them all in
//! one statement, its own transaction (`bulk.rs`), so that concurrent calls
//! share a commit and its WAL flush instead of each waiting for its own,
//! and a batch costs one round trip; the batch grows with load by itself.
//! While a batch commits, the next is applied once it is worth its
//! statement ([`IN_FLIGHT`], [`BESIDE`]). An audit entry is queued with
//! its write, in the same statement, and linked into its chain once
//! committed (`chain.rs`): a batch locks no row but the records it writes.
//! A record written twice in one batch (rare) is written again in a second
//! round, after the first has committed.
//!
//! A write refused on its own (a stale version, a name taken) is answered
//! with its refusal and leaves the rest of the round alone: the statement
//! skips it. Anything else (the server gone) fails the whole round, and
//! nothing of it is kept.

use std::collections::BTreeSet;
use std::time::Duration;

use sqlx_core::executor::Executor;
use sqlx_postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use tokio::sync::{mpsc, oneshot};

use super::chain::Linker;
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
/// Writes that start a batch beside one committing; fewer wait for it to
/// commit and go after it. A batch's statement costs the server about as
/// much as eight of its writes besides them (220 µs, a write 29 µs), and
/// with several replicas each sees a share of the writes: starting a
/// second batch at once made them small and many. Measured at 2 (at once),
/// 8, 16 and 64: from 16 up, three replicas' external writes cost 0.40
/// transactions a call instead of 0.55, with the 1,500/s p99 unchanged
/// (bench/RESULTS.md, 2026-11-29, 11:00–12:56 UTC).
const BESIDE: usize = 16;
// `run` gathers more only below `BESIDE`, so there is always room then.
const _: () = assert!(BESIDE <= MAX_BATCH);
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

impl Request {
    fn bulk(&self) -> bulk::Write<'_> {
        let expected = match &self.write {
            Write::Create(_) => None,
            Write::Update { expected, .. } => Some(*expected),
        };
        bulk::Write {
            record: self.write.record(),
            expected,
            audit: self.audit.as_deref(),
        }
    }
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
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut open = true;
    while open || !batch.is_empty() {
        if committing.len() >= IN_FLIGHT {
            committing.join_next().await;
            continue;
        }
        let room = MAX_BATCH - batch.len();
        if committing.is_empty() {
            // Nothing committing: what waits goes at once.
            if batch.is_empty() {
                open = receiver.recv_many(&mut batch, room).await > 0;
                if !open {
                    break;
                }
            }
        } else if batch.len() < BESIDE && open {
            // Beside a batch committing: gather until it commits, or
            // until enough wait to be worth a statement of their own.
            tokio::select! {
                _ = committing.join_next() => {}
                received = receiver.recv_many(&mut batch, room) => open = received > 0,
            }
            continue;
        }
        statistics.written(batch.len());
        let batch = std::mem::replace(&mut batch, Vec::with_capacity(MAX_BATCH));
        let (pool, linker) = (pool.clone(), linker.clone());
        committing.spawn(async move { commit_batch(&pool, &linker, batch).await });
    }
    while committing.join_next().await.is_some() {}
}

async fn commit_batch(pool: &PgPool, linker: &Linker, batch: Vec<Request>) {
    for round in rounds(batch) {
        commit_round(pool, linker, round).await;
    }
}

/// `batch` in rounds: the first write of each record, then the second of
/// each record written twice (rare: writes of one batch are concurrent,
/// none answered before another came), and so on. Each round is in lock
/// order and names each record once.
fn rounds(mut batch: Vec<Request>) -> Vec<Vec<Request>> {
    // Stable: two writes of one record keep the order they came in.
    batch.sort_by(|a, b| a.write.lock_order().cmp(&b.write.lock_order()));
    let mut rounds: Vec<Vec<Request>> = Vec::new();
    let mut nth = 0;
    for request in batch {
        let again = rounds
            .get(nth)
            .and_then(|round| round.last())
            .is_some_and(|last| last.write.lock_order() == request.write.lock_order());
        nth = if again { nth + 1 } else { 0 };
        if rounds.len() == nth {
            rounds.push(Vec::new());
        }
        rounds[nth].push(request);
    }
    rounds
}

async fn commit_round(pool: &PgPool, linker: &Linker, round: Vec<Request>) {
    match apply(pool, &round).await {
        Ok((answers, chains)) => {
            if !chains.is_empty() {
                linker.queued(chains);
            }
            for (request, answer) in round.into_iter().zip(answers) {
                let _ = request.reply.send(answer);
            }
        }
        Err(e) => {
            let message = e.to_string();
            for request in round {
                let _ = request
                    .reply
                    .send(Err(StoreError::Unavailable(message.clone())));
            }
        }
    }
}

/// One statement, committed when it returns ([`bulk::write_all`]): the
/// answers, in `round`'s order, and the namespaces whose entries it
/// queued.
async fn apply(
    pool: &PgPool,
    round: &[Request],
) -> Result<(Vec<Result<(), StoreError>>, Vec<String>), StoreError> {
    let mut conn = pool.acquire().await.map_err(unavailable)?;
    let writes: Vec<bulk::Write> = round.iter().map(Request::bulk).collect();
    let done = bulk::write_all(&mut conn, &writes).await?;
    let (mut answers, mut chains) = (Vec::with_capacity(round.len()), BTreeSet::new());
    for (request, done) in round.iter().zip(done) {
        let record = request.write.record();
        answers.push(match (&request.write, done) {
            (_, true) => {
                if request.audit.is_some() {
                    chains.insert(record.namespace.as_str());
                }
                Ok(())
            }
            (Write::Create(_), false) => Err(StoreError::AlreadyExists {
                kind: record.kind.clone(),
                name: record.name.clone(),
            }),
            // A read tells a missing record from another version.
            (Write::Update { expected, .. }, false) => {
                Err(writes::not_replaced(&mut conn, record, *expected).await)
            }
        });
    }
    Ok((answers, chains.into_iter().map(str::to_owned).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testsuite::record;

    fn update(name: &str, expected: u64) -> Request {
        let (reply, _) = oneshot::channel();
        let record = record("ToolCall", "a", name);
        let write = Write::Update { record, expected };
        Request {
            write,
            audit: None,
            reply,
        }
    }

    #[test]
    fn a_record_written_again_in_a_batch_waits_for_the_next_round() {
        let batch = [("y", 1), ("x", 1), ("z", 1), ("x", 2), ("y", 2), ("x", 3)];
        let rounds = rounds(batch.iter().map(|&(n, v)| update(n, v)).collect());
        let rounds: Vec<Vec<(&str, u64)>> = rounds
            .iter()
            .map(|round| {
                round
                    .iter()
                    .map(|r| match &r.write {
                        Write::Update { record, expected } => (record.name.as_str(), *expected),
                        Write::Create(record) => (record.name.as_str(), 0),
                    })
                    .collect()
            })
            .collect();
        assert_eq!(
            rounds,
            [
                vec![("x", 1), ("y", 1), ("z", 1)],
                vec![("x", 2), ("y", 2)],
                vec![("x", 3)],
            ]
        );
    }
}
