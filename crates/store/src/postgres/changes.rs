//! Change notifications between replicas, on the `joch_changes` channel.
//!
//! **Sending.** A store hands its own writes to its own subscribers at
//! once, and announces them to the other replicas once they have committed
//! ([`Notifier::changed`]): one task takes every change waiting and sends
//! them all in one transaction of its own, at most every [`INTERVAL`]
//! (under load [`BUSY_INTERVAL`]).
//! Announcing inside the writing transaction (triggers, before migration
//! 0011) made every write of every replica commit and flush in turn:
//! PostgreSQL holds one lock for the whole cluster from the commit of a
//! transaction that notified until that commit is flushed. The notifying
//! transaction writes nothing worth keeping, so it commits without waiting
//! for its flush (`synchronous_commit = off`, on its own connection): the
//! lock is held for moments, once per batch of changes.
//!
//! A notification is a hint, never the data: a change can go unheard (a
//! replica dies between its commit and its notification; the listener's
//! connection drops). Whoever waits on one re-reads the store on a timer
//! as well, and every gap is covered by a `*` (anything may have changed):
//! a store announces `*` when it starts (what its process wrote before a
//! crash may be unheard), the listener passes one on after reconnecting,
//! and the engine wakes everything when it finds a replica's lease lapsed.
//!
//! **Hearing.** One connection per store `LISTEN`s and passes every other
//! store's notifications to the process's subscribers. A notification
//! carries many changes, one a line, after a line naming the store that
//! sent it, so that a batch of changes costs the server and each listening
//! replica a message or a few, not one per change, and a store skips its
//! own.

use std::time::Duration;

use sqlx_core::executor::Executor;
use sqlx_core::query::query;
use sqlx_postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use crate::Change;

const CHANNEL: &str = "joch_changes";

/// Changes a subscriber may fall behind by before it misses some.
const BACKLOG: usize = 4096;
/// Changes waiting to be announced before the next ones are folded into a `*`.
const PENDING: usize = 16_384;
/// Most changes in one notifying transaction.
const MAX_BATCH: usize = 1024;
/// Most bytes in one notification (PostgreSQL refuses 8,000 or more).
const MAX_PAYLOAD: usize = 7_900;
/// A payload that says anything may have changed.
const ANYTHING: &str = "*\t\t";
/// The shortest time between two notifying transactions of a store: the
/// most a change waits before other replicas hear of it, and what keeps a
/// store's notifications (each one a transaction, and a message to every
/// listening replica) from multiplying with its batches.
const INTERVAL: Duration = Duration::from_millis(10);
/// The interval once a store announces [`BUSY`] changes or more at a time:
/// a notifying transaction and its delivery to every listening replica
/// cost the server the same whatever they carry. With three replicas under
/// the bench's load they took 20–45 µs of its CPU an external write at
/// 10 ms, 6–9 at 50 ms (bench/RESULTS.md, 2026-11-29, 13:30–15:30 UTC).
const BUSY_INTERVAL: Duration = Duration::from_millis(50);
/// Distinct changes in one announcement from which a store is busy: it
/// turns busy from 1,600 changes a second (16 in 10 ms) and stays so down
/// to 320 (16 in 50 ms), so a load near the line does not flip it at every
/// announcement.
const BUSY: usize = 16;

/// Which store sent a notification: its first line, `@` and a number
/// drawn when the store started.
#[derive(Clone)]
pub(super) struct Origin(String);

impl Origin {
    pub(super) fn new() -> Self {
        use std::hash::{BuildHasher, Hasher};
        // Seeded at random by the standard library, with the time and the
        // process mixed in: two stores drawing the same is out of reach.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        Self(format!("@{:016x}", hasher.finish()))
    }
}

/// Starts listening for the notifications of stores other than `origin`;
/// the task runs until aborted, reconnecting as needed.
pub(super) fn spawn(pool: PgPool, origin: Origin) -> (broadcast::Sender<Change>, JoinHandle<()>) {
    let (sender, _) = broadcast::channel(BACKLOG);
    let task = tokio::spawn({
        let sender = sender.clone();
        async move {
            loop {
                if let Err(e) = listen(&pool, &origin, &sender).await {
                    tracing::warn!(error = %super::describe(&e), "lost PostgreSQL change notifications; reconnecting");
                }
                // Whatever was committed meanwhile went unheard.
                let _ = sender.send(Change::anything());
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
    (sender, task)
}

async fn listen(
    pool: &PgPool,
    origin: &Origin,
    sender: &broadcast::Sender<Change>,
) -> Result<(), sqlx_core::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    loop {
        match listener.try_recv().await? {
            Some(notification) => {
                for change in heard(notification.payload(), origin) {
                    let _ = sender.send(change);
                }
            }
            // The connection dropped and `try_recv` reconnects: what was
            // sent in between is lost.
            None => {
                let _ = sender.send(Change::anything());
            }
        }
    }
}

/// The sending side: this store's committed writes, to be handed to its
/// subscribers and announced to the other stores.
pub(super) struct Notifier {
    local: broadcast::Sender<Change>,
    pending: mpsc::Sender<String>,
    /// Set when a change could not be queued: the next batch says `*`.
    overflowed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Notifier {
    /// Starts the task that announces changes, as `origin`, through its own
    /// connection to the server `options` names; its first announcement is
    /// `*`. `local` is this store's subscribers.
    pub(super) fn spawn(
        options: PgConnectOptions,
        origin: Origin,
        local: broadcast::Sender<Change>,
    ) -> (Self, JoinHandle<()>) {
        let (pending, receiver) = mpsc::channel(PENDING);
        let overflowed = std::sync::Arc::default();
        // The pool connects lazily and reconnects after the server comes back.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .after_connect(|conn, _| {
                Box::pin(
                    async move { conn.execute("SET synchronous_commit = off").await.map(drop) },
                )
            })
            .connect_lazy_with(options);
        let overflow = std::sync::Arc::clone(&overflowed);
        let task = tokio::spawn(announce(pool, origin, receiver, overflow));
        (
            Self {
                local,
                pending,
                overflowed,
            },
            task,
        )
    }

    /// `kind` `namespace`/`name` was committed.
    pub(super) fn changed(&self, kind: &str, namespace: &str, name: &str) {
        let _ = self.local.send(Change {
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
        let payload = format!("{kind}\t{namespace}\t{name}");
        if self.pending.try_send(payload).is_err() {
            self.overflowed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

async fn announce(
    pool: PgPool,
    origin: Origin,
    mut receiver: mpsc::Receiver<String>,
    overflowed: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    // This process may have written before it last stopped, unheard.
    let mut batch = vec![ANYTHING.to_owned()];
    loop {
        if overflowed.swap(false, std::sync::atomic::Ordering::Relaxed) {
            batch = vec![ANYTHING.to_owned()];
        }
        batch.sort_unstable();
        batch.dedup();
        let next = tokio::time::Instant::now() + interval(batch.len());
        // Retried until it is sent: the changes are committed.
        while let Err(e) = notify(&pool, &origin, &batch).await {
            tracing::warn!(error = %super::describe(&e), "cannot announce changes; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        batch.clear();
        tokio::time::sleep_until(next).await;
        if receiver.recv_many(&mut batch, MAX_BATCH).await == 0 {
            return;
        }
    }
}

/// The time from an announcement of `changes` to the next.
fn interval(changes: usize) -> Duration {
    match changes >= BUSY {
        true => BUSY_INTERVAL,
        false => INTERVAL,
    }
}

/// One transaction, which PostgreSQL delivers when it commits.
async fn notify(
    pool: &PgPool,
    origin: &Origin,
    payloads: &[String],
) -> Result<(), sqlx_core::Error> {
    if payloads.is_empty() {
        return Ok(());
    }
    query("SELECT pg_notify($1, p) FROM UNNEST($2::TEXT[]) AS p")
        .bind(CHANNEL)
        .bind(packed(origin, payloads))
        .execute(pool)
        .await
        .map(drop)
}

/// `payloads` as few notifications as fit, one change a line after the
/// `origin` line: every notification costs the server and every listening
/// replica a message. A change whose names hold a line break cannot be
/// told apart, so it is announced as `*`.
fn packed(origin: &Origin, payloads: &[String]) -> Vec<String> {
    let mut packed: Vec<String> = Vec::new();
    for payload in payloads {
        let line = match payload.contains('\n') {
            true => ANYTHING,
            false => payload.as_str(),
        };
        match packed.last_mut() {
            Some(last) if last.len() + 1 + line.len() <= MAX_PAYLOAD => {
                last.push('\n');
                last.push_str(line);
            }
            _ => packed.push(format!("{}\n{line}", origin.0)),
        }
    }
    packed
}

/// The changes `payload` announces, unless `origin` sent it (that store
/// handed them to its subscribers itself). A payload without an origin
/// line, from a store before it had one, announces every line.
fn heard<'a>(payload: &'a str, origin: &Origin) -> impl Iterator<Item = Change> + 'a {
    let mut lines = payload.split('\n').peekable();
    let own = lines.peek() == Some(&origin.0.as_str());
    lines.filter(move |_| !own).filter_map(parse)
}

/// `kind \t namespace \t name`, as [`Notifier::changed`] writes it.
fn parse(payload: &str) -> Option<Change> {
    let mut parts = payload.splitn(3, '\t');
    Some(Change {
        kind: parts.next()?.to_owned(),
        namespace: parts.next()?.to_owned(),
        name: parts.next()?.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_split_on_tabs_only() {
        let change = parse("ToolCall\tns\tcall-1").unwrap();
        assert_eq!(
            (
                change.kind.as_str(),
                change.namespace.as_str(),
                change.name.as_str()
            ),
            ("ToolCall", "ns", "call-1")
        );
        assert_eq!(
            parse("Event\tns\texec with\ttab").unwrap().name,
            "exec with\ttab"
        );
        assert_eq!(parse("nonsense"), None);
        assert_eq!(parse(ANYTHING), Some(Change::anything()));
    }

    #[test]
    fn changes_are_packed_a_line_each_under_the_size_limit() {
        let origin = Origin::new();
        let payloads: Vec<String> = (0..300)
            .map(|i| format!("ToolCall\tns\t01938a3c-0000-7000-8000-{i:012}"))
            .collect();
        let notifications = packed(&origin, &payloads);
        let count = notifications.len();
        assert!(count > 1 && count < 10, "{count}");
        assert!(notifications.iter().all(|p| p.len() <= MAX_PAYLOAD));
        assert!(
            notifications
                .iter()
                .all(|p| p.starts_with(&format!("{}\n", origin.0)))
        );
        let other = Origin::new();
        let unpacked: Vec<String> = notifications
            .iter()
            .flat_map(|p| heard(p, &other))
            .map(|c| format!("{}\t{}\t{}", c.kind, c.namespace, c.name))
            .collect();
        assert_eq!(unpacked, payloads);
        // A name with a line break would read as two changes: it says `*`.
        let odd = packed(&origin, &["Event\tns\tline\nbreak".to_owned()]);
        assert_eq!(odd, [format!("{}\n{ANYTHING}", origin.0)]);
    }

    #[test]
    fn a_busy_store_announces_less_often() {
        assert_eq!(interval(1), INTERVAL);
        assert_eq!(interval(BUSY - 1), INTERVAL);
        assert_eq!(interval(BUSY), BUSY_INTERVAL);
        assert!(BUSY_INTERVAL > INTERVAL);
    }

    #[test]
    fn a_store_skips_its_own_notifications_and_hears_the_others() {
        let (mine, theirs) = (Origin::new(), Origin::new());
        assert_ne!(mine.0, theirs.0);
        let payloads = ["ToolCall\tns\tc".to_owned()];
        let sent = packed(&mine, &payloads);
        assert_eq!(heard(&sent[0], &mine).count(), 0);
        let change = heard(&sent[0], &theirs).collect::<Vec<_>>();
        assert_eq!(change.len(), 1);
        assert_eq!(change[0].name, "c");
        // A store from before origins announces every line.
        assert_eq!(heard("ToolCall\tns\tc\nToolCall\tns\td", &mine).count(), 2);
    }
}
