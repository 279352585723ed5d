//! joch-bench: what does routing a tool call through joch cost?
//!
//! In one process it starts an echo webhook and, per joch scenario, a fresh
//! joch server (its own SQLite ledger in a temp dir): one with joch's
//! built-in no-op tool (joch's own cost), and two whose tool forwards to
//! the webhook. It drives the same load at the webhook directly (the
//! baseline), through a bare forwarder that records nothing (the ceiling of
//! any gateway here: two HTTP exchanges per call on the same cores) and
//! through joch, and prints throughput, p50/p90/p99/max
//! latency, store commits per second, joch's cost relative to the baseline,
//! and the process's peak RSS.
//!
//! Everything shares one machine and one tokio runtime, so the figures are an
//! upper bound on overhead (client, joch and webhook compete for the CPUs)
//! and say nothing about network latency, which would dilute it.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result, bail, ensure};
use axum::Json;
use axum::routing::post;
use clap::Parser;

use args::Args;
use joch_store::Store;
use reqwest::Client;
use serde_json::{Value, json};

mod abandoned;
mod args;
mod at_rest;
mod breakdown;
mod closed_loop;
mod floor;
mod mcp;
mod open_loop;
mod pg_alone;
mod postgres;
mod soak;
mod store_alone;
mod trust;

const NAMESPACE: &str = "bench";

pub(crate) use closed_loop::{
    Latencies, Stats, Target, latencies, measure, one_call, percentile_ms, report,
};

// The allocator `joch serve` runs with, so the bench measures what ships.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        args.calls > 0 && args.concurrency > 0,
        "--calls and --concurrency must be positive"
    );
    // reqwest is built with rustls but no default provider; without one it panics.
    joch_backends::install_crypto_provider();
    let metrics = install_metrics()?;

    if args.trust {
        return run_trust(&args).await;
    }
    let webhook = serve(axum::Router::new().route("/echo", post(echo))).await?;
    let webhook_url = format!("http://{webhook}/echo");
    if args.soak_seconds > 0 {
        return soak::soak(&soak_settings(&args)?, &webhook_url).await;
    }
    if args.mcp_abandoned > 0 {
        let joch = soak_settings(&args)?.joch;
        return abandoned::abandon(&joch, args.mcp_abandoned, args.mcp_abandoned_idle_seconds)
            .await;
    }
    if args.mcp {
        let settings = mcp::Settings {
            joch: soak_settings(&args)?.joch,
            single_calls: args.single_calls,
            calls: args.calls,
            concurrency: args.mcp_concurrency.max(1),
        };
        return mcp::compare(&settings, &webhook_url).await;
    }
    let dir = tempfile::tempdir().context("creating temp dir")?;
    // One client for the whole bench: keep-alive pool, no proxy (only 127.0.0.1 is contacted).
    let client = Client::builder().no_proxy().build()?;

    println!(
        "joch-bench: {} calls/scenario, concurrency {}, warmup {}, {} CPUs, {}",
        args.calls,
        args.concurrency,
        args.warmup,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if args.joch_process {
            "each joch a process of its own"
        } else {
            "all in one process"
        },
    );
    let mut results = baselines(&client, &args, &webhook_url, &metrics).await?;
    // The processes of `--joch-process`, kept running to the end.
    let (servers, _processes) = joch_scenarios(&client, &args, &webhook_url, dir.path()).await?;
    for (scenario, target) in &servers {
        let name = format!("joch_{scenario}");
        results.push(measure(&client, &args, &name, target.clone(), &metrics).await?);
    }
    // PostgreSQL alone beside joch on it, when scenarios are chosen.
    let alone = match (&args.postgres, args.only.is_empty()) {
        (Some(server), false) => Some(pg_alone::Alone::open(server).await?),
        _ => None,
    };
    if let Some(server) = &args.postgres {
        let pg = postgres::closed_loops(
            &client,
            &args,
            server,
            &webhook_url,
            alone.as_ref(),
            &metrics,
        );
        results.extend(pg.await?);
    }
    report(&results);
    // The open loop on PostgreSQL too: one replica per scenario (its
    // processes, with `--joch-process`, kept running to the end).
    let mut looped = servers.clone();
    let _pg_processes = match (&args.postgres, args.offered_rate.is_empty()) {
        (Some(server), false) => {
            let chosen: Vec<_> = SCENARIOS
                .iter()
                .filter(|s| chosen(&args, s.0))
                .copied()
                .collect();
            let (targets, processes) =
                postgres::one_replica_each(&client, &args, server, &chosen, &webhook_url).await?;
            looped.extend(targets);
            processes
        }
        _ => Vec::new(),
    };
    let pg_alone = alone.as_ref();
    open_loop::open_loop(&client, &args, &webhook_url, &looped, dir.path(), pg_alone).await?;
    results.extend(
        at_rest::at_rest(&client, &args, &webhook_url, &servers, dir.path(), &metrics).await?,
    );
    let whose = match args.joch_process {
        true => "client and webhook; each joch runs apart",
        false => "client, webhook and every joch",
    };
    println!(
        "peak RSS of the process ({whose}): {} KiB",
        floor::peak_rss_kib().unwrap_or(0)
    );
    fail_on_failures(&results)
}

/// The scenarios: name, the tool's side-effect level, its backend.
const SCENARIOS: [(&str, &str, &str); 3] = [
    ("noop", "read_only", "noop"),
    ("read_only", "read_only", "rest"),
    ("external_write", "external_write", "rest"),
];

/// Whether `--only` keeps `scenario`.
fn chosen(args: &Args, scenario: &str) -> bool {
    args.only.is_empty() || args.only.iter().any(|o| o == scenario)
}

/// The store's own metrics tell how many group commits each scenario
/// made. As `joch serve` does, observations are drained into their
/// summaries every 5 s, or they pile up until the next render and the RSS
/// figures measure them.
fn install_metrics() -> Result<metrics_exporter_prometheus::PrometheusHandle> {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    let upkeep = metrics.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(metrics)
}

/// The direct call, and the ceiling for any gateway in this setup: a bare
/// forwarder that records and decides nothing, but, like joch, turns each
/// call into two HTTP exchanges on the same cores.
async fn baselines(
    client: &Client,
    args: &Args,
    webhook_url: &str,
    metrics: &metrics_exporter_prometheus::PrometheusHandle,
) -> Result<Vec<Stats>> {
    let direct = Target::Direct(webhook_url.to_owned());
    let direct = measure(client, args, "direct", direct, metrics).await?;
    let proxy = serve(
        axum::Router::new()
            .route("/forward", post(forward))
            .with_state((
                Client::builder().no_proxy().build()?,
                webhook_url.to_owned(),
            )),
    )
    .await?;
    let forwarded = Target::Direct(format!("http://{proxy}/forward"));
    let proxied = measure(client, args, "proxy_no_joch", forwarded, metrics).await?;
    Ok(vec![direct, proxied])
}

/// A joch server per chosen scenario, each on a fresh ledger of its own
/// (so that none inherits another's rows), with its tool created.
async fn joch_scenarios(
    client: &Client,
    args: &Args,
    webhook_url: &str,
    dir: &std::path::Path,
) -> Result<(Vec<(&'static str, Target)>, Vec<soak::process::Joch>)> {
    ensure!(
        args.only.iter().all(|o| SCENARIOS.iter().any(|s| s.0 == o)),
        "--only takes noop, read_only and external_write, got {:?}",
        args.only
    );
    let (mut servers, mut processes) = (Vec::new(), Vec::new());
    for (scenario, level, backend) in SCENARIOS {
        if !chosen(args, scenario) {
            continue;
        }
        let db = dir.join(format!("{scenario}.db"));
        let joch = if args.joch_process {
            let process =
                soak::process::Joch::start_db(&soak_settings(args)?.joch, &db, 4096, &[])?;
            let addr = process.addr;
            processes.push(process);
            addr
        } else {
            start_joch(Arc::new(joch_store::SqliteStore::open(db)?), None).await?
        };
        let tool = format!("tool-{}", scenario.replace('_', "-"));
        create_tool(client, joch, &tool, level, backend, webhook_url).await?;
        if args.with_policy {
            create_policy(client, joch).await?;
        }
        let urls = vec![toolcalls_url(joch)];
        servers.push((scenario, Target::Joch { urls, tool }));
    }
    Ok((servers, processes))
}

fn fail_on_failures(results: &[Stats]) -> Result<()> {
    let failures: usize = results.iter().map(|s| s.failures).sum();
    if failures > 0 {
        for s in results.iter().filter(|s| s.failures > 0) {
            eprintln!(
                "{}: {} failed calls; first: {}",
                s.name,
                s.failures,
                s.first_failure.as_deref().unwrap_or("?")
            );
        }
        bail!("{failures} calls failed");
    }
    Ok(())
}

fn soak_settings(args: &Args) -> Result<soak::Soak> {
    let joch = match &args.soak_joch {
        Some(path) => path.clone(),
        None => std::env::current_exe()?.with_file_name("joch"),
    };
    Ok(soak::Soak {
        seconds: args.soak_seconds,
        baseline_seconds: args.soak_baseline_seconds,
        joch,
        open_files: args.soak_open_files,
        slow: args.soak_slow,
        concurrency: args.soak_concurrency.max(1),
        session_every: (args.soak_mcp_every_ms > 0)
            .then(|| std::time::Duration::from_millis(args.soak_mcp_every_ms)),
    })
}

/// The webhook: answers with the JSON it was sent.
async fn echo(Json(body): Json<Value>) -> Json<Value> {
    Json(body)
}

/// The bare forwarder: the body to the webhook, its answer back.
async fn forward(
    axum::extract::State((client, webhook)): axum::extract::State<(Client, String)>,
    Json(body): Json<Value>,
) -> Result<Json<Value>, axum::http::StatusCode> {
    let bad_gateway = |_| axum::http::StatusCode::BAD_GATEWAY;
    let answer = client
        .post(&webhook)
        .json(&body)
        .send()
        .await
        .map_err(bad_gateway)?;
    Ok(Json(answer.json().await.map_err(bad_gateway)?))
}

/// Serves `router` on an ephemeral loopback port for the life of the process.
/// Its backlog is joch's (`listen::BACKLOG`), so that the bench's servers
/// drop no more connections in a burst than `joch serve` would.
async fn serve(router: axum::Router) -> Result<SocketAddr> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let listener = socket.listen(4096)?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            eprintln!("server on {addr} stopped: {e}");
        }
    });
    Ok(addr)
}

fn toolcalls_url(joch: SocketAddr) -> String {
    format!("http://{joch}/v1/namespaces/{NAMESPACE}/toolcalls")
}

/// A joch server exactly as the binary wires it, on `store`: webhook and
/// no-op backends; `replica` names it among several sharing the store.
/// `--trust`: detectors, then a back-test over a fresh SQLite ledger.
async fn run_trust(args: &Args) -> Result<()> {
    trust::detectors()?;
    let dir = tempfile::tempdir().context("creating temp dir")?;
    let store: Arc<dyn Store> =
        Arc::new(joch_store::SqliteStore::open(dir.path().join("ledger.db"))?);
    let joch = joch_tools::start(
        Arc::clone(&store),
        joch_engine::EngineConfig::default(),
        joch_engine::Workers::default(),
    )
    .await?;
    trust::back_test(joch.engine(), &store, args.ledger_calls).await
}

async fn start_joch(store: Arc<dyn Store>, replica: Option<String>) -> Result<SocketAddr> {
    let config = joch_engine::EngineConfig {
        replica,
        ..joch_engine::EngineConfig::default()
    };
    let joch = joch_tools::start(store, config, joch_engine::Workers::default()).await?;
    let router = joch_server::router(
        joch.engine().clone(),
        joch_server::ServerConfig::default(),
        axum::Router::new(),
    );
    // The workers live as long as the process: the bench's servers do.
    std::mem::forget(joch);
    serve(router).await
}

/// One CEL policy no call matches: each call evaluates it and runs.
async fn create_policy(client: &Client, joch: SocketAddr) -> Result<()> {
    let policy = json!({
        "metadata": {"name": "bench-never"},
        "spec": {"version": "1", "rules": [
            {"when": {"expr": "has(input.never) && input.never == true"}, "action": {"deny": {"reason": "never"}}}
        ]},
    });
    let url = format!("http://{joch}/v1/namespaces/{NAMESPACE}/policies");
    let response = client.post(url).json(&policy).send().await?;
    let status = response.status();
    ensure!(
        status.as_u16() == 201,
        "creating the policy: HTTP {status}: {}",
        response.text().await?
    );
    Ok(())
}

async fn create_tool(
    client: &Client,
    joch: SocketAddr,
    name: &str,
    level: &str,
    backend: &str,
    webhook: &str,
) -> Result<()> {
    let backend = match backend {
        "noop" => json!({"type": "noop"}),
        _ => {
            json!({"type": "rest", "endpoint": {"method": "POST", "url": webhook, "timeoutMs": 5000}})
        }
    };
    let tool = json!({
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": name},
        "spec": {
            "description": "Echoes its input (benchmark)",
            "inputSchema": {"type": "object"},
            "sideEffects": {"level": level},
            "backend": backend,
        },
    });
    let url = format!("http://{joch}/v1/namespaces/{NAMESPACE}/tools");
    let response = client.post(url).json(&tool).send().await?;
    let status = response.status();
    ensure!(
        status.as_u16() == 201,
        "creating tool {name}: HTTP {status}: {}",
        response.text().await?
    );
    Ok(())
}
