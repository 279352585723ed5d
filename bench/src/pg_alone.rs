//! PostgreSQL alone: what the server does by itself with the writes of a
//! settled no-op call (a ToolCall row of about 660 bytes in `objects`, with
//! its indexes, and a 250-byte entry in `audit`), one synced transaction
//! each, from a pool of 16 connections, without joch: the ceiling joch's
//! calls on PostgreSQL are compared with, measured in the same run.
//!
//! Each write is one statement (one round trip, one transaction): the most
//! a client could ask of the server for that work. The schema is joch's
//! own, made by its migrations on a fresh database.
//!
//! [`Work`] reads what a stretch of load cost the server: transactions that
//! wrote (transaction ids given out) and WAL bytes, so that each scenario
//! can print them per call.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_postgres::{PgPool, PgPoolOptions};
use tokio::task::JoinSet;

use crate::{Latencies, latencies, percentile_ms};

/// Connections of the pool: as many as a joch replica's (`PostgresOptions`).
const CONNECTIONS: u32 = 16;

/// A fresh database with joch's schema, and a pool on it.
pub(crate) struct Alone {
    pool: PgPool,
    /// Names and audit numbers: each write's are new.
    next: Arc<AtomicUsize>,
}

impl Alone {
    /// Makes the database `joch_bench_alone` on `server` and opens the pool.
    pub(crate) async fn open(server: &str) -> Result<Self> {
        let url = crate::postgres::fresh_database(server, "joch_bench_alone").await?;
        // joch's migrations make the schema; the store is closed at once.
        let store = joch_store::PostgresStore::connect(&url, Default::default())
            .await
            .context("making joch's schema for PostgreSQL alone")?;
        store.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .connect(&url)
            .await
            .context("connecting PostgreSQL alone's pool")?;
        Ok(Self {
            pool,
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// `calls` writes from `concurrency` callers, after `warmup`: writes/s,
    /// p50 and p99 (ms), and the server's work per write.
    pub(crate) async fn closed_loop(
        &self,
        warmup: usize,
        calls: usize,
        concurrency: usize,
    ) -> Result<(f64, Latencies, Work)> {
        self.closed(warmup, concurrency).await?;
        let before = Work::now(&self.pool).await?;
        let started = Instant::now();
        let all = self.closed(calls, concurrency).await?;
        let rate = calls as f64 / started.elapsed().as_secs_f64();
        let work = Work::now(&self.pool).await?.since(&before, calls);
        Ok((rate, all, work))
    }

    async fn closed(&self, calls: usize, concurrency: usize) -> Result<Latencies> {
        let left = Arc::new(AtomicUsize::new(calls));
        let mut callers = JoinSet::new();
        for _ in 0..concurrency.min(calls).max(1) {
            let (left, pool, next) = (left.clone(), self.pool.clone(), self.next.clone());
            callers.spawn(async move {
                let mut mine = latencies()?;
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
                {
                    let started = Instant::now();
                    write(&pool, next.fetch_add(1, Ordering::Relaxed)).await?;
                    mine.saturating_record(nanos(started.elapsed()));
                }
                anyhow::Ok(mine)
            });
        }
        let mut all = latencies()?;
        while let Some(mine) = callers.join_next().await {
            all.add(&mine.context("a caller panicked")??)?;
        }
        Ok(all)
    }

    /// Writes at `rate` for `seconds` (after a second of warm-up), each
    /// timed from its scheduled start, and prints the line beside joch's.
    pub(crate) async fn at_rate(&self, rate: usize, seconds: usize) -> Result<()> {
        self.scheduled(rate, rate).await?;
        let calls = (rate * seconds).max(1);
        let before = Work::now(&self.pool).await?;
        let all = self.scheduled(rate, calls).await?;
        let work = Work::now(&self.pool).await?.since(&before, calls);
        let (p50, p99) = (percentile_ms(&all, 0.50), percentile_ms(&all, 0.99));
        println!(
            "  {:<20} p50 {p50:>7.3} ms  p99 {p99:>7.3} ms  {work}",
            "postgres alone"
        );
        println!(
            "RESULTS scenario=postgres_alone rate={rate} calls={calls} p50_ms={p50:.3} p99_ms={p99:.3} {}",
            work.fields()
        );
        Ok(())
    }

    async fn scheduled(&self, rate: usize, calls: usize) -> Result<Latencies> {
        let every = Duration::from_secs(1) / u32::try_from(rate.max(1)).unwrap_or(u32::MAX);
        let start = tokio::time::Instant::now();
        let mut running = JoinSet::new();
        for i in 0..calls {
            tokio::time::sleep_until(start + every * u32::try_from(i).unwrap_or(u32::MAX)).await;
            let (pool, n) = (self.pool.clone(), self.next.fetch_add(1, Ordering::Relaxed));
            running.spawn(async move {
                let started = Instant::now();
                write(&pool, n).await.map(|()| started.elapsed())
            });
        }
        let mut all = latencies()?;
        while let Some(done) = running.join_next().await {
            all.saturating_record(nanos(done.context("a write panicked")??));
        }
        Ok(all)
    }

    /// What the server has done so far; see [`Work`].
    pub(crate) async fn work(&self) -> Result<Work> {
        Work::now(&self.pool).await
    }
}

/// The record and its audit entry, in one statement, committed (and, with
/// `fsync` on, flushed) before it answers.
async fn write(pool: &PgPool, n: usize) -> Result<()> {
    let name = format!("alone-{n:09}");
    let body = format!(
        r#"{{"metadata":{{"name":"{name}"}},"pad":"{}"}}"#,
        "x".repeat(600)
    );
    let audit = format!(
        r#"{{"kind":"ToolCall","name":"{name}","verb":"create","pad":"{}"}}"#,
        "y".repeat(200)
    );
    let seq = i64::try_from(n).unwrap_or(i64::MAX);
    query(
        "WITH o AS (INSERT INTO objects (kind, namespace, name, resource_version, tool, phase,
                                        body, created_at)
                    VALUES ('ToolCall', 'bench', $1, 1, 'noop', 'Succeeded', $2, $3))
         INSERT INTO audit (namespace, seq, prev, hash, body) VALUES ('bench', $4, $5, $6, $7)",
    )
    .bind(&name)
    .bind(&body)
    .bind(1_700_000_000_000 + seq)
    .bind(seq)
    .bind(HASH)
    .bind(HASH)
    .bind(&audit)
    .execute(pool)
    .await
    .context("a PostgreSQL-alone write failed")?;
    Ok(())
}

/// A hash of the length joch's chain stores (SHA-256, hex).
const HASH: &str = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8";

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The server's counters: transaction ids given out (one per transaction
/// that wrote, each a synced commit) and the WAL's position. The WAL is the
/// whole server's: only one scenario runs at a time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Work {
    writing_transactions: f64,
    wal_bytes: f64,
}

impl Work {
    async fn now(pool: &PgPool) -> Result<Self> {
        let row = query(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::TEXT::BIGINT,
                    (pg_current_wal_lsn() - '0/0'::pg_lsn)::BIGINT",
        )
        .fetch_one(pool)
        .await
        .context("reading PostgreSQL's counters")?;
        let (xid, wal): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        Ok(Self {
            writing_transactions: xid as f64,
            wal_bytes: wal as f64,
        })
    }

    /// The work since `before`, per call of `calls`.
    pub(crate) fn since(&self, before: &Self, calls: usize) -> Self {
        let calls = calls.max(1) as f64;
        Self {
            writing_transactions: (self.writing_transactions - before.writing_transactions) / calls,
            wal_bytes: (self.wal_bytes - before.wal_bytes) / calls,
        }
    }

    pub(crate) fn fields(&self) -> String {
        format!(
            "pg_write_transactions_per_call={:.3} pg_wal_bytes_per_call={:.0}",
            self.writing_transactions, self.wal_bytes
        )
    }
}

impl std::fmt::Display for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "write transactions/call {:.2}  WAL bytes/call {:.0}",
            self.writing_transactions, self.wal_bytes
        )
    }
}

impl crate::Stats {
    /// A row of the closed loop's table for writes made without joch.
    pub(crate) fn of_writes(name: &str, calls: usize, rate: f64, all: &Latencies) -> Self {
        Self {
            name: name.to_owned(),
            calls,
            failures: 0,
            first_failure: None,
            calls_per_s: rate,
            p50_ms: percentile_ms(all, 0.50),
            p90_ms: percentile_ms(all, 0.90),
            p99_ms: percentile_ms(all, 0.99),
            max_ms: percentile_ms(all, 1.0),
            commits_per_s: 0.0,
            syncs_per_s: 0.0,
            rss_tenth_kib: 0,
            rss_end_kib: 0,
        }
    }
}
