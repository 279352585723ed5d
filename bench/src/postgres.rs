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
    let url = fresh_database(server, &format!("joch_bench_x{count}")).await?;
    let mut urls = Vec::new();
    for n in 0..count {
        let store = joch_store::PostgresStore::connect(&url, Default::default())
            .await
            .with_context(|| format!("connecting replica {n} to PostgreSQL"))?;
        let joch = start_joch(Arc::new(store), Some(format!("bench-{n}"))).await?;
        if n == 0 {
            create_tool(client, joch, "tool-noop", "read_only", "noop", "").await?;
        }
        urls.push(toolcalls_url(joch));
    }
    Ok(Target::Joch {
        urls,
        tool: "tool-noop".to_owned(),
    })
}

/// Drops and creates `name` on `server`; its URL.
async fn fresh_database(server: &str, name: &str) -> Result<String> {
    TestServer::new(server)
        .fresh_database(name)
        .await
        .map_err(|e| anyhow::anyhow!(e))
        .context("making a fresh database on the PostgreSQL server")
}
