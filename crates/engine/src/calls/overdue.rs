//! Calls that wait on their client too long: a hook-mode call whose agent
//! never reported its result, and a call whose upstream's round of
//! questions nobody answered. One sweep of the `Running` calls ends both.

use std::time::Duration;

use joch_core::toolcall::CallMode;
use joch_core::{CallError, ErrorCode, Phase, Time, ToolCall};
use joch_store::ListQuery;

use crate::clock::now;
use crate::{Calls, EngineError};

/// Most `Running` calls one sweep reads.
const SWEPT: usize = 1000;

impl Calls {
    /// Sweeps the calls overdue by `timeout` every quarter of it (100 ms to
    /// 5 s). Runs until the runtime stops.
    pub(crate) fn spawn_overdue_sweeper(&self, timeout: Duration) -> tokio::task::JoinHandle<()> {
        let engine = self.clone();
        let every = (timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            loop {
                ticker.tick().await;
                if let Err(e) = engine.sweep_overdue(timeout).await {
                    tracing::warn!(error = %e, "sweeping calls overdue on their client failed");
                }
            }
        })
    }

    async fn sweep_overdue(&self, timeout: Duration) -> Result<(), EngineError> {
        let mut query = ListQuery {
            limit: SWEPT,
            ..ListQuery::default()
        };
        query.index.phase = Some(Phase::Running.as_str().to_owned());
        let running = self.inner.store.list_objects::<ToolCall>(query).await?;
        let at = now();
        for call in running.items {
            let Some((phase, error)) = overdue(&call, at, timeout) else {
                continue;
            };
            // A report or an answer that came meanwhile wins (the record's version).
            match self.settle(call, phase, None, Some(error), None).await {
                Err(EngineError::Conflict(_)) => {}
                other => drop(other?),
            }
        }
        Ok(())
    }
}

/// How `call` ends if it waited on its client longer than `timeout` at
/// `at`: a hook-mode call never reported is `Unknown` (whether the tool
/// ran is not known); a round of questions never answered fails.
fn overdue(call: &ToolCall, at: Time, timeout: Duration) -> Option<(Phase, CallError)> {
    let limit = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let secs = timeout.as_secs();
    let since = |t: &Time| t.millis_until(at) >= limit;
    if call.spec.mode == CallMode::Hook && call.status.started_at.as_ref().is_some_and(since) {
        let message = format!(
            "the agent did not report this call's result within {secs} s; whether the tool ran is not known"
        );
        return Some((
            Phase::Unknown,
            CallError::new(ErrorCode::HookResultMissing, message),
        ));
    }
    let round = call.status.input_required.as_ref()?;
    if round.answered_at.is_some() || !since(&round.asked_at) {
        return None;
    }
    let message = format!("the client did not answer the server's questions within {secs} s");
    Some((
        Phase::Failed,
        CallError::new(ErrorCode::InputAbandoned, message),
    ))
}
