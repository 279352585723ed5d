//! The soak (issue 24): minutes of mixed traffic on a real `joch serve`
//! process in which every name a client chooses is fresh (agents, caller
//! ids, executions, idempotency keys, hook-mode tools and sessions), with slow
//! clients and abandoned MCP sessions beside it. It samples the process's
//! RSS, open files and `/metrics` size, which must stay flat after the
//! first minute, and compares the normal clients' p99 with a run without
//! the hostile clients.

pub(crate) mod cpu_cap;
mod hostile;
pub(crate) mod process;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use reqwest::Client;
use serde_json::{Value, json};

use crate::{Latencies, NAMESPACE, latencies, percentile_ms};
use process::Joch;

/// What the soak is told.
pub(crate) struct Soak {
    /// How long the run with hostile clients lasts.
    pub seconds: u64,
    /// How long the run without them lasts (the p99 reference).
    pub baseline_seconds: u64,
    /// The `joch` binary to run.
    pub joch: PathBuf,
    /// The open-files limit joch runs under (`ulimit -n`).
    pub open_files: u64,
    /// Half-open connections kept open at all times.
    pub slow: usize,
    /// Normal callers in flight at once.
    pub concurrency: usize,
    /// How often an MCP session is opened and abandoned (`None`: never).
    pub session_every: Option<Duration>,
}

/// A sample of the process.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at_s: u64,
    rss_kib: u64,
    anon_kib: u64,
    mapped_kib: u64,
    open_files: u64,
    metric_lines: u64,
    metric_bytes: u64,
}

/// One run's figures.
struct Run {
    calls: usize,
    hook_calls: usize,
    failures: usize,
    first_failure: Option<String>,
    p99_ms: f64,
    samples: Vec<Sample>,
    hostile: hostile::Tally,
}

const TOOL: &str = "soak-echo";
const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// Runs the soak and prints its figures; fails if a figure is off.
pub(crate) async fn soak(soak: &Soak, webhook: &str) -> Result<()> {
    let dir = tempfile::tempdir().context("creating temp dir")?;
    println!(
        "soak: {} s without hostile clients, then {} s with {} slow connections and abandoned MCP sessions; \
         joch under a {}-file limit",
        soak.baseline_seconds, soak.seconds, soak.slow, soak.open_files
    );
    let baseline = run(soak, webhook, &dir.path().join("baseline"), false).await?;
    let loaded = run(soak, webhook, &dir.path().join("loaded"), true).await?;
    report(&baseline, &loaded, soak.seconds);
    for r in [&baseline, &loaded] {
        ensure!(
            r.failures == 0,
            "{} normal calls failed; first: {}",
            r.failures,
            r.first_failure.as_deref().unwrap_or("?")
        );
    }
    Ok(())
}

async fn run(soak: &Soak, webhook: &str, dir: &std::path::Path, hostile: bool) -> Result<Run> {
    std::fs::create_dir_all(dir)?;
    let joch = Joch::start(&soak.joch, dir, soak.open_files)?;
    let client = Client::builder().no_proxy().build()?;
    crate::create_tool(&client, joch.addr, TOOL, "read_only", "rest", webhook).await?;
    let seconds = if hostile {
        soak.seconds
    } else {
        soak.baseline_seconds
    };
    let until = Instant::now() + Duration::from_secs(seconds);
    let base = format!("http://{}", joch.addr);
    let next = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..soak.concurrency)
        .map(|_| tokio::spawn(call_loop(client.clone(), base.clone(), next.clone(), until)))
        .collect();
    let hooks: Vec<_> = (0..2)
        .map(|_| tokio::spawn(hook_loop(client.clone(), base.clone(), next.clone(), until)))
        .collect();
    let hostiles = hostile.then(|| hostile::start(joch.addr, soak.slow, soak.session_every, until));
    let samples = sample_loop(&joch, &client, &base, until).await;

    let mut all = Outcome::new()?;
    for caller in callers {
        all.merge(caller.await.context("caller panicked")??)?;
    }
    let mut hook_calls = 0;
    for hook in hooks {
        hook_calls += hook.await.context("hook caller panicked")??;
    }
    let tally = match hostiles {
        Some(h) => h.finish().await,
        None => hostile::Tally::default(),
    };
    Ok(Run {
        calls: usize::try_from(all.latencies.len()).unwrap_or(usize::MAX),
        hook_calls,
        failures: all.failures,
        first_failure: all.first_failure,
        p99_ms: percentile_ms(&all.latencies, 0.99),
        samples,
        hostile: tally,
    })
}

struct Outcome {
    latencies: Latencies,
    failures: usize,
    first_failure: Option<String>,
}

impl Outcome {
    fn new() -> Result<Self> {
        Ok(Self {
            latencies: latencies()?,
            failures: 0,
            first_failure: None,
        })
    }

    fn merge(&mut self, other: Outcome) -> Result<()> {
        self.latencies.add(&other.latencies)?;
        self.failures += other.failures;
        self.first_failure = self.first_failure.take().or(other.first_failure);
        Ok(())
    }
}

/// A normal caller: the registered tool, each call with a fresh agent,
/// caller id, execution and idempotency key.
async fn call_loop(
    client: Client,
    base: String,
    next: Arc<AtomicUsize>,
    until: Instant,
) -> Result<Outcome> {
    let mut mine = Outcome::new()?;
    let url = format!("{base}/v1/namespaces/{NAMESPACE}/toolcalls");
    while Instant::now() < until {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let call = json!({"spec": {
            "toolRef": {"name": TOOL},
            "input": {"n": i},
            "agentRef": {"name": format!("agent-{i}")},
            "callerId": format!("caller-{i}"),
            "executionRef": {"name": format!("run-{i}")},
            "sideEffects": {"idempotencyKey": format!("key-{i}")},
        }});
        let started = Instant::now();
        let result = one_call(&client, &url, &call).await;
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        mine.latencies.saturating_record(nanos);
        if let Err(e) = result {
            mine.failures += 1;
            mine.first_failure.get_or_insert(format!("{e:#}"));
        }
    }
    Ok(mine)
}

async fn one_call(client: &Client, url: &str, call: &Value) -> Result<()> {
    let response = client.post(url).json(call).send().await?;
    let status = response.status();
    let body: Value = response.json().await?;
    let phase = body.pointer("/status/phase").and_then(Value::as_str);
    ensure!(
        status.as_u16() == 201 && phase == Some("Succeeded"),
        "HTTP {status}, phase {phase:?}: {body}"
    );
    Ok(())
}

/// A Claude Code agent in hook mode: every call names a fresh tool, in a
/// fresh session, by a fresh agent; asked, then told.
async fn hook_loop(
    client: Client,
    base: String,
    next: Arc<AtomicUsize>,
    until: Instant,
) -> Result<usize> {
    let url = format!("{base}/v1/namespaces/{NAMESPACE}/hooks/claude");
    let mut calls = 0;
    while Instant::now() < until {
        let i = next.fetch_add(1, Ordering::Relaxed);
        for event in ["PreToolUse", "PostToolUse"] {
            let body = json!({
                "session_id": format!("session-{i}"),
                "hook_event_name": event,
                "tool_name": format!("hooked-tool-{i}"),
                "tool_input": {"n": i},
                "tool_response": {"ok": true},
                "tool_use_id": format!("hook-{i}"),
            });
            let response = client
                .post(&url)
                .header("joch-agent", format!("hook-agent-{i}"))
                .json(&body)
                .send()
                .await?;
            ensure!(
                response.status().is_success(),
                "hook call: HTTP {}",
                response.status()
            );
        }
        calls += 1;
    }
    Ok(calls)
}

/// Samples the process every [`SAMPLE_EVERY`] until `until`.
async fn sample_loop(joch: &Joch, client: &Client, base: &str, until: Instant) -> Vec<Sample> {
    let started = Instant::now();
    let mut samples = Vec::new();
    loop {
        let metrics = match client.get(format!("{base}/metrics")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let (anon_kib, mapped_kib) = joch.rss_parts_kib().unwrap_or_default();
        let sample = Sample {
            at_s: started.elapsed().as_secs(),
            rss_kib: joch.rss_kib().unwrap_or(0),
            anon_kib,
            mapped_kib,
            open_files: joch.open_files().unwrap_or(0),
            metric_lines: metrics.lines().count() as u64,
            metric_bytes: metrics.len() as u64,
        };
        println!(
            "soak sample t={}s rss_kib={} anon_kib={} mapped_kib={} open_files={} metric_lines={} metric_bytes={}",
            sample.at_s,
            sample.rss_kib,
            sample.anon_kib,
            sample.mapped_kib,
            sample.open_files,
            sample.metric_lines,
            sample.metric_bytes
        );
        samples.push(sample);
        // The last sample is taken while the traffic still runs.
        let left = until.saturating_duration_since(Instant::now() + Duration::from_secs(1));
        if left.is_zero() {
            return samples;
        }
        tokio::time::sleep(left.min(SAMPLE_EVERY)).await;
    }
}

/// The largest relative distance, in percent, of any sample after the
/// warm-up from the first one after it.
fn drift(samples: &[Sample], warm_s: u64, field: fn(&Sample) -> u64) -> (u64, f64) {
    let after: Vec<u64> = samples
        .iter()
        .filter(|s| s.at_s >= warm_s)
        .map(field)
        .collect();
    let Some(&reference) = after.first() else {
        return (0, 0.0);
    };
    let worst = after
        .iter()
        .map(|&v| (v as f64 - reference as f64).abs() / (reference.max(1) as f64) * 100.0)
        .fold(0.0, f64::max);
    (reference, worst)
}

/// A figure of a sample, by name.
type Field = (&'static str, fn(&Sample) -> u64);

fn report(baseline: &Run, loaded: &Run, seconds: u64) {
    // "After the first minute", or a sixth of a shorter run.
    let warm_s = 60.min(seconds / 6);
    let last = loaded.samples.last().copied();
    let fields: [Field; 6] = [
        ("rss_kib", |s| s.rss_kib),
        ("anon_kib", |s| s.anon_kib),
        ("mapped_kib", |s| s.mapped_kib),
        ("open_files", |s| s.open_files),
        ("metric_lines", |s| s.metric_lines),
        ("metric_bytes", |s| s.metric_bytes),
    ];
    let mut line = format!("RESULT scenario=soak seconds={seconds} warm_s={warm_s}");
    for (name, field) in fields {
        let (reference, worst) = drift(&loaded.samples, warm_s, field);
        let end = last.map_or(0, |s| field(&s));
        let before = baseline.samples.last().map_or(0, field);
        line.push_str(&format!(
            " {name}_baseline_end={before} {name}_at_warm={reference} {name}_end={end} \
             {name}_drift_pct={worst:.1}"
        ));
    }
    let ratio = loaded.p99_ms / baseline.p99_ms.max(f64::MIN_POSITIVE);
    line.push_str(&format!(
        " calls={} hook_calls={} baseline_calls={} baseline_p99_ms={:.3} p99_ms={:.3} p99_ratio={ratio:.2} \
         slow_connections={} slow_cut={} mcp_sessions={}",
        loaded.calls,
        loaded.hook_calls,
        baseline.calls,
        baseline.p99_ms,
        loaded.p99_ms,
        loaded.hostile.opened,
        loaded.hostile.cut,
        loaded.hostile.sessions,
    ));
    println!("{line}");
}
