//! Change notifications between replicas, on the `joch_changes` channel.
//!
//! **Sending.** A store announces its own writes once they have committed
//! ([`Notifier::changed`]): one task takes every change waiting and sends
//! them all in one transaction of its own. Announcing inside the writing
//! transaction (triggers, before migration 0011) made every write of every
//! replica commit and flush in turn: PostgreSQL holds one lock for the
//! whole cluster from the commit of a transaction that notified until that
//! commit is flushed. The notifying transaction writes nothing worth
//! keeping, so it commits without waiting for its flush
//! (`synchronous_commit = off`, on its own connection): the lock is held
//! for moments, once per batch of changes.
//!
//! A notification is a hint, never the data: a change can go unheard (a
//! replica dies between its commit and its notification; the listener's
//! connection drops). Whoever waits on one re-reads the store on a timer
//! as well, and every gap is covered by a `*` (anything may have changed):
//! a store announces `*` when it starts (what its process wrote before a
//! crash may be unheard), the listener passes one on after reconnecting,
//! and the engine wakes everything when it finds a replica's lease lapsed.
//!
//! **Hearing.** One connection per store `LISTEN`s and passes every
//! notification, this store's own included, to the process's subscribers.
//! A notification carries many changes, one a line, so that a batch of
//! changes costs the server and each listening replica a message or a few,
//! not one per change.

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

/// Starts listening; the task runs until aborted, reconnecting as needed.
pub(super) fn spawn(pool: PgPool) -> (broadcast::Sender<Change>, JoinHandle<()>) {
    let (sender, _) = broadcast::channel(BACKLOG);
    let task = tokio::spawn({
        let sender = sender.clone();
        async move {
            loop {
                if let Err(e) = listen(&pool, &sender).await {
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

async fn listen(pool: &PgPool, sender: &broadcast::Sender<Change>) -> Result<(), sqlx_core::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    loop {
        match listener.try_recv().await? {
            Some(notification) => {
                for change in notification.payload().split('\n').filter_map(parse) {
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

/// The sending side: this store's committed writes, to be announced.
pub(super) struct Notifier {
    pending: mpsc::Sender<String>,
    /// Set when a change could not be queued: the next batch says `*`.
    overflowed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Notifier {
    /// Starts the task that announces changes through its own connection
    /// to the server `options` names; its first announcement is `*`.
    pub(super) fn spawn(options: PgConnectOptions) -> (Self, JoinHandle<()>) {
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
        let task = tokio::spawn(announce(pool, receiver, std::sync::Arc::clone(&overflowed)));
        (
            Self {
                pending,
                overflowed,
            },
            task,
        )
    }

    /// `kind` `namespace`/`name` was committed.
    pub(super) fn changed(&self, kind: &str, namespace: &str, name: &str) {
        let payload = format!("{kind}\t{namespace}\t{name}");
        if self.pending.try_send(payload).is_err() {
            self.overflowed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

async fn announce(
    pool: PgPool,
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
        // Retried until it is sent: the changes are committed.
        while let Err(e) = notify(&pool, &batch).await {
            tracing::warn!(error = %super::describe(&e), "cannot announce changes; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        batch.clear();
        if receiver.recv_many(&mut batch, MAX_BATCH).await == 0 {
            return;
        }
    }
}

/// One transaction, which PostgreSQL delivers when it commits.
async fn notify(pool: &PgPool, payloads: &[String]) -> Result<(), sqlx_core::Error> {
    if payloads.is_empty() {
        return Ok(());
    }
    query("SELECT pg_notify($1, p) FROM UNNEST($2::TEXT[]) AS p")
        .bind(CHANNEL)
        .bind(packed(payloads))
        .execute(pool)
        .await
        .map(drop)
}

/// `payloads` as few notifications as fit, one change a line: every
/// notification costs the server and every listening replica a message.
/// A change whose names hold a line break cannot be told apart, so it is
/// announced as `*`.
fn packed(payloads: &[String]) -> Vec<String> {
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
            _ => packed.push(line.to_owned()),
        }
    }
    packed
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
        let payloads: Vec<String> = (0..300)
            .map(|i| format!("ToolCall\tns\t01938a3c-0000-7000-8000-{i:012}"))
            .collect();
        let notifications = packed(&payloads);
        let count = notifications.len();
        assert!(count > 1 && count < 10, "{count}");
        assert!(notifications.iter().all(|p| p.len() <= MAX_PAYLOAD));
        let unpacked: Vec<&str> = notifications.iter().flat_map(|p| p.split('\n')).collect();
        assert_eq!(unpacked, payloads);
        // A name with a line break would read as two changes: it says `*`.
        let odd = packed(&["Event\tns\tline\nbreak".to_owned()]);
        assert_eq!(odd, [ANYTHING]);
    }
}
