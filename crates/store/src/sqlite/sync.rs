//! The store's syncs, off the writer's path.
//!
//! The writer commits every batch with `synchronous=NORMAL`: SQLite
//! appends the batch's frames to the WAL and returns without an fsync. A
//! batch with a synced write then hands its answers here, and they are sent
//! once an `fdatasync` of the WAL file that began after their commit has
//! returned. One sync covers every batch committed before it began, so
//! while it runs the writer commits the next batches instead of waiting,
//! and those share the next sync: the writer's work and the disk's overlap.
//!
//! When nothing else waits (a lone call), the writer syncs in place, which
//! spares its answer a second thread's wake-up.
//!
//! Durability is SQLite's `synchronous=FULL` in WAL mode, which syncs the
//! WAL at each commit and nothing else: a synced write is answered only
//! after the WAL holding it is on disk. A checkpoint syncs the WAL before
//! it copies it into the database, at any `synchronous` setting above
//! `OFF`. A sync that fails leaves the disk's state unknown (Linux may
//! drop the failed pages and report the next sync clean), so every synced
//! write after it fails too, until joch restarts and SQLite recovers the
//! WAL.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::oneshot;

use super::writer::Answer;
use crate::StoreError;

/// A synced write's answer, held until a sync covers its commit.
pub(super) struct Held {
    pub reply: oneshot::Sender<Answer>,
    pub answer: Answer,
    /// When its batch began: its `commit` time runs to the sync's end.
    pub began: Instant,
}

/// The answers waiting for a sync, shared by the writer and the sync thread.
pub(super) struct Syncs {
    state: Mutex<State>,
    wake: Condvar,
    /// Signalled when held answers are taken into a sync.
    room: Condvar,
    wal: Wal,
    /// Syncs done, for tests and metrics.
    done: AtomicU64,
}

#[derive(Default)]
struct State {
    held: Vec<Held>,
    /// A sync is running (on either thread): held answers wait for the next.
    busy: bool,
    /// The message of a sync that failed; every later one fails with it.
    failed: Option<String>,
    stopped: bool,
}

impl Syncs {
    /// Starts the sync thread for the database at `db` (in WAL mode).
    pub(super) fn start(db: &Path) -> Result<Arc<Self>, StoreError> {
        let syncs = Arc::new(Self {
            state: Mutex::default(),
            wake: Condvar::new(),
            room: Condvar::new(),
            wal: Wal::open(db)?,
            done: AtomicU64::new(0),
        });
        let thread = syncs.clone();
        std::thread::Builder::new()
            .name("joch-sqlite-sync".to_owned())
            .spawn(move || thread.run())
            .map_err(|e| {
                StoreError::Unavailable(format!("cannot start the store's sync thread: {e}"))
            })?;
        Ok(syncs)
    }

    /// Answers `held` once a sync that begins now has returned: in place
    /// when no sync runs and `alone` (nothing else waits for the writer),
    /// else on the sync thread.
    pub(super) fn answer(&self, held: Vec<Held>, alone: bool) {
        if held.is_empty() {
            return;
        }
        let mut state = self.lock();
        if alone && !state.busy && state.held.is_empty() && state.failed.is_none() {
            state.busy = true;
            drop(state);
            let synced = self.sync();
            let mut state = self.lock();
            state.busy = false;
            settle(&mut state, held, synced);
            if !state.held.is_empty() {
                self.wake.notify_one();
            }
            return;
        }
        state.held.extend(held);
        self.wake.notify_one();
    }

    /// Waits while a sync runs and a committed batch already waits for the
    /// next: the writer commits at most one batch beside a sync, so that
    /// the writes arriving meanwhile form one batch for the next sync
    /// rather than many small commits that each rewrite the same pages.
    pub(super) fn wait_for_room(&self) {
        let mut state = self.lock();
        while state.busy && !state.held.is_empty() {
            state = self.room.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Lets the sync thread end once it has answered what it holds.
    pub(super) fn stop(&self) {
        self.lock().stopped = true;
        self.wake.notify_one();
    }

    fn run(&self) {
        let mut state = self.lock();
        loop {
            while !state.stopped && (state.busy || state.held.is_empty()) {
                state = self.wake.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            if state.held.is_empty() {
                return;
            }
            let held = std::mem::take(&mut state.held);
            state.busy = true;
            drop(state);
            self.room.notify_one();
            let synced = self.sync();
            state = self.lock();
            state.busy = false;
            settle(&mut state, held, synced);
        }
    }

    /// Syncs the WAL, counting it.
    fn sync(&self) -> Result<(), String> {
        let began = Instant::now();
        let synced = self.wal.sync();
        metrics::histogram!("joch_store_sync_seconds").record(began.elapsed().as_secs_f64());
        self.done.fetch_add(1, Ordering::Relaxed);
        synced
    }

    /// How many syncs have run.
    pub(super) fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned lock's state is whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Sends held answers after a sync: as they were if it (and every sync
/// before it) succeeded, else as the failure.
fn settle(state: &mut State, held: Vec<Held>, synced: Result<(), String>) {
    if let Err(message) = synced {
        tracing::error!(error = %message, "the store's WAL could not be synced: synced writes fail until joch restarts");
        state.failed.get_or_insert(message);
    }
    for Held {
        reply,
        mut answer,
        began,
    } in held
    {
        answer.commit = began.elapsed();
        if let Some(message) = &state.failed {
            answer.result = Err(StoreError::Unavailable(format!(
                "the store's disk failed to sync ({message}): restart joch"
            )));
        }
        let _ = reply.send(answer);
    }
}

/// The WAL file, opened for its syncs. SQLite keeps it, the same file,
/// while any connection is open (a closing connection deletes it only when
/// it is the last), and the writer's stays open as long as the store.
struct Wal(File);

impl Wal {
    fn open(db: &Path) -> Result<Self, StoreError> {
        let mut path = db.as_os_str().to_owned();
        path.push("-wal");
        let path = PathBuf::from(path);
        File::open(&path).map(Self).map_err(|e| {
            StoreError::Unavailable(format!("cannot open the WAL {}: {e}", path.display()))
        })
    }

    fn sync(&self) -> Result<(), String> {
        // (A check that the path still names this file, by two stats per
        // sync, cost a lone write 25 us, an eighth of its time.)
        self.0.sync_data().map_err(|e| e.to_string())
    }
}
