//! Work that finishes even when the caller who started it leaves.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::EngineError;

/// `work`, polled in the caller's own task; dropped before it ends (the
/// caller's connection closed, its future dropped), it goes on in a task
/// of its own. So a call between its record and its settlement is never
/// left halfway, and one that nobody leaves costs no task hop: a spawned
/// task is woken on whichever worker is free, a thread wake-up for every
/// call. A panic in `work` is the caller's `TaskFailed`, as a failed
/// task's would be.
pub(crate) struct Finishing<F: Future<Output: Send + 'static> + Send + 'static> {
    what: &'static str,
    work: Option<Pin<Box<F>>>,
}

impl<F: Future<Output: Send + 'static> + Send + 'static> Finishing<F> {
    pub(crate) fn new(what: &'static str, work: F) -> Self {
        Self {
            what,
            work: Some(Box::pin(work)),
        }
    }
}

impl<T, F> Future for Finishing<F>
where
    T: Send + 'static,
    F: Future<Output = Result<T, EngineError>> + Send + 'static,
{
    type Output = Result<T, EngineError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Pending;
        };
        let polled = catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(cx)));
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(done)) => {
                self.work = None;
                Poll::Ready(done)
            }
            Err(panic) => {
                self.work = None;
                let reason = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "it panicked".to_owned());
                Poll::Ready(Err(EngineError::TaskFailed {
                    what: self.what,
                    reason,
                }))
            }
        }
    }
}

impl<F: Future<Output: Send + 'static> + Send + 'static> Drop for Finishing<F> {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else { return };
        // Only a runtime shutting down drops work outside of one, and then
        // nothing would run the task either.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(Detached(work));
        }
    }
}

/// Unfinished work in a task of its own, its output dropped.
struct Detached<F>(Pin<Box<F>>);

impl<F: Future> Future for Detached<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::*;

    /// Work whose caller left after its first step still takes its last.
    #[tokio::test]
    async fn work_dropped_halfway_finishes_in_a_task_of_its_own() {
        let (step, stepped) = oneshot::channel::<()>();
        let (go, gone) = oneshot::channel::<()>();
        let (done, finished) = oneshot::channel::<&str>();
        let work = Finishing::new("work", async move {
            step.send(()).expect("step");
            gone.await.expect("go");
            done.send("finished").expect("done");
            Ok::<_, EngineError>(())
        });
        let caller = tokio::spawn(work);
        stepped.await.expect("the work began in the caller's task");
        caller.abort();
        assert!(caller.await.expect_err("aborted").is_cancelled());
        go.send(()).expect("the work is still held");
        let finished = tokio::time::timeout(Duration::from_secs(5), finished).await;
        assert_eq!(finished.expect("in time").expect("sent"), "finished");
    }

    #[tokio::test]
    async fn a_panic_is_the_callers_task_failure() {
        let work = Finishing::new("the work", async {
            if true {
                panic!("it broke");
            }
            Ok::<(), EngineError>(())
        });
        match work.await {
            Err(EngineError::TaskFailed { what, reason }) => {
                assert_eq!((what, reason.as_str()), ("the work", "it broke"));
            }
            other => panic!("expected TaskFailed, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn finished_work_answers_its_caller() {
        let work = Finishing::new("work", async { Ok::<_, EngineError>(7) });
        assert_eq!(work.await.expect("ok"), 7);
    }
}
