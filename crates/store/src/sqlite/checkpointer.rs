//! WAL checkpoints off the writer's path.
//!
//! SQLite checkpoints in the connection that commits, by default once the
//! WAL passes 1,000 pages: that commit then also copies the WAL into the
//! database file and syncs it, several milliseconds during which every
//! write queued behind it waits (the tail of a call's `commit` and `queue`
//! stages, bench/RESULTS.md). The writer does not checkpoint; this thread
//! does, on a connection of its own, `PASSIVE`: it copies what it can
//! without taking the write lock, so commits go on meanwhile.
//!
//! A WAL the passive checkpoints cannot keep up with (a reader holding an
//! old snapshot) is checkpointed with `RESTART` past [`RESTART_PAST`]
//! frames, which waits for the writer to finish its batch and holds the
//! next one back until it is done: a rare stall instead of a WAL that grows
//! without bound. Durability is the same either way: checkpoints move only
//! synced WAL frames, and SQLite recovers from a crash in any of them.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::Connection;

use super::unavailable;
use crate::StoreError;

/// How often the WAL is checkpointed.
const EVERY: Duration = Duration::from_millis(50);
/// WAL frames (pages) past which a checkpoint waits for the writer.
const RESTART_PAST: i64 = 16_384;

/// Keeps the checkpointer running; dropping it stops the thread.
pub(super) struct Checkpointer(#[allow(dead_code)] mpsc::Sender<()>);

pub(super) fn spawn(path: &Path) -> Result<Checkpointer, StoreError> {
    let conn = Connection::open(path).map_err(unavailable)?;
    conn.execute_batch("PRAGMA busy_timeout = 5000; PRAGMA cache_size = -256;")
        .map_err(unavailable)?;
    let (stop, stopped) = mpsc::channel();
    std::thread::Builder::new()
        .name("joch-sqlite-checkpointer".to_owned())
        .spawn(move || run(&conn, &stopped))
        .map_err(|e| StoreError::Unavailable(format!("cannot start the checkpointer: {e}")))?;
    Ok(Checkpointer(stop))
}

fn run(conn: &Connection, stopped: &mpsc::Receiver<()>) {
    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(EVERY) {
        match checkpoint(conn, "PASSIVE") {
            Ok(frames) if frames > RESTART_PAST => {
                if let Err(e) = checkpoint(conn, "RESTART") {
                    tracing::warn!(error = %e, frames, "the WAL could not be checkpointed");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "the WAL could not be checkpointed"),
        }
    }
}

/// Checkpoints in `mode`; returns the WAL's frames.
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<i64> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
        row.get::<_, i64>(1)
    })
}
