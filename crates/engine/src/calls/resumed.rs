//! A call deferred to a person and resumed by a later request of the
//! caller (MCP 2026-07-28: a `tools/call` answered `input_required`, then
//! retried with its `requestState`). The retry names the call; what it
//! gets is the call's record, on whichever replica it reaches: the tool
//! runs once, and every retry reads that outcome. A call that runs on its
//! caller's retry (`spec.runsOn: retry`, see `decided/retry.rs`) runs
//! when a retry finds it approved, or sees it approved while it waits;
//! any other ran when the decision was made. The name is not a
//! credential: only the principal that made the call may resume it
//! (another gets `NotFound`, as for no call at all), and only by asking
//! the same again: the same tool with the same arguments. Cancelling is
//! `cancels.rs`.

use std::time::Duration;

use joch_core::normalize::normalize_args;
use joch_core::{
    ApprovalPhase, ErrorCode, Phase, Principal, RefusalCode, RunsOn, ToolCall, checksum,
};
use serde_json::Value;

use crate::Calls;
use crate::EngineError;
use crate::calls::{CallOutcome, Rejection};
use crate::rules::acts_in;

impl Calls {
    /// The call, if `by` made it; else `NotFound`, as for no call at all.
    async fn own_call(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<ToolCall, EngineError> {
        acts_in(by, namespace)?;
        made_by(by, self.record(namespace, name).await?)
    }
}

/// What a retry of a deferred call asks again: the tool and the arguments
/// as the caller sends them (MCP 2026-07-28: the `tools/call`, resource
/// read or prompt get that carries the `requestState`). A retry is the same
/// request, or it resumes nothing.
#[derive(Debug, Clone, Copy)]
pub struct Retry<'a> {
    /// The tool called (a server's surface tool for a read or a get).
    pub tool: &'a str,
    /// The arguments, as the original call's `spec.input` was made.
    pub input: &'a Value,
}

impl Retry<'_> {
    /// Refuses (`resume_mismatch`) a retry that asks something other than
    /// `call`: another tool, or other arguments than the call's checksum
    /// binds. Nothing about the call changes.
    fn asks_again(&self, call: &ToolCall) -> Result<(), EngineError> {
        let differs = if self.tool != call.tool_name() {
            Some("tool")
        } else {
            let sent = normalize_args(self.input.clone()).ok();
            let same =
                sent.is_some_and(|args| checksum(call.tool_name(), &args) == call.status.checksum);
            (!same).then_some("arguments")
        };
        match differs {
            None => Ok(()),
            Some(what) => Err(EngineError::Refused {
                code: RefusalCode::ResumeMismatch,
                message: format!(
                    "this retry's {what} differ from those of call {:?} that its requestState names: retry with the same tool and arguments, or make a new call (without requestState)",
                    call.metadata.name
                ),
            }),
        }
    }
}

impl Calls {
    /// The call `name` that `by` made, once settled; if it has not settled
    /// within `wait`, as it stands then (still `AwaitingApproval`, most
    /// likely). The output comes as the calling agent receives it. The
    /// retry must ask exactly what the call asked ([`Retry`]), else it is
    /// refused (`resume_mismatch`) and nothing runs. A call that runs on
    /// its caller's retry (`spec.runsOn: retry`) runs now if it is
    /// approved, or as soon as it is while this waits.
    pub async fn resume(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        retry: Retry<'_>,
        wait: Duration,
    ) -> Result<ToolCall, EngineError> {
        let call = self.own_call(by, namespace, name).await?;
        retry.asks_again(&call)?;
        let call = if call.status.phase.is_terminal() {
            call
        } else {
            match tokio::time::timeout(wait, self.retried(call)).await {
                Ok(settled) => settled?,
                Err(_) => self.record(namespace, name).await?,
            }
        };
        Ok(CallOutcome::stored(call, false).into_response())
    }

    /// Waits for `call` to settle. One that runs on its caller's retry is
    /// carried out here whenever its Approval is found decided (a person
    /// may decide while the retry waits, or a consent may follow an
    /// approval), in a task of its own: a retry that stops waiting does
    /// not stop a run it started.
    async fn retried(&self, call: ToolCall) -> Result<ToolCall, EngineError> {
        let (namespace, name) = (call.metadata.namespace, call.metadata.name);
        if call.spec.runs_on != RunsOn::Retry {
            return self.wait_settled(&namespace, &name).await;
        }
        let mut settled = self.inner.settled.subscribe();
        let mut decided = self.inner.approvals.changes();
        // The decision last carried out, by its Approval's version.
        let mut carried: Option<String> = None;
        loop {
            // Marked seen before reading: a change during the read wakes the next turn.
            let _ = decided.borrow_and_update();
            let call = self.record(&namespace, &name).await?;
            if call.status.phase.is_terminal() || super::rounds::waits_on_client(&call, 1) {
                return Ok(call);
            }
            let approval = match self.inner.approvals.get(&namespace, &name).await {
                Ok(approval) => Some(approval),
                Err(EngineError::NotFound { .. }) => None,
                Err(e) => return Err(e),
            };
            if let Some(approval) = approval.filter(|a| {
                call.status.phase == Phase::AwaitingApproval
                    && a.status.phase != ApprovalPhase::Pending
                    && carried.as_ref() != Some(&a.metadata.resource_version)
            }) {
                carried = Some(approval.metadata.resource_version.clone());
                let carried_out = self
                    .to_completion("a retried call", move |engine| async move {
                        engine.carry_out_retried(&approval).await
                    })
                    .await;
                // Another retry (or replica) carrying it out first wins; this
                // one waits for the outcome all the same.
                if let Err(e) = carried_out {
                    tracing::warn!(call = %name, error = %e, "a retry could not carry out its call's approval");
                }
                continue;
            }
            tokio::select! {
                _ = settled.changed() => {}
                _ = decided.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    }

    /// The call `name` that `by` made, as it stands, its output as the
    /// calling agent receives it: what a task names (MCP `tasks/get`,
    /// `tasks/update`, `tasks/cancel`). Another's call is `NotFound`.
    pub async fn own(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<ToolCall, EngineError> {
        let call = self.own_call(by, namespace, name).await?;
        Ok(CallOutcome::stored(call, false).into_response())
    }

    /// Withdraws a call waiting for a person (see [`Calls::cancel`]): its
    /// Approval is withdrawn and it ends `Failed` with `error.code:
    /// cancelled`, never to run; unless an approver decided first, in which
    /// case it is returned as it stands (but a call that runs on its
    /// caller's retry, approved and not yet retried, ends so too).
    pub(in crate::calls) async fn withdraw(&self, call: ToolCall) -> Result<ToolCall, EngineError> {
        let (namespace, name) = (&call.metadata.namespace, &call.metadata.name);
        self.inner
            .approvals
            .withdraw_approval(namespace, name, "cancelled by the caller")
            .await?;
        // Withdrawn by us, not decided by an approver first, the call is
        // ours to end; so is one approved that waits for our retry to run.
        let approval = self.inner.approvals.get(namespace, name).await?;
        let call = self.record(namespace, name).await?;
        let ours =
            approval.status.phase == ApprovalPhase::Expired || call.spec.runs_on == RunsOn::Retry;
        if !ours || call.status.phase != Phase::AwaitingApproval {
            return Ok(call);
        }
        let rejection = Rejection::refused(
            &call,
            Phase::Failed,
            "Cancelled by the caller",
            ErrorCode::Cancelled,
            "the caller cancelled the call before it was decided".to_owned(),
        );
        Ok(self.refuse(call, rejection).await?.into_response())
    }
}

/// `call`, if `by` made it (anyone, without authentication); else
/// `NotFound`, as for no call at all.
pub(in crate::calls) fn made_by(by: &Principal, call: ToolCall) -> Result<ToolCall, EngineError> {
    match !by.is_authenticated() || call.status.principal.as_ref().is_some_and(|p| by.is(p)) {
        true => Ok(call),
        false => Err(EngineError::NotFound {
            kind: crate::NotFoundKind::ToolCall,
            name: call.metadata.name,
        }),
    }
}
