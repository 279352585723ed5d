//! joch-bench: what does routing a tool call through joch cost?
//!
//! In one process it starts an echo webhook and, per joch scenario, a fresh
//! joch server (its own SQLite ledger in a temp dir) whose tool forwards to
//! that webhook. It then drives the same load at the webhook directly
//! (the baseline) and through joch, and prints throughput, p50 and p99
//! latency, and joch's cost relative to the baseline.
//!
//! Everything shares one machine and one tokio runtime, so the figures are an
//! upper bound on overhead (client, joch and webhook compete for the CPUs)
//! and say nothing about network latency, which would dilute it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use axum::Json;
use axum::routing::post;
use clap::Parser;
use joch_core::ToolBackend;
use joch_store::Store;
use serde_json::{Value, json};

const NAMESPACE: &str = "bench";

#[derive(Parser, Debug)]
#[command(about = "Compare calling a webhook directly with calling it through joch")]
struct Args {
    /// Measured calls per scenario.
    #[arg(long, default_value_t = 20_000)]
    calls: usize,
    /// Calls in flight at once (worker tasks sharing one HTTP client).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Unmeasured calls per scenario first, to open connections and warm caches.
    #[arg(long, default_value_t = 500)]
    warmup: usize,
}

/// Where a worker sends its calls, and how it tells success from failure.
#[derive(Clone)]
enum Target {
    /// The echo webhook itself: success is a 2xx with a JSON body.
    Direct(String),
    /// joch's toolcalls endpoint: success is a 201 whose call `Succeeded`.
    Joch { url: String, tool: String },
}

/// What one scenario measured.
struct Stats {
    name: String,
    calls: usize,
    failures: usize,
    first_failure: Option<String>,
    calls_per_s: f64,
    p50: Duration,
    p99: Duration,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.calls > 0 && args.concurrency > 0, "--calls and --concurrency must be positive");
    // reqwest is built with rustls but no default provider; without one it panics.
    joch_backends::install_crypto_provider();

    let webhook = serve(axum::Router::new().route("/echo", post(echo))).await?;
    let webhook_url = format!("http://{webhook}/echo");
    let dir = tempfile::tempdir().context("creating temp dir")?;
    // One client for the whole bench: keep-alive pool, no proxy (only 127.0.0.1 is contacted).
    let client = reqwest::Client::builder().no_proxy().build()?;

    println!(
        "joch-bench: {} calls/scenario, concurrency {}, warmup {}, {} CPUs, all in one process",
        args.calls,
        args.concurrency,
        args.warmup,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );

    let mut results = vec![measure(&client, &args, "direct", Target::Direct(webhook_url.clone())).await?];
    for level in ["read_only", "external_write"] {
        // A fresh server and ledger per scenario, so neither inherits the other's rows.
        let joch = start_joch(&dir.path().join(format!("{level}.db"))).await?;
        let tool = format!("echo-{}", level.replace('_', "-"));
        create_tool(&client, joch, &tool, level, &webhook_url).await?;
        let target = Target::Joch { url: format!("http://{joch}/v1/namespaces/{NAMESPACE}/toolcalls"), tool };
        results.push(measure(&client, &args, &format!("joch_{level}"), target).await?);
    }

    report(&results);
    let failures: usize = results.iter().map(|s| s.failures).sum();
    if failures > 0 {
        for s in results.iter().filter(|s| s.failures > 0) {
            eprintln!("{}: {} failed calls; first: {}", s.name, s.failures, s.first_failure.as_deref().unwrap_or("?"));
        }
        bail!("{failures} calls failed");
    }
    Ok(())
}

/// The webhook: answers with the JSON it was sent.
async fn echo(Json(body): Json<Value>) -> Json<Value> {
    Json(body)
}

/// Serves `router` on an ephemeral loopback port for the life of the process.
async fn serve(router: axum::Router) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            eprintln!("server on {addr} stopped: {e}");
        }
    });
    Ok(addr)
}

/// A joch server exactly as the binary wires it: SQLite store, webhook backend.
async fn start_joch(db: &Path) -> Result<SocketAddr> {
    let store: Arc<dyn Store> = Arc::new(joch_store::SqliteStore::open(db)?);
    let backend: Arc<dyn ToolBackend> = Arc::new(joch_backends::WebhookBackend::new(joch_backends::RestConfig::default())?);
    let engine = joch_engine::Engine::new(store, vec![backend], joch_engine::EngineConfig::default());
    serve(joch_server::router(engine, joch_server::ServerConfig::default())).await
}

async fn create_tool(client: &reqwest::Client, joch: SocketAddr, name: &str, level: &str, webhook: &str) -> Result<()> {
    let tool = json!({
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": name},
        "spec": {
            "description": "Echoes its input (benchmark)",
            "inputSchema": {"type": "object"},
            "sideEffects": {"level": level},
            "backend": {"type": "rest", "endpoint": {"method": "POST", "url": webhook, "timeoutMs": 5000}},
        },
    });
    let url = format!("http://{joch}/v1/namespaces/{NAMESPACE}/tools");
    let response = client.post(url).json(&tool).send().await?;
    let status = response.status();
    ensure!(status.as_u16() == 201, "creating tool {name}: HTTP {status}: {}", response.text().await?);
    Ok(())
}

/// Warm up, then run the measured calls.
async fn measure(client: &reqwest::Client, args: &Args, name: &str, target: Target) -> Result<Stats> {
    let (warm_failures, first) = run(client, args.warmup, args.concurrency, &target).await?.1;
    ensure!(warm_failures == 0, "{name}: {warm_failures} warmup calls failed; first: {}", first.unwrap_or_default());

    let started = Instant::now();
    let (mut latencies, (failures, first_failure)) = run(client, args.calls, args.concurrency, &target).await?;
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    Ok(Stats {
        name: name.to_owned(),
        calls: args.calls,
        failures,
        first_failure,
        calls_per_s: args.calls as f64 / elapsed.as_secs_f64(),
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
    })
}

type Outcome = (Vec<Duration>, (usize, Option<String>));

/// `calls` calls from `concurrency` workers that each take the next call index
/// until none are left; returns every call's latency, failed ones included.
async fn run(client: &reqwest::Client, calls: usize, concurrency: usize, target: &Target) -> Result<Outcome> {
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency.min(calls.max(1)))
        .map(|_| {
            let (client, target, next) = (client.clone(), target.clone(), next.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(calls / concurrency + 1);
                let (mut failures, mut first) = (0, None);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= calls {
                        break;
                    }
                    let started = Instant::now();
                    let outcome = one_call(&client, &target, i).await;
                    latencies.push(started.elapsed());
                    if let Err(e) = outcome {
                        failures += 1;
                        first.get_or_insert(format!("{e:#}"));
                    }
                }
                (latencies, failures, first)
            })
        })
        .collect();

    let (mut all, mut failures, mut first) = (Vec::with_capacity(calls), 0, None);
    for worker in workers {
        let (latencies, f, e) = worker.await.context("worker panicked")?;
        all.extend(latencies);
        failures += f;
        first = first.or(e);
    }
    Ok((all, (failures, first)))
}

/// One call, including reading and parsing the whole answer.
async fn one_call(client: &reqwest::Client, target: &Target, i: usize) -> Result<()> {
    let input = json!({"n": i, "text": "hello"});
    match target {
        Target::Direct(url) => {
            let response = client.post(url).json(&input).send().await?.error_for_status()?;
            response.json::<Value>().await?;
        }
        Target::Joch { url, tool } => {
            let call = json!({"spec": {"toolRef": {"name": tool}, "input": input}});
            let response = client.post(url).json(&call).send().await?;
            let status = response.status();
            let body: Value = response.json().await?;
            let phase = body.pointer("/status/phase").and_then(Value::as_str);
            ensure!(status.as_u16() == 201 && phase == Some("Succeeded"), "HTTP {status}, phase {phase:?}: {body}");
        }
    }
    Ok(())
}

/// Nearest-rank percentile of sorted latencies.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A table for people, then one `RESULT` line per scenario for scripts. The
/// ratios compare each scenario with the first (the direct baseline).
fn report(results: &[Stats]) {
    let Some(base) = results.first() else { return };
    println!();
    println!(
        "{:<20} {:>10} {:>9} {:>9} {:>11} {:>9} {:>9} {:>9}",
        "scenario", "calls/s", "p50 ms", "p99 ms", "thru ratio", "p50 x", "p99 x", "failures"
    );
    for s in results {
        let (thru, p50x, p99x) = ratios(s, base);
        println!(
            "{:<20} {:>10.0} {:>9.3} {:>9.3} {:>11.3} {:>9.2} {:>9.2} {:>9}",
            s.name,
            s.calls_per_s,
            ms(s.p50),
            ms(s.p99),
            thru,
            p50x,
            p99x,
            s.failures
        );
    }
    println!();
    for s in results {
        let (thru, p50x, p99x) = ratios(s, base);
        println!(
            "RESULT scenario={} calls={} failures={} calls_per_s={:.1} p50_ms={:.3} p99_ms={:.3} \
             throughput_ratio={:.3} p50_ratio={:.2} p99_ratio={:.2} p50_overhead_ms={:.3} p99_overhead_ms={:.3}",
            s.name,
            s.calls,
            s.failures,
            s.calls_per_s,
            ms(s.p50),
            ms(s.p99),
            thru,
            p50x,
            p99x,
            ms(s.p50) - ms(base.p50),
            ms(s.p99) - ms(base.p99),
        );
    }
}

/// (throughput, p50, p99) of `s` relative to `base`.
fn ratios(s: &Stats, base: &Stats) -> (f64, f64, f64) {
    (s.calls_per_s / base.calls_per_s, ms(s.p50) / ms(base.p50), ms(s.p99) / ms(base.p99))
}
