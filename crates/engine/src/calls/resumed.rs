//! A call deferred to a person and resumed by a later request of the
//! caller (MCP 2026-07-28: a `tools/call` answered `input_required`, then
//! retried with its `requestState`). The retry names the call; what it
//! gets is the call's record, on whichever replica it reaches: the tool
//! ran once, when the decision was made, and every retry reads that
//! outcome. The name is not a credential: only the principal that made the
//! call may resume it (another gets `NotFound`, as for no call at all).
//! Cancelling is `cancels.rs`.

use std::time::Duration;

use joch_core::{ApprovalPhase, ErrorCode, Phase, Principal, ToolCall};

use crate::Calls;
use crate::calls::{CallOutcome, Rejection};
use crate::identity::rules::acts_in;
use crate::{Engine, EngineError};

impl Engine {
    /// The call, if `by` made it; else `NotFound`, as for no call at all.
    async fn own_call(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<ToolCall, EngineError> {
        acts_in(by, namespace)?;
        let call = self.calls().record(namespace, name).await?;
        let made_it =
            !by.is_authenticated() || call.status.principal.as_ref().is_some_and(|p| by.is(p));
        if !made_it {
            return Err(EngineError::NotFound {
                kind: "ToolCall".to_owned(),
                name: name.to_owned(),
            });
        }
        Ok(call)
    }
}

impl Calls<'_> {
    /// The call `name` that `by` made, once settled; if it has not settled
    /// within `wait`, as it stands then (still `AwaitingApproval`, most
    /// likely). The output comes as the calling agent receives it.
    pub async fn resume(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        wait: Duration,
    ) -> Result<ToolCall, EngineError> {
        let call = self.own_call(by, namespace, name).await?;
        let call = if call.status.phase.is_terminal() {
            call
        } else {
            match tokio::time::timeout(wait, self.wait_settled(namespace, name)).await {
                Ok(settled) => settled?,
                Err(_) => self.record(namespace, name).await?,
            }
        };
        Ok(CallOutcome::stored(call, false).into_response())
    }

    /// Withdraws a call waiting for a person (see [`Calls::cancel`]): its
    /// Approval is withdrawn and it ends `Failed` with `error.code:
    /// cancelled`, never to run; unless an approver decided first, in which
    /// case it is returned as it stands.
    pub(in crate::calls) async fn withdraw(&self, call: ToolCall) -> Result<ToolCall, EngineError> {
        let (namespace, name) = (&call.metadata.namespace, &call.metadata.name);
        self.withdraw_approval(namespace, name, "cancelled by the caller")
            .await?;
        // Withdrawn by us, not decided by an approver first: the call is ours to end.
        let approval = self.approvals().get(namespace, name).await?;
        let call = self.record(namespace, name).await?;
        if approval.status.phase != ApprovalPhase::Expired
            || call.status.phase != Phase::AwaitingApproval
        {
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
