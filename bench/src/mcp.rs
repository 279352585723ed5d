//! MCP against REST (issue 19, item 7): the same tools called through
//! joch's REST API and through its MCP front (an rmcp client over
//! streamable HTTP, one session per caller), on a real `joch serve`
//! process, so that the CPU joch spends per call can be read from
//! `/proc/<pid>/stat` apart from the client's and the webhook's.
//!
//! Per tool (the built-in no-op, and a read-only webhook), it prints each
//! surface's p50 at one caller, its calls/s at `--mcp-concurrency`, joch's
//! CPU per call, and MCP's ratio to REST: CPU per call (target ≤ 1.3×)
//! and added p50 at one caller (target ≤ 0.2 ms). MCP is measured twice:
//! with a session (protocol 2025-11-25: `initialize`, `Mcp-Session-Id`),
//! whose calls share an execution's timeline, and stateless (protocol
//! 2026-07-28: `server/discover`, each request on its own). So REST is
//! measured twice too: plain, the same work as stateless MCP, and with an
//! `executionRef` per caller, the same work as a session's calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use reqwest::Client;
use rmcp::model::CallToolRequestParams;
use rmcp::model::ProtocolVersion;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, ServiceExt};
use serde_json::{Value, json};

use crate::soak::process::Joch;
use crate::{NAMESPACE, latencies, percentile_ms};

/// What the MCP comparison is told.
pub(crate) struct Settings {
    pub joch: std::path::PathBuf,
    /// Measured calls per surface at one caller.
    pub single_calls: usize,
    /// Measured calls per surface at `concurrency`.
    pub calls: usize,
    pub concurrency: usize,
}

/// One surface's figures for one tool.
struct Figures {
    p50_ms: f64,
    p99_ms: f64,
    /// joch's CPU per call at one caller, in ms.
    cpu_ms: f64,
    /// joch's context switches per call at one caller (of threads that
    /// exited meanwhile, uncounted).
    switches: f64,
    /// Connections joch accepted per call at one caller: near zero for a
    /// client that keeps its connections alive.
    connections: f64,
    calls_per_s: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum Surface {
    Rest,
    /// REST, each caller's calls in an execution of its own.
    RestInExecution,
    /// MCP with a session (protocol before 2026-07-28).
    Mcp,
    /// MCP 2026-07-28: no session, every request stands alone.
    McpStateless,
}

type McpClient = RunningService<RoleClient, ()>;

/// Runs the comparison and prints its table and `RESULT` lines.
pub(crate) async fn compare(settings: &Settings, webhook: &str) -> Result<()> {
    let dir = tempfile::tempdir().context("creating temp dir")?;
    let joch = Joch::start(&settings.joch, dir.path(), 4096)?;
    let client = Client::builder().no_proxy().build()?;
    crate::create_tool(&client, joch.addr, "mcp-noop", "read_only", "noop", webhook).await?;
    crate::create_tool(&client, joch.addr, "mcp-echo", "read_only", "rest", webhook).await?;
    println!(
        "\nMCP against REST on one `joch serve` process: {} calls at one caller, {} at {}",
        settings.single_calls, settings.calls, settings.concurrency
    );
    println!(
        "tool       surface        p50 ms   p99 ms  cpu ms/call  switches/call  conns/call  calls/s"
    );
    let mut lines = Vec::new();
    for tool in ["mcp-noop", "mcp-echo"] {
        let rest = measure(settings, &joch, &client, tool, Surface::Rest).await?;
        let in_execution =
            measure(settings, &joch, &client, tool, Surface::RestInExecution).await?;
        let mcp = measure(settings, &joch, &client, tool, Surface::Mcp).await?;
        let stateless = measure(settings, &joch, &client, tool, Surface::McpStateless).await?;
        for (name, f) in [
            ("rest", &rest),
            ("rest_execution", &in_execution),
            ("mcp", &mcp),
            ("mcp_stateless", &stateless),
        ] {
            println!(
                "{tool:<10} {name:<14} {:>7.3} {:>8.3} {:>12.3} {:>14.1} {:>11.3} {:>8.0}",
                f.p50_ms, f.p99_ms, f.cpu_ms, f.switches, f.connections, f.calls_per_s
            );
        }
        for (scenario, against, base, mcp) in [
            ("mcp_vs_rest", "rest", &rest, &mcp),
            (
                "mcp_vs_rest_execution",
                "rest_execution",
                &in_execution,
                &mcp,
            ),
            ("mcp_stateless_vs_rest", "rest", &rest, &stateless),
        ] {
            lines.push(format!(
                "RESULT scenario={scenario} tool={tool} {against}_p50_ms={:.3} mcp_p50_ms={:.3} \
                 added_p50_ms={:.3} {against}_cpu_ms={:.3} mcp_cpu_ms={:.3} cpu_ratio={:.2} \
                 {against}_calls_per_s={:.0} mcp_calls_per_s={:.0} throughput_ratio={:.2}",
                base.p50_ms,
                mcp.p50_ms,
                mcp.p50_ms - base.p50_ms,
                base.cpu_ms,
                mcp.cpu_ms,
                mcp.cpu_ms / base.cpu_ms,
                base.calls_per_s,
                mcp.calls_per_s,
                mcp.calls_per_s / base.calls_per_s,
            ));
        }
    }
    println!("\n{}", lines.join("\n"));
    Ok(())
}

async fn measure(
    settings: &Settings,
    joch: &Joch,
    client: &Client,
    tool: &str,
    surface: Surface,
) -> Result<Figures> {
    let caller = Caller::open(client, joch, tool, surface).await?;
    // Warm up: connections, caches, the session's worker.
    for i in 0..200 {
        caller.call(i).await?;
    }
    let cpu_before = joch.cpu_ms().context("joch's CPU time")?;
    let switches_before = joch.context_switches().unwrap_or(0);
    let accepted_before = accepted(client, joch).await?;
    let mut single = latencies()?;
    for i in 0..settings.single_calls {
        let started = Instant::now();
        caller.call(i).await?;
        single.saturating_record(started.elapsed().as_nanos() as u64);
    }
    let cpu = joch.cpu_ms().context("joch's CPU time")? - cpu_before;
    // The scrape's own connection is the bench's one client's, kept alive.
    let connections = accepted(client, joch).await? - accepted_before;
    let switches = joch
        .context_switches()
        .unwrap_or(0)
        .saturating_sub(switches_before);
    caller.close().await;
    let calls_per_s = concurrent(settings, joch, client, tool, surface).await?;
    Ok(Figures {
        p50_ms: percentile_ms(&single, 0.5),
        p99_ms: percentile_ms(&single, 0.99),
        cpu_ms: cpu / settings.single_calls as f64,
        switches: switches as f64 / settings.single_calls as f64,
        connections: connections / settings.single_calls as f64,
        calls_per_s,
    })
}

/// The connections joch has accepted, from its `/metrics`.
async fn accepted(client: &Client, joch: &Joch) -> Result<f64> {
    let text = client
        .get(format!("http://{}/metrics", joch.addr))
        .send()
        .await?
        .text()
        .await?;
    text.lines()
        .find_map(|line| line.strip_prefix("joch_connections_accepted_total "))
        .and_then(|value| value.trim().parse().ok())
        .context("joch_connections_accepted_total in /metrics")
}

/// Calls/s with `concurrency` callers, each with its own MCP session.
async fn concurrent(
    settings: &Settings,
    joch: &Joch,
    client: &Client,
    tool: &str,
    surface: Surface,
) -> Result<f64> {
    let mut callers = Vec::new();
    for _ in 0..settings.concurrency {
        callers.push(Arc::new(Caller::open(client, joch, tool, surface).await?));
    }
    let next = Arc::new(AtomicUsize::new(0));
    let calls = settings.calls;
    let started = Instant::now();
    let workers: Vec<_> = callers
        .iter()
        .map(|caller| {
            let (caller, next) = (caller.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= calls {
                        return anyhow::Ok(());
                    }
                    caller.call(i).await?;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.context("caller panicked")??;
    }
    let rate = calls as f64 / started.elapsed().as_secs_f64();
    for caller in callers {
        if let Ok(caller) = Arc::try_unwrap(caller) {
            caller.close().await;
        }
    }
    Ok(rate)
}

/// One caller of one tool, over REST (in an execution, if named) or an
/// MCP session.
enum Caller {
    Rest {
        client: Client,
        url: String,
        tool: String,
        execution: Option<String>,
    },
    Mcp {
        session: McpClient,
        tool: String,
    },
}

/// Names each REST caller's execution apart.
static EXECUTIONS: AtomicUsize = AtomicUsize::new(0);

impl Caller {
    async fn open(client: &Client, joch: &Joch, tool: &str, surface: Surface) -> Result<Caller> {
        Ok(match surface {
            Surface::Rest | Surface::RestInExecution => Caller::Rest {
                client: client.clone(),
                url: format!("http://{}/v1/namespaces/{NAMESPACE}/toolcalls", joch.addr),
                tool: tool.to_owned(),
                execution: (surface == Surface::RestInExecution).then(|| {
                    let n = EXECUTIONS.fetch_add(1, Ordering::Relaxed);
                    format!("bench-run-{n}")
                }),
            },
            Surface::Mcp | Surface::McpStateless => {
                let url = format!("http://{}/v1/namespaces/{NAMESPACE}/mcp", joch.addr);
                // rmcp's default client opens a connection per request
                // (`pool_max_idle_per_host(0)`); REST's keeps them alive,
                // and so does this one.
                let config = StreamableHttpClientTransportConfig::with_uri(url);
                let transport = StreamableHttpClientTransport::with_client(client.clone(), config);
                let session = if surface == Surface::Mcp {
                    ().serve(transport).await.context("MCP initialize")?
                } else {
                    let discover = ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    };
                    ().serve_with_lifecycle(transport, discover)
                        .await
                        .context("MCP server/discover")?
                };
                Caller::Mcp {
                    session,
                    tool: tool.to_owned(),
                }
            }
        })
    }

    async fn call(&self, i: usize) -> Result<()> {
        let input = json!({"n": i, "text": "hello"});
        match self {
            Caller::Rest {
                client,
                url,
                tool,
                execution,
            } => {
                let mut call = json!({"spec": {"toolRef": {"name": tool}, "input": input}});
                if let Some(execution) = execution {
                    call["spec"]["executionRef"] = json!({"name": execution});
                }
                let response = client.post(url).json(&call).send().await?;
                let status = response.status();
                let body: Value = response.json().await?;
                let phase = body.pointer("/status/phase").and_then(Value::as_str);
                ensure!(
                    status.as_u16() == 201 && phase == Some("Succeeded"),
                    "HTTP {status}, phase {phase:?}: {body}"
                );
            }
            Caller::Mcp { session, tool } => {
                let Value::Object(arguments) = input else {
                    unreachable!("an object")
                };
                let result = session
                    .call_tool(CallToolRequestParams::new(tool.clone()).with_arguments(arguments))
                    .await?;
                ensure!(result.is_error != Some(true), "tool error: {result:?}");
            }
        }
        Ok(())
    }

    async fn close(self) {
        if let Caller::Mcp { session, .. } = self {
            let _ = session.cancel().await;
        }
    }
}
