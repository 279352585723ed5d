//! What an approval binds: a person approves a call as it would run (the
//! Approval's `spec.binding`: the tool's version and the digest of tool,
//! version, arguments after every modification, and principal). Just
//! before the approved call runs, the request policies in force see it
//! again (`decided.rs`); then, if what would run is no longer what was
//! approved, the call goes back for a new decision instead of running:
//!
//! - the Tool (or its McpServer's tool) changed while the call waited:
//!   nobody approved the new definition;
//! - without new arguments from this decision, the arguments the tool would
//!   receive differ from the approved ones (a policy published meanwhile
//!   modifies them otherwise).
//!
//! An edit or a value is approved as it is given, under the tool's current
//! definition: only the version is checked then.

use joch_core::{Approval, EventKind};
use joch_store::StoreErrorKind;
use serde_json::json;

use crate::EngineError;
use crate::approvals::ApprovalDecision;
use crate::calls::deferral::Deferral;
use crate::calls::{Admitting, Calls};

/// Why the call `a`, about to run on `approval`'s decision, is not what
/// the approval binds; `None` when it is (or the Approval predates bindings).
pub(super) fn unbound(
    approval: &Approval,
    decision: &ApprovalDecision,
    a: &Admitting<'_>,
) -> Option<String> {
    let binding = approval.spec.binding.as_ref()?;
    let now = a.tool_version();
    if binding.tool_version.as_deref() != now {
        return Some(format!(
            "the tool {:?} changed while the call waited (version {} when it was asked, {} now): decide again on the new definition",
            a.call.tool_name(),
            binding.tool_version.as_deref().unwrap_or("none"),
            now.unwrap_or("none"),
        ));
    }
    let new_arguments = decision.edited_input.is_some() || decision.value.is_some();
    (!new_arguments && binding.digest != a.run_digest()).then(|| {
        "the arguments the tool would receive changed while the call waited (the policies in force modify them otherwise): decide again on them".to_owned()
    })
}

impl Calls {
    /// Sends the call `a`, decided on `decided` but no longer bound by it
    /// (`why`), back for a new decision: its Approval pending again in
    /// place, bound to the call as it would run now, the superseded
    /// decision kept as `spec.payload.superseded`. The call stays
    /// `AwaitingApproval`, with the arguments it would run with. Another
    /// replica doing the same first wins; this one then stops.
    pub(super) async fn reconsider(
        &self,
        mut a: Admitting<'_>,
        decided: &Approval,
        why: String,
    ) -> Result<Option<Approval>, EngineError> {
        a.record_input();
        let mut approval = self.approval_for(&a, Deferral::again(decided, why.clone()))?;
        approval.metadata = decided.metadata.clone();
        let status = &decided.status;
        approval.spec.payload["superseded"] = json!({
            "decision": status.decision,
            "by": status.decided_by,
            "at": status.decided_at,
            "editedInput": status.edited_input,
            "because": why,
        });
        match self.inner.approvals.reopen(&mut approval).await {
            Err(EngineError::Conflict(_)) => return Ok(None),
            other => other?,
        }
        let call = &mut a.call;
        if let Some(marked) = call.spec.approval.as_mut() {
            marked.status = Some("pending".to_owned());
        }
        match self
            .inner
            .store
            .update_object(call, joch_store::Durability::Sync)
            .await
        {
            Err(e) if e.kind() == StoreErrorKind::Conflict => return Ok(None),
            other => other?,
        }
        let payload = json!({"approval": approval.metadata.name, "input": call.spec.input, "options": approval.spec.options});
        self.inner
            .events
            .emit_for(
                call,
                EventKind::RunPaused,
                json!({"reason": why, "payload": payload}),
            )
            .await?;
        Ok(Some(approval))
    }
}
