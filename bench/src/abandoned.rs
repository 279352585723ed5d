//! Clients that `initialize` and leave (issue 19, item 8): how much of a
//! `joch serve` process's memory `--mcp-abandoned N` such sessions take,
//! and what is left of it once they expire.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use reqwest::Client;
use serde_json::json;

use crate::NAMESPACE;
use crate::soak::process::Joch;

const ACCEPT: &str = "application/json, text/event-stream";

/// Opens `sessions` sessions the way a short-lived agent does (initialize,
/// initialized, gone) against `joch` run with `idle_seconds` of session
/// idle time, and prints RSS before, after and once they expired.
pub(crate) async fn abandon(
    joch_bin: &std::path::Path,
    sessions: usize,
    idle_seconds: u64,
) -> Result<()> {
    let dir = tempfile::tempdir().context("creating temp dir")?;
    let idle = idle_seconds.to_string();
    let joch = Joch::start_with(
        joch_bin,
        dir.path(),
        4096,
        &["--mcp-session-idle-seconds", idle.as_str()],
    )?;
    let client = Client::builder().no_proxy().build()?;
    let url = format!("http://{}/v1/namespaces/{NAMESPACE}/mcp", joch.addr);
    // Warm up connections and caches.
    open_many(&client, &url, 200).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = joch.rss_kib().context("RSS")?;
    let started = Instant::now();
    open_many(&client, &url, sessions).await?;
    let took = started.elapsed();
    let after = joch.rss_kib().context("RSS")?;
    // Past the idle time and a sweep or two.
    tokio::time::sleep(Duration::from_secs(idle_seconds + idle_seconds / 2 + 2)).await;
    let expired = joch.rss_kib().context("RSS")?;
    let per_session = (after.saturating_sub(before) * 1024) / sessions.max(1) as u64;
    println!(
        "\n{sessions} MCP sessions opened and abandoned in {:.1} s: RSS {before} -> {after} KiB \
         (+{} KiB, {per_session} B/session); {expired} KiB after they expired",
        took.as_secs_f64(),
        after.saturating_sub(before)
    );
    println!(
        "RESULT scenario=mcp_abandoned sessions={sessions} seconds={:.1} rss_kib_before={before} \
         rss_kib_after={after} rss_kib_expired={expired} bytes_per_session={per_session}",
        took.as_secs_f64()
    );
    Ok(())
}

async fn open_many(client: &Client, url: &str, n: usize) -> Result<()> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (client, url, next) = (client.clone(), url.to_owned(), next.clone());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return anyhow::Ok(());
                }
                open_one(&client, &url, i).await?;
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.context("worker panicked")??;
    }
    Ok(())
}

async fn open_one(client: &Client, url: &str, i: usize) -> Result<()> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": format!("agent-{i}"), "version": "1"}}});
    let answer = client
        .post(url)
        .header("accept", ACCEPT)
        .json(&init)
        .send()
        .await?;
    ensure!(
        answer.status().is_success(),
        "initialize: HTTP {}",
        answer.status()
    );
    let id = answer
        .headers()
        .get("mcp-session-id")
        .context("no session id")?
        .to_str()?
        .to_owned();
    answer.bytes().await?;
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let answer = client
        .post(url)
        .header("accept", ACCEPT)
        .header("mcp-session-id", id)
        .json(&done)
        .send()
        .await?;
    ensure!(
        answer.status().is_success(),
        "initialized: HTTP {}",
        answer.status()
    );
    Ok(())
}
