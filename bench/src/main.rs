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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use axum::Json;
use axum::routing::post;
use clap::Parser;

use args::Args;
use hdrhistogram::Histogram;
use joch_store::Store;
use reqwest::Client;
use serde_json::{Value, json};

mod abandoned;
mod args;
mod at_rest;
mod breakdown;
mod floor;
mod mcp;
mod open_loop;
mod pg_alone;
mod postgres;
mod soak;
mod store_alone;
mod trust;

const NAMESPACE: &str = "bench";

/// Where a worker sends its calls, and how it tells success from failure.
#[derive(Clone)]
enum Target {
    /// The echo webhook itself: success is a 2xx with a JSON body.
    Direct(String),
    /// joch's toolcalls endpoint on each replica, taken in turn: success is
    /// a 201 whose call `Succeeded`.
    Joch { urls: Vec<String>, tool: String },
}

/// What one scenario measured.
struct Stats {
    name: String,
    calls: usize,
    failures: usize,
    first_failure: Option<String>,
    calls_per_s: f64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    commits_per_s: f64,
    syncs_per_s: f64,
    /// Resident memory when a tenth of the calls were done, and at the end.
    rss_tenth_kib: u64,
    rss_end_kib: u64,
}

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
    // The open loop on PostgreSQL too: one replica per scenario.
    let mut looped = servers.clone();
    if let (Some(server), false) = (&args.postgres, args.offered_rate.is_empty()) {
        let chosen: Vec<_> = SCENARIOS
            .iter()
            .filter(|s| chosen(&args, s.0))
            .copied()
            .collect();
        looped.extend(postgres::one_replica_each(&client, server, &chosen, &webhook_url).await?);
    }
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

/// Warm up, then run the measured calls.
async fn measure(
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
async fn one_call(client: &Client, target: &Target, i: usize) -> Result<Option<String>> {
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
fn report(results: &[Stats]) {
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
