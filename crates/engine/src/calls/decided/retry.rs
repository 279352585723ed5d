//! An approved call that runs only when its caller retries it
//! (`spec.runsOn: retry`). The MCP surface marks so a call of a 2026-07-28
//! client that is not running it as a task: that client was answered
//! `input_required` and may never come back (the OpenAI Agents SDK, for
//! one, tells its model the tool failed), so a decision alone must not run
//! it behind the agent's back.
//!
//! Approving such a call (or its deadline's `onTimeout: approve`) does not
//! run it: the call stays `AwaitingApproval`, its Approval decided, until
//! - its caller retries (`Calls::resume`, which checks that the retry asks
//!   the same tool with the same arguments): the retry carries the
//!   decision out, on whichever replica it reaches, and gets the outcome;
//! - or its retry deadline ([`Approval::retry_deadline`], which every
//!   `input_required` answer states) passes: the call ends `TimedOut`,
//!   `not_retried`, never run. The Approval's deadline timer goes on to it.

use std::time::Duration;

use joch_core::policy::OnTimeout;
use joch_core::{Approval, ApprovalActionKind, ApprovalPhase, ErrorCode, Phase, RunsOn, ToolCall};

use crate::EngineError;
use crate::approvals::stored_decision;
use crate::calls::{Calls, Rejection};
use crate::clock::now;

/// True when `call` runs only on its caller's retry, not on its approval.
pub(super) fn runs_on_retry(call: &ToolCall) -> bool {
    call.spec.runs_on == RunsOn::Retry
}

impl Calls {
    /// The approved call of `approval` waits for its caller's retry: the
    /// Approval's deadline timer (armed here too, for a decision carried
    /// out after a restart) ends it at its retry deadline.
    pub(super) fn await_retry(&self, approval: &Approval) {
        self.inner.approvals.arm_deadline(approval);
    }

    /// For the deadline timer of a decided Approval: while its call waits
    /// for its caller's retry, how long is left until the retry deadline;
    /// once that passed, the call ends `TimedOut` (`not_retried`), never
    /// run. `None` when nothing is left to wait for.
    pub(super) async fn expire_unretried(
        &self,
        approval: &Approval,
    ) -> Result<Option<Duration>, EngineError> {
        if approval.status.phase == ApprovalPhase::Pending {
            return Ok(None);
        }
        let Some(call) = self.awaiting_call(approval).await? else {
            return Ok(None);
        };
        let Some(by) = approval.retry_deadline().filter(|_| runs_on_retry(&call)) else {
            return Ok(None);
        };
        if let Some(left) = (by.0 - now().0).to_std().ok().filter(|l| !l.is_zero()) {
            return Ok(Some(left));
        }
        let reason = format!(
            "approved, but its caller did not retry it by {by}: a call that runs on its caller's retry (MCP input_required without a task) never runs without one"
        );
        let rejection = Rejection::refused(
            &call,
            Phase::TimedOut,
            "Not retried",
            ErrorCode::NotRetried,
            reason,
        );
        self.refuse(call, rejection).await.map(|_| None)
    }

    /// Carries out, for its caller's retry, the decision on a call that
    /// runs on its retry: runs it if `approval` approved it (or its
    /// deadline's fallback did), once the checks of a resumption pass.
    /// Nothing happens for a pending or refusing decision, or a call that
    /// no longer waits (carrying out twice runs it once).
    pub(in crate::calls) async fn carry_out_retried(
        &self,
        approval: &Approval,
    ) -> Result<(), EngineError> {
        let approves = match approval.status.phase {
            ApprovalPhase::Approved => true,
            ApprovalPhase::Expired => self.falls_back_to_approve(approval),
            ApprovalPhase::Pending | ApprovalPhase::Rejected => false,
        };
        let Some(call) = self.awaiting_call(approval).await? else {
            return Ok(());
        };
        if !approves || !runs_on_retry(&call) {
            return Ok(());
        }
        let decision = stored_decision(approval);
        self.run_approved(call, approval, &decision).await.map(drop)
    }

    /// True when `approval` expired and its fallback approves the call.
    pub(super) fn falls_back_to_approve(&self, approval: &Approval) -> bool {
        approval.status.decision.as_deref() == Some("timeout")
            && approval.spec.action.kind == ApprovalActionKind::ToolCall
            && approval
                .spec
                .routing
                .on_timeout
                .unwrap_or(self.inner.settings.approval_fallback)
                == OnTimeout::Approve
    }
}
