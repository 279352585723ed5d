//! The store alone: synced writes shaped like a settled no-op call (a
//! ToolCall record of about 660 bytes and its audit entry, one write) sent
//! straight to a fresh SQLite store, on the open loop's schedule or one at a
//! time, without HTTP, the engine or the runtime's hand-offs to them.
//! Its p99 is the part of a call's tail that the store sets by itself:
//! the queue for the writer, the commit (with SQLite's checkpoints) and the
//! sync.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use joch_store::{Durability, Record, SqliteStore, Store};
use tokio::task::JoinSet;

use crate::{Latencies, latencies, percentile_ms};

/// Writes `rate × seconds` calls' records at `rate`, after a second of
/// warm-up at the same rate, into a new store in `dir`, and prints their
/// latency, each from its own start.
pub async fn at_rate(dir: &Path, rate: usize, seconds: usize) -> Result<()> {
    let store = Arc::new(
        SqliteStore::open(dir.join(format!("store-alone-{rate}.db")))
            .context("opening the store for the store-alone run")?,
    );
    let before = store.syncs();
    writes(&store, "warm", rate, rate).await?;
    let calls = (rate * seconds).max(1);
    let synced = store.syncs();
    let measured = writes(&store, "call", rate, calls).await?;
    let per_write = (store.syncs() - synced) as f64 / calls as f64;
    let (p50, p99) = (
        percentile_ms(&measured, 0.50),
        percentile_ms(&measured, 0.99),
    );
    let max = measured.max() as f64 / 1e6;
    println!(
        "  {:<20} p50 {p50:>7.3} ms  p99 {p99:>7.3} ms  max {max:>7.3} ms  syncs/write {per_write:.2}",
        "store alone"
    );
    println!(
        "RESULTS scenario=store_alone rate={rate} calls={calls} p50_ms={p50:.3} p99_ms={p99:.3} max_ms={max:.3} syncs_per_write={per_write:.3} warmup_syncs={}",
        synced - before
    );
    Ok(())
}

/// p50 and p99, in milliseconds, of `samples` such writes one at a time
/// (after a few unmeasured), into a new store in `dir`: a settled no-op
/// call's own synced commit through the store's writer, which a lone call
/// cannot go below, beside the one-row floor.
pub async fn one_at_a_time(dir: &Path, samples: usize) -> Result<(f64, f64)> {
    let store = SqliteStore::open(dir.join("store-alone-one.db"))
        .context("opening the store for the one-at-a-time run")?;
    let mut all = latencies()?;
    for i in 0..samples + WARMUP {
        let (record, audit) = settled_call(&format!("one-{i:09}"), i);
        let started = Instant::now();
        store
            .create_audited(record, audit, Durability::Sync)
            .await
            .context("a store-alone write failed")?;
        if i >= WARMUP {
            all.saturating_record(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
    }
    Ok((percentile_ms(&all, 0.50), percentile_ms(&all, 0.99)))
}

/// Writes not measured before `one_at_a_time`'s: the store's first pages.
const WARMUP: usize = 20;

/// `calls` synced writes started `1/rate` s apart.
async fn writes(
    store: &Arc<SqliteStore>,
    prefix: &str,
    rate: usize,
    calls: usize,
) -> Result<Latencies> {
    let every = Duration::from_secs(1) / u32::try_from(rate.max(1)).unwrap_or(u32::MAX);
    let start = tokio::time::Instant::now();
    let mut running = JoinSet::new();
    for i in 0..calls {
        // As the open loop's calls: the timer ticks in milliseconds.
        tokio::time::sleep_until(start + every * u32::try_from(i).unwrap_or(u32::MAX)).await;
        let (record, audit) = settled_call(&format!("{prefix}-{i:09}"), i);
        let store = store.clone();
        running.spawn(async move {
            let started = Instant::now();
            let written = store.create_audited(record, audit, Durability::Sync).await;
            (started.elapsed(), written)
        });
    }
    let mut all = latencies()?;
    while let Some(done) = running.join_next().await {
        let (elapsed, written) = done.context("a write's task panicked")?;
        written.context("a store-alone write failed")?;
        all.saturating_record(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }
    Ok(all)
}

/// A record and audit entry of the sizes and index fields of a settled
/// no-op call.
fn settled_call(name: &str, i: usize) -> (Record, String) {
    let mut record = Record {
        kind: "ToolCall".to_owned(),
        namespace: "default".to_owned(),
        name: name.to_owned(),
        resource_version: 1,
        labels: Default::default(),
        index: Default::default(),
        body: format!(
            r#"{{"metadata":{{"name":"{name}"}},"pad":"{}"}}"#,
            "x".repeat(600)
        ),
    };
    record.index.tool = Some("noop".to_owned());
    record.index.phase = Some("Succeeded".to_owned());
    record.index.created_ms = Some(1_700_000_000_000 + i64::try_from(i).unwrap_or(0));
    let audit = format!(
        r#"{{"kind":"ToolCall","name":"{name}","verb":"create","pad":"{}"}}"#,
        "y".repeat(200)
    );
    (record, audit)
}
