//! The PostgreSQL scenarios: N joch replicas (in this process, each with its
//! own connection pool, as separate processes would have) on one fresh
//! database, the load spread over them in turn.

use std::sync::Arc;

use anyhow::{Context, Result};
use joch_store::testsuite::postgres::TestServer;
use reqwest::Client;

use crate::{Target, create_tool, start_joch, toolcalls_url};

/// Starts `count` replicas on a new database of `server`, with the no-op tool.
pub(crate) async fn replicas(client: &Client, server: &str, count: usize) -> Result<Target> {
    let tool = ("noop", "read_only", "noop", "");
    replicas_with(client, server, &format!("joch_bench_x{count}"), count, tool).await
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
async fn fresh_database(server: &str, name: &str) -> Result<String> {
    TestServer::new(server)
        .fresh_database(name)
        .await
        .map_err(|e| anyhow::anyhow!(e))
        .context("making a fresh database on the PostgreSQL server")
}
