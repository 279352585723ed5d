//! Hears the `joch_changes` notifications the database's triggers send on
//! every commit (migration 0005), for all replicas' writes, and passes them
//! on to this process.

use std::time::Duration;

use sqlx_postgres::{PgListener, PgPool};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::Change;

const CHANNEL: &str = "joch_changes";

/// Changes a subscriber may fall behind by before it misses some.
const BACKLOG: usize = 4096;

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
                if let Some(change) = parse(notification.payload()) {
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

/// `kind \t namespace \t name`, as the triggers write it.
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
    }
}
