//! One caller at a time: the latency joch adds to a call, against the
//! synced commits its class needs (one for a read-only or idempotent tool,
//! its result; two for a write, its intent and its result).

use std::path::Path;

use anyhow::Result;
use reqwest::Client;

use crate::{Args, Stats, Target, floor, measure};

pub async fn at_rest(
    client: &Client,
    args: &Args,
    webhook_url: &str,
    servers: &[(&str, Target)],
    dir: &Path,
    metrics: &metrics_exporter_prometheus::PrometheusHandle,
) -> Result<Vec<Stats>> {
    let samples = args.floor_samples.max(1);
    let (disk_p50, disk_p99) = floor::disk_floor(dir, samples)?;
    println!(
        "\ndisk (a synced 4 KiB append in the stores' directory): p50 {disk_p50:.3} ms, p99 {disk_p99:.3} ms"
    );
    let (own_p50, own_p99) = crate::store_alone::one_at_a_time(dir, samples).await?;
    println!(
        "store alone, one write at a time (a settled no-op call's record and audit entry, synced): p50 {own_p50:.3} ms, p99 {own_p99:.3} ms"
    );
    let one = Args {
        calls: args.single_calls.max(1),
        concurrency: 1,
        warmup: args.warmup.min(50),
        single_calls: 0,
        floor_samples: 0,
        postgres: None,
        only: Vec::new(),
        replicas: Vec::new(),
        with_policy: args.with_policy,
        offered_rate: Vec::new(),
        offered_seconds: 0,
        trust: false,
        ledger_calls: 0,
        soak_seconds: 0,
        soak_baseline_seconds: 0,
        soak_joch: None,
        joch_process: false,
        replica_cpus: None,
        soak_open_files: 0,
        soak_slow: 0,
        soak_concurrency: 0,
        soak_mcp_every_ms: 0,
        mcp: false,
        mcp_concurrency: 0,
        mcp_abandoned: 0,
        mcp_abandoned_idle_seconds: 0,
    };
    let direct = measure(
        client,
        &one,
        "direct_1",
        Target::Direct(webhook_url.to_owned()),
        metrics,
    )
    .await?;
    println!(
        "one caller ({} calls each): direct p50 {:.3} ms; the floor is a synced one-row commit on that scenario's own store file",
        one.calls, direct.p50_ms
    );
    let mut results = vec![];
    for (scenario, target) in servers {
        let (floor_p50, _) = floor::commit_floor(&dir.join(format!("{scenario}.db")), samples)?;
        let stats = measure(
            client,
            &one,
            &format!("joch_{scenario}_1"),
            target.clone(),
            metrics,
        )
        .await?;
        let syncs = if *scenario == "external_write" {
            2.0
        } else {
            1.0
        };
        let added = stats.p50_ms - direct.p50_ms;
        let ratio = added / (syncs * floor_p50).max(f64::EPSILON);
        println!(
            "  joch_{scenario:<16} p50 {:>7.3} ms  +p50 {added:>7.3} ms  floor {floor_p50:.3} ms  = {ratio:>5.2} x {syncs} floor",
            stats.p50_ms
        );
        println!(
            "RESULT1 scenario=joch_{scenario} calls={} p50_ms={:.3} added_p50_ms={added:.3} floor_p50_ms={floor_p50:.3} disk_p50_ms={disk_p50:.3} store_alone_p50_ms={own_p50:.3} syncs={syncs} floor_ratio={ratio:.2}",
            one.calls, stats.p50_ms
        );
        results.push(stats);
    }
    results.push(direct);
    Ok(results)
}
