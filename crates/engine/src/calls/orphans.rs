//! Calls left unfinished while this process lives on: a store write failed
//! mid-call (PostgreSQL restarted or became unreachable; a disk error), or
//! the write that recorded the call landed but its answer was lost, so
//! the call's record may stand `Pending` or `Running` with this replica's
//! name, and no one else will take it over (this replica's lease stays
//! renewed). Once the store answers again, such a call is reconciled by the
//! rules of a restart (`calls/recovery.rs`): a `Pending` call never reached its
//! tool and runs; a `Running` one is re-run only if repeating it is
//! harmless, and is otherwise `Unknown`. A caller retrying its key then
//! hears that outcome, and no side effect runs twice.
//!
//! At most [`MOST_WAITING`] calls wait here at once: during an outage every
//! call fails, and each would otherwise keep a task trying the store.
//! Past that bound a call is left to the next start's recovery, or to a
//! survivor once this replica's lease lapses.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use joch_core::{Phase, ToolCall};
use joch_store::StoreErrorKind;

use crate::calls::RecoveryReport;
use crate::{Calls, EngineError};

/// How often the store is tried again.
const RETRY: Duration = Duration::from_secs(1);
/// After this long without a store, the call is left to the next start's
/// recovery (or to a survivor, once this replica's lease lapses).
const GIVE_UP: Duration = Duration::from_secs(600);
/// Calls waiting at once for the store to come back.
const MOST_WAITING: usize = 1024;

/// How many calls wait for the store (see the module).
#[derive(Default)]
pub(in crate::calls) struct Waiting(Arc<AtomicUsize>);

/// A place among the waiting calls, given back when dropped.
struct Place(Arc<AtomicUsize>);

impl Waiting {
    /// A place, unless [`MOST_WAITING`] calls wait already.
    fn enter(&self) -> Option<Place> {
        let more = |n: usize| (n < MOST_WAITING).then_some(n + 1);
        let entered = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, more);
        entered.ok().map(|_| Place(Arc::clone(&self.0)))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Calls {
    /// `namespace/name`'s run failed on the store: reconcile it once the
    /// store is back, in a task of its own.
    pub(in crate::calls) fn reconcile_when_back(&self, namespace: String, name: String) {
        let Some(place) = self.inner.orphans.enter() else {
            tracing::warn!(call = %name, "too many calls wait for the store: this one is left to recovery");
            return;
        };
        let engine = self.clone();
        tokio::spawn(async move {
            let _place = place;
            let started = Instant::now();
            while started.elapsed() < GIVE_UP {
                tokio::time::sleep(RETRY).await;
                match engine.reconcile_orphan(&namespace, &name).await {
                    Err(EngineError::Store(_)) => {}
                    Err(e) => {
                        tracing::warn!(call = %name, error = %e, "cannot reconcile a call whose store write failed");
                        return;
                    }
                    Ok(()) => return,
                }
            }
        });
    }

    async fn reconcile_orphan(&self, namespace: &str, name: &str) -> Result<(), EngineError> {
        let call: ToolCall = match self.inner.store.get_object(namespace, name).await {
            Ok(call) => call,
            // Never written: a repeatable call written only once settled.
            Err(e) if e.kind() == StoreErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let unfinished = matches!(call.status.phase, Phase::Pending | Phase::Running);
        if !unfinished || call.status.replica != self.inner.settings.replica {
            return Ok(());
        }
        let mut report = RecoveryReport::default();
        self.reconcile(call, &mut report).await?;
        tracing::warn!(call = %name, ?report, "reconciled a call whose store write had failed");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// The waiting calls are bounded, and a place is given back when its
    /// reconciliation ends.
    #[test]
    fn at_most_so_many_calls_wait_for_the_store() {
        let waiting = super::Waiting::default();
        let places: Vec<_> = (0..super::MOST_WAITING)
            .map(|_| waiting.enter().expect("a place"))
            .collect();
        assert!(waiting.enter().is_none(), "one more than the bound");
        drop(places);
        assert!(waiting.enter().is_some(), "places are given back");
    }

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use joch_core::{Invocation, Phase, Principal, Tool, ToolBackend, ToolFailure};
    use joch_store::SqliteStore;
    use joch_store::testsuite::LostAnswers;
    use serde_json::{Value, json};

    use crate::calls::admission::tests::call;
    use crate::policies::StandardPolicyEngine;
    use crate::{Engine, EngineConfig, EngineError};

    /// Counts its runs.
    #[derive(Default)]
    struct Counted(AtomicUsize);

    #[async_trait::async_trait]
    impl ToolBackend for Counted {
        fn kind(&self) -> &'static str {
            "noop"
        }

        async fn invoke(&self, _: Invocation<'_>) -> Result<Value, ToolFailure> {
            Ok(json!({"run": self.0.fetch_add(1, Ordering::SeqCst) + 1}))
        }
    }

    /// The store lost the answer to a call's first write, which landed: the
    /// caller heard `Unavailable` and retries its key. The call is run once,
    /// by reconciliation, and the retry hears its outcome instead of
    /// waiting for ever on a `Pending` record no task runs.
    #[tokio::test]
    async fn a_call_whose_first_write_lost_its_answer_runs_once_and_answers_its_retry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sqlite = SqliteStore::open(dir.path().join("joch.db")).expect("store");
        let store = Arc::new(LostAnswers::new(sqlite));
        let runs = Arc::new(Counted::default());
        let engine = Engine::new(
            store.clone(),
            vec![runs.clone()],
            Arc::new(StandardPolicyEngine::default()),
            EngineConfig::default(),
        );
        let by = Principal::local();
        let tool: Tool = serde_json::from_value(json!({
            "metadata": {"name": "wire"},
            "spec": {"sideEffects": {"level": "external_write"}, "backend": {"type": "noop"}}
        }))
        .expect("a tool");
        engine
            .resources()
            .create(&by, "ns", tool)
            .await
            .expect("the tool");

        store.lose(1);
        let first = engine.calls().call(&by, "ns", call(Some("first"))).await;
        assert!(
            matches!(&first, Err(EngineError::Store(_))),
            "the caller hears the store went away: {first:?}"
        );
        let retry = engine.calls().call(&by, "ns", call(None));
        let retried = tokio::time::timeout(Duration::from_secs(20), retry)
            .await
            .expect("the retry is answered")
            .expect("the retry");
        assert_eq!(retried.record.metadata.name, "first");
        assert_eq!(retried.record.status.phase, Phase::Succeeded);
        assert!(retried.replayed, "the retry ran nothing itself");
        assert_eq!(runs.0.load(Ordering::SeqCst), 1, "run once");
    }
}
