//! What the machine itself costs: the latency of one synced write on the
//! store's file system (the floor under any durable call), and resident
//! memory, to show it stays flat as calls accumulate.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// p50 and p99 of `samples` synced 4 KiB appends in `dir`, in milliseconds:
/// what one SQLite commit with `synchronous=FULL` pays at least (its WAL
/// append and fsync).
pub fn sync_floor(dir: &Path, samples: usize) -> Result<(f64, f64)> {
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
