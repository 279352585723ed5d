//! A signal: a counter bumped whenever something happened (a call settled,
//! an event was appended, an Approval opened or was decided), so that whoever
//! waits on it re-reads the store at once instead of polling.

use tokio::sync::watch;

pub(crate) struct Signal(watch::Sender<u64>);

impl Default for Signal {
    fn default() -> Self {
        Self(watch::channel(0).0)
    }
}

impl Signal {
    /// Wakes every receiver.
    pub(crate) fn bump(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that changes at each bump from now on.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
}
