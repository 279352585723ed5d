//! A stored decision carried out again: by recovery after a restart, or
//! for a call's retry. The decider may have stopped between storing its
//! decision and acting on it; the call path (`calls/decided.rs`) acts only
//! on a call that still waits, so carrying out twice changes nothing.

use joch_core::{Approval, ApprovalPhase};

use super::standing::Standing;
use super::{ApprovalDecision, Approvals};
use crate::EngineError;

impl Approvals {
    /// Does with the call what a stored decision says, if the call still
    /// waits for it: what the decider would have done next, had it not
    /// stopped between storing its decision and acting on it. A call that
    /// already moved on is left alone, so carrying out twice is harmless.
    pub(crate) async fn carry_out(&self, approval: &Approval) -> Result<(), EngineError> {
        let decision = stored_decision(approval);
        if let (true, Some(verb)) = (approval.status.always, approval.status.decision.as_deref()) {
            // Written just after the decision: the decider may not have got to it.
            self.stand_by(approval, verb, &decision, Standing::Keep)
                .await?;
        }
        if approval.status.phase == ApprovalPhase::Pending {
            return Ok(());
        }
        let carried = self.inner.decided.carry_out(approval, &decision).await;
        carried.map(drop)
    }
}

/// The decision `approval` stores, as its decider made it.
pub(crate) fn stored_decision(approval: &Approval) -> ApprovalDecision {
    ApprovalDecision {
        by: approval.status.decided_by.clone().unwrap_or_default(),
        rationale: approval.status.rationale.clone(),
        message: approval.status.message.clone(),
        edited_input: approval.status.edited_input.clone(),
        value: approval.status.value.clone(),
        always: approval.status.always,
        for_user: approval.status.asked_user,
    }
}
