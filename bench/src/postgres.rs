//! The PostgreSQL scenarios: N joch replicas (in this process, each with its
//! own connection pool, as separate processes would have) on one fresh
//! database, the load spread over them in turn.

use std::sync::Arc;

use anyhow::{Context, Result};
use joch_store::testsuite::postgres::TestServer;
use metrics_exporter_prometheus::PrometheusHandle;
use reqwest::Client;

use crate::pg_alone::Alone;
use crate::{Args, SCENARIOS, Stats, Target, create_tool, measure, start_joch, toolcalls_url};

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
        for &count in &args.replicas {
            let database = format!("joch_bench_{scenario}_x{count}");
            let tool = (scenario, level, backend, webhook_url);
            let target = replicas_with(client, server, &database, count, tool).await?;
            let name = format!("joch_pg_{scenario}_x{count}");
            let before = match alone {
                Some(alone) => Some(alone.work().await?),
                None => None,
            };
            results.push(measure(client, args, &name, target, metrics).await?);
            if let (Some(alone), Some(before)) = (alone, before) {
                let work = alone.work().await?.since(&before, args.warmup + args.calls);
                println!("  {name:<20} {work}");
                println!("RESULTW scenario={name} {}", work.fields());
            }
        }
    }
    Ok(results)
}

/// For the open loop: one replica per scenario (name, level, backend), each
/// on a new database of `server`, named `pg_<scenario>`.
pub(crate) async fn one_replica_each(
    client: &Client,
    server: &str,
    scenarios: &[(&'static str, &str, &str)],
    webhook_url: &str,
) -> Result<Vec<(&'static str, Target)>> {
    let mut targets = Vec::new();
    for &(scenario, level, backend) in scenarios {
        let name = match scenario {
            "noop" => "pg_noop",
            "read_only" => "pg_read_only",
            _ => "pg_external_write",
        };
        let tool = (scenario, level, backend, webhook_url);
        let database = format!("joch_bench_{scenario}");
        targets.push((
            name,
            replicas_with(client, server, &database, 1, tool).await?,
        ));
    }
    Ok(targets)
}

async fn replicas_with(
    client: &Client,
    server: &str,
    database: &str,
    count: usize,
    (scenario, level, backend, webhook_url): (&str, &str, &str, &str),
) -> Result<Target> {
    let url = fresh_database(server, database).await?;
    let tool = format!("tool-{}", scenario.replace('_', "-"));
    let mut urls = Vec::new();
    for n in 0..count {
        let store = joch_store::PostgresStore::connect(&url, Default::default())
            .await
            .with_context(|| format!("connecting replica {n} to PostgreSQL"))?;
        let joch = start_joch(Arc::new(store), Some(format!("bench-{n}"))).await?;
        if n == 0 {
            create_tool(client, joch, &tool, level, backend, webhook_url).await?;
        }
        urls.push(toolcalls_url(joch));
    }
    Ok(Target::Joch { urls, tool })
}

/// Drops and creates `name` on `server`; its URL.
pub(crate) async fn fresh_database(server: &str, name: &str) -> Result<String> {
    TestServer::new(server)
        .fresh_database(name)
        .await
        .map_err(|e| anyhow::anyhow!(e))
        .context("making a fresh database on the PostgreSQL server")
}
