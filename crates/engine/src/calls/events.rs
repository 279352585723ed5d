//! An execution's timeline as a caller reads it, from the events part
//! (`events.rs`): the events it may see, and a wait for more.

use std::time::Duration;

use joch_core::Principal;

use crate::{Calls, EngineError, Event};

impl Calls {
    /// The execution's events numbered above `after`, oldest first.
    /// Events about a call of a tool `by` cannot see are left out, as if
    /// the call did not exist (their numbers skip).
    pub async fn events(
        &self,
        by: &Principal,
        namespace: &str,
        execution: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, EngineError> {
        self.inner
            .events
            .read(by, namespace, execution, after, limit)
            .await
    }

    /// Waits until new events may be available: at once when this process
    /// appends one, or after `poll` (for events written by another process).
    pub async fn wait_for_events(
        &self,
        seen: &mut tokio::sync::watch::Receiver<u64>,
        poll: Duration,
    ) {
        let _ = tokio::time::timeout(poll, seen.changed()).await;
    }

    /// A receiver to pass to [`Calls::wait_for_events`](crate::Calls::wait_for_events).
    pub fn event_notifications(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.events.subscribe()
    }
}
