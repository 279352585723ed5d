//! A fixed pool of read-only connections, used from tokio's blocking pool.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use crate::StoreError;

pub(super) struct Readers {
    conns: Arc<Vec<Mutex<Connection>>>,
    next: AtomicUsize,
}

impl Readers {
    pub(super) fn new(conns: Vec<Connection>) -> Self {
        Self {
            conns: Arc::new(conns.into_iter().map(Mutex::new).collect()),
            next: AtomicUsize::new(0),
        }
    }

    /// Runs `read` on a free connection (or waits for the next in turn).
    pub(super) async fn run<T, F>(&self, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let conns = Arc::clone(&self.conns);
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        tokio::task::spawn_blocking(move || {
            let n = conns.len();
            let free = (0..n).find_map(|i| conns[(start + i) % n].try_lock().ok());
            let conn = match free {
                Some(conn) => conn,
                // A panic while holding a connection leaves it usable: SQLite
                // state is not affected by a Rust panic.
                None => conns[start % n]
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            };
            read(&conn)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("read task failed: {e}")))?
    }
}
