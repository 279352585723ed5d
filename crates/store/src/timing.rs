//! Where one call's time goes, stage by stage: what joch did before the
//! tool ran (admission), what the tool took (backend), what joch did after
//! (settle), and, inside those, how long its writes waited for the writer
//! (queue), for their commit and sync (commit), and for the answer to come
//! back from the writer thread (handoff).
//!
//! A call is measured when it runs inside [`measured`]; the engine marks
//! the stages and the store adds its waits. Outside a measured call, every
//! function here does nothing. The server answers the figures as a
//! `Server-Timing` header, which the bench reads to attribute a tail.

use std::cell::RefCell;
use std::time::{Duration, Instant};

tokio::task_local! {
    static CLOCK: RefCell<Clock>;
}

/// The stages of a call, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// From the call's arrival to the tool's start (or, for a call that
    /// does not run, to its end).
    Admission,
    /// The tool's backend.
    Backend,
    /// From the tool's answer to the call's end.
    Settle,
}

/// One call's figures. `admission` and `settle` exclude the store's waits
/// in them, which are `queue` and `commit`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// joch's own work before the tool ran.
    pub admission: Duration,
    /// Writes waiting for the writer (SQLite: for a batch to begin).
    pub queue: Duration,
    /// Writes being committed (and synced, for a durable one).
    pub commit: Duration,
    /// Writes' answers coming back from the writer thread to the call.
    pub handoff: Duration,
    /// The tool.
    pub backend: Duration,
    /// joch's own work after the tool answered.
    pub settle: Duration,
}

impl Timings {
    /// The figures as a `Server-Timing` header value (W3C), in ms.
    pub fn server_timing(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        format!(
            "admission;dur={:.3}, queue;dur={:.3}, commit;dur={:.3}, handoff;dur={:.3}, backend;dur={:.3}, settle;dur={:.3}",
            ms(self.admission),
            ms(self.queue),
            ms(self.commit),
            ms(self.handoff),
            ms(self.backend),
            ms(self.settle)
        )
    }
}

struct Clock {
    stage: Stage,
    since: Instant,
    /// Gross time of each stage, store waits included.
    gross: [Duration; 3],
    /// Store waits in each stage.
    waits: [Duration; 3],
    queue: Duration,
    commit: Duration,
    handoff: Duration,
}

/// Runs `call`, measuring it; the figures come back with its output.
pub async fn measured<T>(call: impl Future<Output = T>) -> (T, Timings) {
    let clock = RefCell::new(Clock {
        stage: Stage::Admission,
        since: Instant::now(),
        gross: [Duration::ZERO; 3],
        waits: [Duration::ZERO; 3],
        queue: Duration::ZERO,
        commit: Duration::ZERO,
        handoff: Duration::ZERO,
    });
    CLOCK
        .scope(clock, async {
            let output = call.await;
            enter(Stage::Settle);
            let timings = CLOCK.with(|c| c.borrow().timings());
            (output, timings)
        })
        .await
}

/// The measured call enters `stage` now (stages only move forward).
pub fn enter(stage: Stage) {
    let _ = CLOCK.try_with(|clock| {
        let mut clock = clock.borrow_mut();
        let now = Instant::now();
        let (was, elapsed) = (clock.stage as usize, now - clock.since);
        clock.gross[was] += elapsed;
        clock.stage = stage;
        clock.since = now;
    });
}

/// A write of the measured call waited `queue` for the writer, `commit`
/// for its commit, and `handoff` for its answer to come back.
pub fn waited(queue: Duration, commit: Duration, handoff: Duration) {
    let _ = CLOCK.try_with(|clock| {
        let mut clock = clock.borrow_mut();
        let stage = clock.stage as usize;
        clock.waits[stage] += queue + commit + handoff;
        clock.queue += queue;
        clock.commit += commit;
        clock.handoff += handoff;
    });
}

impl Clock {
    fn timings(&self) -> Timings {
        let own = |stage: Stage| {
            let i = stage as usize;
            self.gross[i].saturating_sub(self.waits[i])
        };
        Timings {
            // Stages enter in order: a call that never ran has its
            // settlement in admission.
            admission: own(Stage::Admission),
            queue: self.queue,
            commit: self.commit,
            handoff: self.handoff,
            backend: own(Stage::Backend),
            settle: own(Stage::Settle),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stages_and_waits_add_up_and_nothing_is_measured_outside() {
        let nine = Duration::from_secs(9);
        waited(nine, nine, nine);
        let ((), timings) = measured(async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            // Longer than the stage itself: all of it was the store's.
            waited(
                Duration::from_secs(3),
                Duration::from_secs(4),
                Duration::ZERO,
            );
            enter(Stage::Backend);
            tokio::time::sleep(Duration::from_millis(30)).await;
            enter(Stage::Settle);
            tokio::time::sleep(Duration::from_millis(10)).await;
            waited(
                Duration::ZERO,
                Duration::from_millis(2),
                Duration::from_millis(1),
            );
        })
        .await;
        assert_eq!(timings.queue, Duration::from_secs(3));
        assert_eq!(timings.commit, Duration::from_millis(4002));
        assert_eq!(timings.handoff, Duration::from_millis(1));
        assert_eq!(timings.admission, Duration::ZERO);
        assert!(timings.backend >= Duration::from_millis(30), "{timings:?}");
        assert!(timings.settle >= Duration::from_millis(8), "{timings:?}");
        let header = timings.server_timing();
        assert!(
            header.starts_with(
                "admission;dur=0.000, queue;dur=3000.000, commit;dur=4002.000, handoff;dur=1.000, backend;dur="
            ),
            "{header}"
        );
    }
}
