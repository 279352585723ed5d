//! The HTTP listener of `joch serve`: one task per HTTP/1 connection, so
//! that nothing a client does, or fails to do, holds joch's resources for
//! long (issue 24).
//!
//! - A connection must deliver a request's headers within the header-read
//!   timeout of its first byte (of connecting, for its first request).
//! - A keep-alive connection with no request in progress is closed after
//!   the idle timeout. A request in progress (an event follow, an MCP
//!   stream, a wait for approval) keeps it open: it is not idle.
//! - A request body must arrive at a minimum average rate after a grace of
//!   the header-read timeout; one that trickles is refused and its
//!   connection closed once the refusal is sent (`watchdog::Paced`).
//! - At most `max_connections` are open at once, fewer than the open-files
//!   limit; one more is answered 503 with `Retry-After` at once and closed.
//!
//! Every request carries its connection's peer address as axum's
//! `ConnectInfo<SocketAddr>`, as `into_make_service_with_connect_info`
//! would: the engine caps what anonymous clients may start by it.
//!
//! hyper's own header-read timeout is not used: it also runs while a
//! keep-alive connection waits for its next request, which would make the
//! idle timeout the header timeout.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use crate::watchdog::{Activity, InFlight, Paced, Timeouts, Tracked, Watched};

/// How the listener treats its connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// See [`Timeouts`].
    pub timeouts: Timeouts,
    /// Most connections open at once.
    pub max_connections: usize,
}

/// Connections the kernel queues before joch accepts them (capped by
/// `net.core.somaxconn`). tokio's default, 1,024, overflowed in the
/// bench's open loop: a burst of new connections while joch was busy had
/// their SYNs dropped, and each client waited out TCP's retransmission
/// backoff (1, 3, 7, 15, 31 s) before joch even saw it.
pub const BACKLOG: u32 = 4096;

/// A listener on `addr` with joch's backlog, reusing a port in TIME_WAIT
/// as `TcpListener::bind` does.
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// How long connections still open at shutdown may take to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a refused connection is kept to read what its client sent, so
/// that closing it does not reset the 503 away.
const LINGER: Duration = Duration::from_millis(500);
/// Refused connections lingering at once; beyond it they are closed at once.
const MAX_LINGERING: usize = 64;

/// What a connection beyond the cap gets, in the shape of every joch error.
const REFUSED_BODY: &str = r#"{"code":"too_many_connections","message":"joch has as many connections open as it allows; retry shortly","details":{}}"#;

fn refusal() -> Vec<u8> {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{REFUSED_BODY}",
        REFUSED_BODY.len()
    )
    .into_bytes()
}

/// Raises the soft open-files limit to the hard one and returns the limit
/// joch runs with (`None` where the platform has no such limit).
pub fn raise_open_files_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => Some(limit),
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-files limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE)
                .ok()
                .map(|(soft, _)| soft)
        }
    }
}

/// The connection cap: what was asked, but never more than three quarters
/// of the open-files limit, leaving the rest to the store, backends and
/// refusals.
pub fn connection_cap(requested: usize, open_files: Option<u64>) -> usize {
    let room = open_files.map_or(usize::MAX, |n| {
        usize::try_from(n / 4 * 3).unwrap_or(usize::MAX)
    });
    requested.min(room).max(1)
}

/// Serves `app` on `listener` until `shutdown` completes, then gives open
/// connections [`SHUTDOWN_GRACE`] to finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let lingering = Arc::new(Semaphore::new(MAX_LINGERING));
    let (stop, stopping) = watch::channel(false);
    let app = TowerToHyperService::new(app);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, most likely: the pending
                    // connection waits in the backlog until one is freed.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            metrics::counter!("joch_connections_refused_total").increment(1);
            refuse(stream, &lingering);
            continue;
        };
        // Answers are small and written whole: don't hold them back.
        let _ = stream.set_nodelay(true);
        let (app, stopping, timeouts) = (app.clone(), stopping.clone(), limits.timeouts);
        tokio::spawn(async move {
            connection(stream, peer, app, timeouts, stopping).await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = stop.send(true);
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(SHUTDOWN_GRACE, permits.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!("closing connections still open after the shutdown grace");
    }
    Ok(())
}

/// Answers a connection beyond the cap with a 503, then closes it.
fn refuse(stream: TcpStream, lingering: &Arc<Semaphore>) {
    let Ok(permit) = lingering.clone().try_acquire_owned() else {
        // No room to wait: what the client already sent is read now, so
        // that closing does not reset the 503 away (only bytes still in
        // flight can).
        let _ = stream.try_write(&refusal());
        let mut sink = [0u8; 4096];
        for _ in 0..4 {
            if !matches!(stream.try_read(&mut sink), Ok(n) if n > 0) {
                break;
            }
        }
        return;
    };
    tokio::spawn(async move {
        let _ = tokio::time::timeout(LINGER, write_refusal(stream)).await;
        drop(permit);
    });
}

async fn write_refusal(mut stream: TcpStream) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(&refusal()).await?;
    stream.shutdown().await?;
    let mut sink = [0u8; 1024];
    while stream.read(&mut sink).await? > 0 {}
    Ok(())
}

type App = TowerToHyperService<Router>;

/// Serves one connection until it ends, its watchdog cuts it, or joch
/// stops (then it finishes the request in progress).
async fn connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    app: App,
    timeouts: Timeouts,
    mut stopping: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched::new(stream, activity.clone()));
    let tracked = activity.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        let guard = InFlight::begin(&tracked);
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        let request = request.map(|body| Paced::new(body, tracked.clone(), timeouts));
        let answer = hyper::service::Service::call(&app, request);
        async move {
            let response = answer.await?;
            Ok::<_, Infallible>(response.map(|body| Tracked::new(body, guard)))
        }
    });
    metrics::counter!("joch_connections_accepted_total").increment(1);
    metrics::gauge!("joch_connections_open").increment(1.0);
    let conn = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let expired = activity.expired(timeouts);
    tokio::pin!(expired);
    let mut stopped = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            reason = &mut expired => {
                metrics::counter!("joch_connections_cut_total", "reason" => reason).increment(1);
                tracing::debug!(reason, "closing a connection");
                break;
            }
            _ = stopping.changed(), if !stopped => {
                stopped = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
    metrics::gauge!("joch_connections_open").decrement(1.0);
}

/// Starts serving: raises the open-files limit, sizes the cap under it,
/// and logs both.
pub async fn run(
    listener: TcpListener,
    app: Router,
    timeouts: Timeouts,
    max_connections: usize,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let open_files = raise_open_files_limit();
    let limits = Limits {
        timeouts,
        max_connections: connection_cap(max_connections, open_files),
    };
    tracing::info!(
        open_files = open_files.map_or_else(|| "unlimited".to_owned(), |n| n.to_string()),
        max_connections = limits.max_connections,
        header_read_timeout_ms = timeouts.header_read.as_millis() as u64,
        idle_timeout_seconds = timeouts.idle.as_secs(),
        body_min_bytes_per_second = timeouts.body_min_rate,
        "serving connections"
    );
    serve(listener, app, limits, shutdown)
        .await
        .context("server failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_stays_under_the_open_files_limit() {
        for (requested, limit, cap) in [
            (10_000, Some(1024), 768),
            (500, Some(1024), 500),
            (10_000, Some(1_048_576), 10_000),
            (10_000, None, 10_000),
            (10_000, Some(1), 1),
        ] {
            assert_eq!(
                connection_cap(requested, limit),
                cap,
                "{requested} {limit:?}"
            );
        }
    }

    #[test]
    fn the_refusal_is_a_whole_json_error() {
        let text = String::from_utf8(refusal()).expect("ascii");
        let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains("retry-after: 1"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let error: serde_json::Value = serde_json::from_str(body).expect("json");
        assert_eq!(error["code"], "too_many_connections");
    }
}
