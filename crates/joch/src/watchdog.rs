//! What a connection's watchdog knows: whether a request is in progress,
//! since when the connection has been idle, and since when a request's
//! head has been arriving. The socket ([`Watched`]) notes bytes read, the
//! service notes requests ([`InFlight`]), held until the response body is
//! sent or dropped ([`Tracked`]), so a streamed answer counts as in progress.
//! A request's body must keep pace ([`Paced`]): one that trickles in is
//! refused and its connection cut, however long it would take to finish.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use hyper::body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A connection's deadlines.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// From a request's first byte (from connecting, for the first request)
    /// to its last header; also the grace a body gets before its pace counts.
    pub header_read: Duration,
    /// Between requests on a keep-alive connection.
    pub idle: Duration,
    /// The slowest a request body may arrive on average, in bytes per
    /// second, after the grace: a body due by `grace + received / rate`.
    pub body_min_rate: u64,
}

const NONE: u64 = u64::MAX;

/// One connection's state, in milliseconds since it was accepted.
pub struct Activity {
    born: Instant,
    in_flight: AtomicUsize,
    /// When the last request ended (0: accepted, none yet).
    idle_since: AtomicU64,
    /// When the first byte after going idle came: a head is arriving.
    head_since: AtomicU64,
    served: AtomicBool,
    /// A request's body came too slowly: cut once its answer is sent.
    too_slow: AtomicBool,
    /// Told when a deadline moves earlier: a request ended, a head began.
    changed: Notify,
}

impl Activity {
    pub fn new() -> Self {
        Self {
            born: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(NONE),
            served: AtomicBool::new(false),
            too_slow: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    fn bytes_read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0 {
            let now = self.now();
            let began =
                self.head_since
                    .compare_exchange(NONE, now, Ordering::AcqRel, Ordering::Relaxed);
            if began.is_ok() {
                self.changed.notify_one();
            }
        }
    }

    /// When the connection is due to be cut and why, in ms since accepted;
    /// `None` while a request is in progress.
    fn deadline(&self, timeouts: Timeouts) -> Option<(u64, &'static str)> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        if self.too_slow.load(Ordering::Acquire) {
            return Some((0, "body_too_slow"));
        }
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(NONE / 2);
        let head = self.head_since.load(Ordering::Acquire);
        Some(if head != NONE {
            (
                head.saturating_add(ms(timeouts.header_read)),
                "header_timeout",
            )
        } else if self.served.load(Ordering::Acquire) {
            let since = self.idle_since.load(Ordering::Acquire);
            (since.saturating_add(ms(timeouts.idle)), "idle_timeout")
        } else {
            (ms(timeouts.header_read), "header_timeout")
        })
    }

    /// Completes when the connection should be cut, with the reason. It
    /// looks again whenever a deadline may have moved earlier.
    pub async fn expired(&self, timeouts: Timeouts) -> &'static str {
        let longest = timeouts.header_read.max(timeouts.idle);
        loop {
            let now = self.now();
            let wait = match self.deadline(timeouts) {
                Some((due, reason)) if due <= now => return reason,
                Some((due, _)) => Duration::from_millis(due - now).min(longest),
                None => longest,
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.changed.notified() => {}
            }
        }
    }
}

/// A request in progress, from its head until its response is sent.
pub struct InFlight(Arc<Activity>);

impl InFlight {
    pub fn begin(activity: &Arc<Activity>) -> Self {
        activity.served.store(true, Ordering::Release);
        activity.head_since.store(NONE, Ordering::Release);
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.idle_since.store(activity.now(), Ordering::Release);
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
        activity.changed.notify_one();
    }
}

/// A response body that keeps its request in progress until it is done.
pub struct Tracked {
    body: Body,
    _request: InFlight,
}

impl Tracked {
    pub fn new(body: Body, request: InFlight) -> Self {
        Self {
            body,
            _request: request,
        }
    }
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A request body that must arrive at [`Timeouts::body_min_rate`] on
/// average after a grace; one that falls behind ends in an error (the
/// handler answers it) and marks its connection to be cut.
pub struct Paced<B> {
    body: B,
    activity: Arc<Activity>,
    started: Instant,
    grace: Duration,
    rate: u64,
    received: u64,
    /// Set when the body first makes its reader wait: a body that is
    /// already there (most are) costs no timer.
    due: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<B> Paced<B> {
    pub fn new(body: B, activity: Arc<Activity>, timeouts: Timeouts) -> Self {
        let started = Instant::now();
        let grace = timeouts.header_read;
        Self {
            body,
            activity,
            started,
            grace,
            rate: timeouts.body_min_rate.max(1),
            received: 0,
            due: None,
        }
    }

    fn deadline(&self) -> Instant {
        let earned = Duration::from_secs_f64(self.received as f64 / self.rate as f64);
        self.started + self.grace + earned
    }
}

impl<B> hyper::body::Body for Paced<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.received += data.len() as u64;
                    let due = self.deadline();
                    if let Some(timer) = self.due.as_mut() {
                        timer.as_mut().reset(due);
                    }
                }
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(other) => return Poll::Ready(other.map(|r| r.map_err(Into::into))),
            Poll::Pending => {}
        }
        let due = self.deadline();
        let timer = self
            .due
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.activity.too_slow.store(true, Ordering::Release);
        self.activity.changed.notify_one();
        let message = format!(
            "the request body arrived slower than {} bytes/s; the connection is closed",
            self.rate
        );
        Poll::Ready(Some(Err(message.into())))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A client's socket that tells its [`Activity`] when bytes arrive.
pub struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl Watched {
    pub fn new(stream: TcpStream, activity: Arc<Activity>) -> Self {
        Self { stream, activity }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.bytes_read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timeouts = Timeouts {
        header_read: Duration::from_secs(5),
        idle: Duration::from_secs(60),
        body_min_rate: 1024,
    };

    #[test]
    fn deadlines_follow_the_connection_state() {
        let activity = Arc::new(Activity::new());
        assert_eq!(activity.deadline(T), Some((5_000, "header_timeout")));
        let request = InFlight::begin(&activity);
        assert_eq!(activity.deadline(T), None, "a request in progress");
        activity.bytes_read();
        assert_eq!(activity.deadline(T), None, "body bytes start no head");
        drop(request);
        let (due, reason) = activity.deadline(T).expect("idle");
        assert_eq!(reason, "idle_timeout");
        assert!(due >= 60_000);
        activity.bytes_read();
        let (due, reason) = activity.deadline(T).expect("a head arriving");
        assert_eq!(reason, "header_timeout");
        assert!((5_000..60_000).contains(&due));
    }

    #[tokio::test]
    async fn an_idle_connection_expires() {
        let short = Timeouts {
            header_read: Duration::from_millis(20),
            idle: Duration::from_millis(60),
            body_min_rate: 1024,
        };
        let activity = Arc::new(Activity::new());
        drop(InFlight::begin(&activity));
        let started = Instant::now();
        assert_eq!(activity.expired(short).await, "idle_timeout");
        assert!(started.elapsed() >= short.idle);
    }
}
