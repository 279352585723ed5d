//! The closed loop: a fixed number of calls from a fixed number of
//! workers, each sending its next call as soon as its last is answered;
//! throughput, latency percentiles and the store's commits, and the table
//! that reports them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use hdrhistogram::Histogram;
use reqwest::Client;
use serde_json::{Value, json};

use crate::args::Args;
use crate::floor;

/// Where a worker sends its calls, and how it tells success from failure.
#[derive(Clone)]
pub(crate) enum Target {
    /// The echo webhook itself: success is a 2xx with a JSON body.
    Direct(String),
    /// joch's toolcalls endpoint on each replica, taken in turn: success is
    /// a 201 whose call `Succeeded`.
    Joch { urls: Vec<String>, tool: String },
}

/// What one scenario measured.
pub(crate) struct Stats {
    pub(crate) name: String,
    pub(crate) calls: usize,
    pub(crate) failures: usize,
    pub(crate) first_failure: Option<String>,
    pub(crate) calls_per_s: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p90_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) commits_per_s: f64,
    pub(crate) syncs_per_s: f64,
    /// Resident memory when a tenth of the calls were done, and at the end.
    pub(crate) rss_tenth_kib: u64,
    pub(crate) rss_end_kib: u64,
}

/// Warm up, then run the measured calls.
pub(crate) async fn measure(
    client: &Client,
    args: &Args,
    name: &str,
    target: Target,
    metrics: &metrics_exporter_prometheus::PrometheusHandle,
) -> Result<Stats> {
    let warmup = run(client, args.warmup, args.concurrency, &target).await?;
    if let Some(e) = warmup.first_failure {
        bail!(
            "{name}: {} warmup calls failed; first: {e}",
            warmup.failures
        );
    }

    let (commits_before, syncs_before) = (store_commits(metrics), store_syncs(metrics));
    let started = Instant::now();
    let Outcome {
        latencies,
        failures,
        first_failure,
        rss_tenth_kib,
    } = run(client, args.calls, args.concurrency, &target).await?;
    let elapsed = started.elapsed();
    let commits = store_commits(metrics) - commits_before;
    let syncs = store_syncs(metrics) - syncs_before;
    Ok(Stats {
        name: name.to_owned(),
        calls: args.calls,
        failures,
        first_failure,
        calls_per_s: args.calls as f64 / elapsed.as_secs_f64(),
        p50_ms: percentile_ms(&latencies, 0.50),
        p90_ms: percentile_ms(&latencies, 0.90),
        p99_ms: percentile_ms(&latencies, 0.99),
        max_ms: percentile_ms(&latencies, 1.0),
        commits_per_s: commits / elapsed.as_secs_f64(),
        syncs_per_s: syncs / elapsed.as_secs_f64(),
        rss_tenth_kib,
        rss_end_kib: floor::rss_kib().unwrap_or(0),
    })
}

/// Group commits the SQLite writers made so far (all joch servers in this process).
fn store_commits(metrics: &metrics_exporter_prometheus::PrometheusHandle) -> f64 {
    counted(metrics, "joch_store_commit_seconds_count ")
}

/// Syncs of their WALs, each acknowledging the commits before it.
fn store_syncs(metrics: &metrics_exporter_prometheus::PrometheusHandle) -> f64 {
    counted(metrics, "joch_store_sync_seconds_count ")
}

fn counted(metrics: &metrics_exporter_prometheus::PrometheusHandle, prefix: &str) -> f64 {
    metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(prefix)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Every call's latency (failed ones included) and what failed.
struct Outcome {
    latencies: Latencies,
    failures: usize,
    first_failure: Option<String>,
    rss_tenth_kib: u64,
}

impl Outcome {
    fn new() -> Result<Self> {
        Ok(Self {
            latencies: latencies()?,
            failures: 0,
            first_failure: None,
            rss_tenth_kib: 0,
        })
    }
}

/// Latencies in nanoseconds, 1 µs to 10 min at 3 significant digits, in
/// constant memory however many calls are made.
pub(crate) type Latencies = Histogram<u64>;

pub(crate) fn latencies() -> Result<Latencies> {
    Ok(Histogram::new_with_bounds(1_000, 600_000_000_000, 3)?)
}

/// `calls` calls from `concurrency` workers, each taking the next call index
/// until none are left, so the loop is bounded by the call count.
async fn run(
    client: &Client,
    calls: usize,
    concurrency: usize,
    target: &Target,
) -> Result<Outcome> {
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency.min(calls))
        .map(|_| {
            let (client, target, next) = (client.clone(), target.clone(), next.clone());
            tokio::spawn(async move {
                let mut mine = Outcome::new()?;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= calls {
                        return anyhow::Ok(mine);
                    }
                    let started = Instant::now();
                    let result = one_call(&client, &target, i).await;
                    let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    mine.latencies.saturating_record(nanos);
                    if let Err(e) = result {
                        mine.failures += 1;
                        mine.first_failure.get_or_insert(format!("{e:#}"));
                    }
                }
            })
        })
        .collect();

    // Memory once a tenth of the calls are done: against the end, it shows
    // whether joch's memory grows with the number of calls.
    let sampler = {
        let next = next.clone();
        tokio::spawn(async move {
            while next.load(Ordering::Relaxed) < calls / 10 {
                tokio::time::sleep(floor::SAMPLE_EVERY).await;
            }
            floor::rss_kib().unwrap_or(0)
        })
    };
    let mut all = Outcome::new()?;
    for worker in workers {
        let mine = worker.await.context("worker panicked")??;
        all.latencies
            .add(&mine.latencies)
            .context("merging latencies")?;
        all.failures += mine.failures;
        all.first_failure = all.first_failure.or(mine.first_failure);
    }
    all.rss_tenth_kib = sampler.await.unwrap_or(0);
    Ok(all)
}

/// One call, including reading and parsing the whole answer; for a call
/// through joch, the `Server-Timing` value it was answered with.
pub(crate) async fn one_call(client: &Client, target: &Target, i: usize) -> Result<Option<String>> {
    let input = json!({"n": i, "text": "hello"});
    match target {
        Target::Direct(url) => {
            let response = client
                .post(url)
                .json(&input)
                .send()
                .await?
                .error_for_status()?;
            response.json::<Value>().await?;
            Ok(None)
        }
        Target::Joch { urls, tool } => {
            let call = json!({"spec": {"toolRef": {"name": tool}, "input": input}});
            let response = client
                .post(&urls[i % urls.len()])
                .json(&call)
                .send()
                .await?;
            let status = response.status();
            let timing = response
                .headers()
                .get("server-timing")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body: Value = response.json().await?;
            let phase = body.pointer("/status/phase").and_then(Value::as_str);
            ensure!(
                status.as_u16() == 201 && phase == Some("Succeeded"),
                "HTTP {status}, phase {phase:?}: {body}"
            );
            Ok(timing)
        }
    }
}

/// A percentile of the latencies (1.0: the largest), in milliseconds.
pub(crate) fn percentile_ms(latencies: &Latencies, p: f64) -> f64 {
    latencies.value_at_quantile(p) as f64 / 1e6
}

/// A table for people, then one `RESULT` line per scenario for scripts. Every
/// ratio and added latency compares a scenario with the first (the direct baseline).
pub(crate) fn report(results: &[Stats]) {
    let Some(base) = results.first() else { return };
    let mut table = vec![String::new(), TABLE_HEADER.to_owned()];
    let mut lines = vec![String::new()];
    for s in results {
        let Stats {
            name,
            calls,
            failures,
            calls_per_s: cps,
            p50_ms: p50,
            p90_ms: p90,
            p99_ms: p99,
            max_ms: max,
            commits_per_s: commits,
            syncs_per_s: syncs,
            rss_tenth_kib: rss10,
            rss_end_kib: rss_end,
            ..
        } = s;
        let growth = if *rss10 > 0 {
            (*rss_end as f64 / *rss10 as f64 - 1.0) * 100.0
        } else {
            0.0
        };
        let thru = cps / base.calls_per_s;
        let (p50d, p90d, p99d, maxd) = (
            p50 - base.p50_ms,
            p90 - base.p90_ms,
            p99 - base.p99_ms,
            max - base.max_ms,
        );
        table.push(format!(
            "{name:<20} {cps:>9.0} {thru:>7.3} {p50:>8.3} {p90:>8.3} {p99:>8.3} {max:>8.3} \
             {p50d:>8.3} {p99d:>8.3} {commits:>9.0} {growth:>+6.1}% {failures:>8}"
        ));
        lines.push(format!(
            "RESULT scenario={name} calls={calls} failures={failures} calls_per_s={cps:.1} throughput_ratio={thru:.3} \
             p50_ms={p50:.3} p90_ms={p90:.3} p99_ms={p99:.3} max_ms={max:.3} added_p50_ms={p50d:.3} \
             added_p90_ms={p90d:.3} added_p99_ms={p99d:.3} added_max_ms={maxd:.3} commits_per_s={commits:.0} \
             syncs_per_s={syncs:.0} rss_tenth_kib={rss10} rss_end_kib={rss_end}"
        ));
    }
    println!("{}\n{}", table.join("\n"), lines.join("\n"));
}

// Matches the widths of the rows' format string above.
const TABLE_HEADER: &str = "scenario               calls/s  thru x   p50 ms   p90 ms   p99 ms   max ms  \
                            +p50 ms  +p99 ms commits/s  RSS Δ% failures";
