//! Latency at an offered rate (open loop): calls start on a schedule
//! whether or not earlier ones have answered, as independent agents' calls
//! do. In the closed loop, 64 callers always wait, so mean latency is
//! 64 ÷ throughput; here a call's latency is what it costs when joch keeps
//! up with the rate asked of it.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use reqwest::Client;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::breakdown::{self, Breakdown};
use crate::{Args, Latencies, Target, latencies, one_call, percentile_ms};

/// Most calls in flight at once, and so most connections open: as many as
/// the OpenAI SDK's HTTP client allows (`max_connections=1000`). A client
/// without a bound turned a moment's delay into thousands of connections
/// (bench/RESULTS.md, "run away"). A call that waits for a slot is late
/// from its start, and its latency counts the wait.
const MAX_IN_FLIGHT: usize = 1000;

/// For each offered rate: the direct baseline, the store alone (in a new
/// store in `dir`), then each joch scenario.
pub async fn open_loop(
    client: &Client,
    args: &Args,
    webhook_url: &str,
    servers: &[(&str, Target)],
    dir: &Path,
    pg_alone: Option<&crate::pg_alone::Alone>,
) -> Result<()> {
    for &rate in &args.offered_rate {
        let calls = (rate * args.offered_seconds).max(1);
        println!(
            "\nopen loop: {rate} calls/s offered for {} s (latency from each call's start; +p99 against direct at the same rate)",
            args.offered_seconds
        );
        let (direct, _, _) =
            at_rate(client, calls, rate, &Target::Direct(webhook_url.to_owned())).await?;
        let direct_p99 = percentile_ms(&direct, 0.99);
        println!(
            "  {:<20} p50 {:>7.3} ms  p99 {direct_p99:>7.3} ms",
            "direct",
            percentile_ms(&direct, 0.50)
        );
        crate::store_alone::at_rate(dir, rate, args.offered_seconds).await?;
        if let Some(alone) = pg_alone {
            alone.at_rate(rate, args.offered_seconds).await?;
        }
        for (scenario, target) in servers {
            // PostgreSQL's work per call, for the scenarios on it.
            let before = match (pg_alone, scenario.starts_with("pg_")) {
                (Some(alone), true) => Some(alone.work().await?),
                _ => None,
            };
            let (joch, failures, mut stages) = at_rate(client, calls, rate, target).await?;
            if let (Some(alone), Some(before)) = (pg_alone, before) {
                let work = alone.work().await?.since(&before, calls);
                println!("  joch_{scenario:<15} {work}");
                println!(
                    "RESULTW scenario=joch_{scenario} rate={rate} {}",
                    work.fields()
                );
            }
            let (p50, p99) = (percentile_ms(&joch, 0.50), percentile_ms(&joch, 0.99));
            let added = p99 - direct_p99;
            println!(
                "  joch_{scenario:<15} p50 {p50:>7.3} ms  p99 {p99:>7.3} ms  +p99 {added:>7.3} ms  failures {failures}"
            );
            println!(
                "RESULTO scenario=joch_{scenario} rate={rate} calls={calls} p50_ms={p50:.3} p99_ms={p99:.3} added_p99_ms={added:.3} failures={failures}"
            );
            breakdown::report(scenario, rate, &mut stages);
            anyhow::ensure!(
                failures == 0,
                "joch_{scenario}: {failures} calls failed at {rate}/s"
            );
        }
    }
    Ok(())
}

/// `calls` calls started `1/rate` s apart, each timed from its own start,
/// with the stages of those answered with `Server-Timing`.
async fn at_rate(
    client: &Client,
    calls: usize,
    rate: usize,
    target: &Target,
) -> Result<(Latencies, usize, Vec<(Duration, Breakdown)>)> {
    let every = Duration::from_secs(1) / u32::try_from(rate.max(1)).unwrap_or(u32::MAX);
    let start = tokio::time::Instant::now();
    let mut running = JoinSet::new();
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    for i in 0..calls {
        // The timer ticks in milliseconds: faster rates start in small bursts.
        tokio::time::sleep_until(start + every * u32::try_from(i).unwrap_or(u32::MAX)).await;
        let (client, target, slots) = (client.clone(), target.clone(), slots.clone());
        running.spawn(async move {
            let started = Instant::now();
            let _slot = slots.acquire().await;
            let answered = one_call(&client, &target, i).await;
            (started.elapsed(), answered)
        });
    }
    let mut all = latencies()?;
    let mut failures = 0;
    let mut stages = Vec::with_capacity(calls);
    while let Some(done) = running.join_next().await {
        let (elapsed, answered) = done.context("a call's task panicked")?;
        all.saturating_record(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
        match answered {
            Ok(timing) => stages.extend(
                timing
                    .and_then(|t| breakdown::parse(&t, elapsed))
                    .map(|b| (elapsed, b)),
            ),
            Err(_) => failures += 1,
        }
    }
    Ok((all, failures, stages))
}
