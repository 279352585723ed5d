//! Calls left unfinished while this process lives on: a store write failed
//! mid-call (PostgreSQL restarted or became unreachable; a disk error), so
//! the call's record may stand `Pending` or `Running` with this replica's
//! name, and no one else will take it over (this replica's lease stays
//! renewed). Once the store answers again, such a call is reconciled by the
//! rules of a restart (`calls/recovery.rs`): a `Pending` call never reached its
//! tool and runs; a `Running` one is re-run only if repeating it is
//! harmless, and is otherwise `Unknown`. A caller retrying its key then
//! hears that outcome, and no side effect runs twice.

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

impl Calls {
    /// `namespace/name`'s run failed on the store: reconcile it once the
    /// store is back, in a task of its own.
    pub(in crate::calls) fn reconcile_when_back(&self, namespace: String, name: String) {
        let engine = self.clone();
        tokio::spawn(async move {
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
