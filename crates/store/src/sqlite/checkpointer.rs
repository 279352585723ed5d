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

use rusqlite::Connection;

use super::unavailable;
use crate::StoreError;

/// WAL frames (pages) past which a commit wakes the checkpointer.
const CHECKPOINT_PAST: i32 = 1_000;
/// WAL frames (pages) past which a checkpoint waits for the writer.
const RESTART_PAST: i64 = 16_384;

/// Starts the checkpointer of the database at `path`, and has `writer`'s
/// commits wake it. It stops when the writer's connection closes.
pub(super) fn spawn(path: &Path, writer: &mut Connection) -> Result<(), StoreError> {
    let conn = Connection::open(path).map_err(unavailable)?;
    conn.execute_batch("PRAGMA busy_timeout = 5000; PRAGMA cache_size = -256;")
        .map_err(unavailable)?;
    // One wake-up pending at most: commits meanwhile are covered by it.
    let (wake, woken) = mpsc::sync_channel(1);
    writer
        .wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, frames: i32| {
            if frames >= CHECKPOINT_PAST {
                let _ = wake.try_send(());
            }
            Ok(())
        }))
        .map_err(unavailable)?;
    std::thread::Builder::new()
        .name("joch-sqlite-checkpointer".to_owned())
        .spawn(move || run(&conn, &woken))
        .map_err(|e| StoreError::Unavailable(format!("cannot start the checkpointer: {e}")))?;
    Ok(())
}

fn run(conn: &Connection, woken: &mpsc::Receiver<()>) {
    while woken.recv().is_ok() {
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
