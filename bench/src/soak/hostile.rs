//! The soak's hostile clients: connections that send half a request line
//! and wait (reopened whenever joch cuts one), and MCP sessions opened and
//! never used or closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

const HALF_A_REQUEST: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n";

/// What the hostile clients did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Tally {
    /// Half-open connections made.
    pub(crate) opened: u64,
    /// Of those, how many joch cut (or refused) before the run ended.
    pub(crate) cut: u64,
    /// MCP sessions opened and abandoned.
    pub(crate) sessions: u64,
}

#[derive(Default)]
struct Counts {
    opened: AtomicU64,
    cut: AtomicU64,
    sessions: AtomicU64,
}

/// The running hostile clients.
pub(crate) struct Hostile {
    counts: Arc<Counts>,
    tasks: Vec<JoinHandle<()>>,
}

/// Starts `slow` half-open connections and, unless `session_every` is
/// `None`, the MCP abandoner, until `until`.
pub(crate) fn start(
    addr: SocketAddr,
    slow: usize,
    session_every: Option<Duration>,
    until: Instant,
) -> Hostile {
    let counts = Arc::new(Counts::default());
    let mut tasks: Vec<_> = (0..slow)
        .map(|_| tokio::spawn(slow_client(addr, counts.clone(), until)))
        .collect();
    if let Some(every) = session_every {
        let counts = counts.clone();
        tasks.push(tokio::spawn(abandon_sessions(addr, counts, every, until)));
    }
    Hostile { counts, tasks }
}

impl Hostile {
    /// Waits for every hostile client to stop and tallies them.
    pub(crate) async fn finish(self) -> Tally {
        for task in self.tasks {
            let _ = task.await;
        }
        Tally {
            opened: self.counts.opened.load(Ordering::Relaxed),
            cut: self.counts.cut.load(Ordering::Relaxed),
            sessions: self.counts.sessions.load(Ordering::Relaxed),
        }
    }
}

/// Keeps one half-sent request open, reopening it each time joch cuts it.
async fn slow_client(addr: SocketAddr, counts: Arc<Counts>, until: Instant) {
    while Instant::now() < until {
        let Ok(mut stream) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        counts.opened.fetch_add(1, Ordering::Relaxed);
        let _ = stream.write_all(HALF_A_REQUEST).await;
        let left = until.saturating_duration_since(Instant::now());
        let mut sink = [0u8; 1024];
        let closed = tokio::time::timeout(left, async {
            while let Ok(n) = stream.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        })
        .await;
        if closed.is_ok() {
            counts.cut.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Opens an MCP session every `every` and walks away from it.
async fn abandon_sessions(addr: SocketAddr, counts: Arc<Counts>, every: Duration, until: Instant) {
    let Ok(client) = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
    else {
        return;
    };
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "soak", "version": "0"},
        },
    });
    while Instant::now() < until {
        let opened = client
            .post(format!("http://{addr}/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
            .await;
        if let Ok(response) = opened {
            if response.headers().contains_key("mcp-session-id") {
                counts.sessions.fetch_add(1, Ordering::Relaxed);
            }
            let _ = response.bytes().await;
        }
        tokio::time::sleep(every).await;
    }
}
