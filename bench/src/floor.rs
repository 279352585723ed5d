//! What the machine itself costs: the latency of one synced commit on a
//! store's own file (the floor under any durable call) and of a bare synced
//! write beside it, and resident memory, to show it stays flat as calls
//! accumulate.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// p50 and p99, in milliseconds, of `samples` commits of one small row,
/// each synced, into a scratch table of the SQLite store at `db`, through a
/// connection of its own set up as the store's writer is (WAL,
/// `synchronous=FULL`): the least any durable write to that store pays.
pub fn commit_floor(db: &Path, samples: usize) -> Result<(f64, f64)> {
    let conn = rusqlite::Connection::open(db).context("opening the store for its floor")?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA busy_timeout = 5000;
         CREATE TABLE IF NOT EXISTS bench_floor (n INTEGER PRIMARY KEY, at INTEGER NOT NULL);",
    )?;
    let mut insert = conn.prepare("INSERT INTO bench_floor (at) VALUES (?1)")?;
    let mut latencies = crate::latencies()?;
    for i in 0..samples {
        let started = Instant::now();
        insert.execute([i64::try_from(i)?])?;
        latencies
            .saturating_record(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    Ok((
        crate::percentile_ms(&latencies, 0.50),
        crate::percentile_ms(&latencies, 0.99),
    ))
}

/// p50 and p99 of `samples` synced 4 KiB appends in `dir`, in milliseconds:
/// the disk alone, for comparison with the commit floor.
pub fn disk_floor(dir: &Path, samples: usize) -> Result<(f64, f64)> {
    let path = dir.join("sync-floor.bin");
    let mut file = std::fs::File::create(&path).context("creating the sync-floor file")?;
    let page = [0x5au8; 4096];
    let mut latencies = crate::latencies()?;
    for _ in 0..samples {
        let started = Instant::now();
        file.write_all(&page)?;
        file.sync_data()?;
        latencies
            .saturating_record(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    std::fs::remove_file(&path).ok();
    Ok((
        crate::percentile_ms(&latencies, 0.50),
        crate::percentile_ms(&latencies, 0.99),
    ))
}

/// Resident memory of this process now, from /proc (Linux).
pub fn rss_kib() -> Option<u64> {
    proc_status("VmRSS:")
}

/// Peak resident memory of this process, from /proc (Linux).
pub fn peak_rss_kib() -> Option<u64> {
    proc_status("VmHWM:")
}

fn proc_status(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// How long to wait between two looks at the progress counter.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(20);
