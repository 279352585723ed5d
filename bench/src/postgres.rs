//! The PostgreSQL scenarios: N joch replicas (in this process, each with its
//! own connection pool, as separate processes would have) on one fresh
//! database, the load spread over them in turn.

use std::sync::Arc;

use anyhow::{Context, Result};
use joch_store::testsuite::postgres::TestServer;
use metrics_exporter_prometheus::PrometheusHandle;
use reqwest::Client;

use crate::pg_alone::Alone;
use crate::soak::process::Joch;
use crate::{
    Args, SCENARIOS, Stats, Target, create_tool, measure, soak_settings, start_joch, toolcalls_url,
};

/// The closed loops on PostgreSQL: PostgreSQL alone (when `alone` is given),
/// then each scenario with each of `--replicas` (1, 2 and 3), each on a new database of
/// `server`, with the server's work per call. Without `--only` (the CI's
/// short run) only the no-op scenario, as before PostgreSQL alone existed.
pub(crate) async fn closed_loops(
    client: &Client,
    args: &Args,
    server: &str,
    webhook_url: &str,
    alone: Option<&Alone>,
    metrics: &PrometheusHandle,
) -> Result<Vec<Stats>> {
    let mut results = Vec::new();
    if let Some(alone) = alone {
        let (rate, all, work) = alone
            .closed_loop(args.warmup, args.calls, args.concurrency)
            .await?;
        results.push(Stats::of_writes("postgres_alone", args.calls, rate, &all));
        println!("  postgres_alone       {work}");
        println!("RESULTW scenario=postgres_alone {}", work.fields());
    }
    let scenarios = SCENARIOS.iter().filter(|s| match args.only.is_empty() {
        true => s.0 == "noop",
        false => args.only.iter().any(|o| o == s.0),
    });
    for &(scenario, level, backend) in scenarios {
        let first = results.len();
        for &count in &args.replicas {
            let database = format!("joch_bench_{scenario}_x{count}");
            let tool = (scenario, level, backend, webhook_url);
            let (target, processes) =
                replicas_with(client, args, server, &database, count, tool).await?;
            let name = format!("joch_pg_{scenario}_x{count}");
            let before = match alone {
                Some(alone) => Some(alone.work().await?),
                None => None,
            };
            let cpu_before = replicas_cpu_ms(&processes);
            results.push(measure(client, args, &name, target, metrics).await?);
            let calls = args.warmup + args.calls;
            if let (Some(alone), Some(before)) = (alone, before) {
                let work = alone.work().await?.since(&before, calls);
                println!("  {name:<20} {work}");
                println!("RESULTW scenario={name} {}", work.fields());
            }
            if !processes.is_empty() {
                let us = (replicas_cpu_ms(&processes) - cpu_before) * 1000.0 / calls as f64;
                println!("  {name:<20} the replicas' CPU a call {us:.0} µs");
                println!("RESULTC scenario={name} replica_cpu_us_per_call={us:.0}");
            }
        }
        print_scale(scenario, &args.replicas, &results[first..]);
    }
    Ok(results)
}

/// The CPU time the replica processes have spent so far, in ms.
fn replicas_cpu_ms(processes: &[Joch]) -> f64 {
    processes.iter().filter_map(Joch::cpu_ms).sum()
}

/// Each replica count's calls/s against the first's (`--replicas 1,2,3`:
/// against one replica's), in this run.
fn print_scale(scenario: &str, counts: &[usize], stats: &[Stats]) {
    let (Some(first), Some(base)) = (counts.first(), stats.first()) else {
        return;
    };
    if base.calls_per_s <= 0.0 {
        return;
    }
    let ratios = counts
        .iter()
        .zip(stats)
        .map(|(count, s)| format!("x{count}={:.2}", s.calls_per_s / base.calls_per_s))
        .collect::<Vec<_>>()
        .join(" ");
    println!("  joch_pg_{scenario:<14} calls/s against x{first}: {ratios}");
    println!("RESULTSCALE scenario=joch_pg_{scenario} {ratios}");
}

/// For the open loop: one replica per scenario (name, level, backend), each
/// on a new database of `server`, named `pg_<scenario>`, and the processes
/// to keep running while they are measured (`--joch-process`).
pub(crate) async fn one_replica_each(
    client: &Client,
    args: &Args,
    server: &str,
    scenarios: &[(&'static str, &str, &str)],
    webhook_url: &str,
) -> Result<(Vec<(&'static str, Target)>, Vec<Joch>)> {
    let (mut targets, mut processes) = (Vec::new(), Vec::new());
    for &(scenario, level, backend) in scenarios {
        let name = match scenario {
            "noop" => "pg_noop",
            "read_only" => "pg_read_only",
            _ => "pg_external_write",
        };
        let tool = (scenario, level, backend, webhook_url);
        let database = format!("joch_bench_{scenario}");
        let (target, started) = replicas_with(client, args, server, &database, 1, tool).await?;
        targets.push((name, target));
        processes.extend(started);
    }
    Ok((targets, processes))
}

/// `count` replicas on a new database of `server`: in this process, or
/// each a `joch serve` process of its own (`--joch-process`), which the
/// caller keeps while it measures them.
async fn replicas_with(
    client: &Client,
    args: &Args,
    server: &str,
    database: &str,
    count: usize,
    (scenario, level, backend, webhook_url): (&str, &str, &str, &str),
) -> Result<(Target, Vec<Joch>)> {
    let processes = args.joch_process.then(|| soak_settings(args)).transpose()?;
    let url = fresh_database(server, database).await?;
    let tool = format!("tool-{}", scenario.replace('_', "-"));
    let (mut urls, mut started) = (Vec::new(), Vec::new());
    for n in 0..count {
        let joch = match &processes {
            Some(settings) => {
                let process = Joch::start_replica(&settings.joch, &url, 4096, args.replica_cpus)?;
                let addr = process.addr;
                started.push(process);
                addr
            }
            None => {
                let store = joch_store::PostgresStore::connect(&url, Default::default())
                    .await
                    .with_context(|| format!("connecting replica {n} to PostgreSQL"))?;
                start_joch(Arc::new(store), Some(format!("bench-{n}"))).await?
            }
        };
        if n == 0 {
            create_tool(client, joch, &tool, level, backend, webhook_url).await?;
        }
        urls.push(toolcalls_url(joch));
    }
    Ok((Target::Joch { urls, tool }, started))
}

/// Drops and creates `name` on `server`; its URL.
pub(crate) async fn fresh_database(server: &str, name: &str) -> Result<String> {
    TestServer::new(server)
        .fresh_database(name)
        .await
        .map_err(|e| anyhow::anyhow!(e))
        .context("making a fresh database on the PostgreSQL server")
}
