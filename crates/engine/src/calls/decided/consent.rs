//! A call a person approved that then waits for its user's consent (its
//! upstream takes each user's own token, and this user has given none):
//! its Approval is reopened in place as the consent's.

use joch_core::{Approval, EventKind};
use joch_store::Durability;
use serde_json::json;

use crate::EngineError;
use crate::calls::deferral::Deferral;
use crate::calls::{Admitting, Calls};

impl Calls {
    /// Pauses `call`, which a person approved (`approved`), again for its
    /// user's consent: the call stays `AwaitingApproval`, with the consent
    /// URL on its record, and its Approval becomes the consent's.
    pub(super) async fn wait_for_consent(
        &self,
        mut a: Admitting<'_>,
        approved: &Approval,
        deferral: Deferral,
    ) -> Result<(), EngineError> {
        if let Some(marked) = a.call.spec.approval.as_mut() {
            marked.status = Some("pending".to_owned());
            marked.consent_url = deferral.consent_url().map(str::to_owned);
        }
        self.inner
            .store
            .update_object(&mut a.call, Durability::Sync)
            .await?;
        let approval = self.reopen_for_consent(&a, approved, deferral).await?;
        let call = &a.call;
        let reason = approval.spec.payload.get("reason").cloned();
        let payload = json!({"approval": approval.metadata.name, "options": approval.spec.options});
        self.inner
            .events
            .emit_for(
                call,
                EventKind::RunPaused,
                json!({"reason": reason, "payload": payload}),
            )
            .await
    }

    /// Turns the decided Approval `approved` of a call a person approved
    /// into the consent Approval `deferral` asks for, in place (an Approval
    /// is named by its call): pending again, with its own deadline; the
    /// person's decision stays on it as `spec.payload.approved`, and on
    /// the call as `spec.approval.approvedBy`/`approvedAt`.
    async fn reopen_for_consent(
        &self,
        a: &Admitting<'_>,
        approved: &Approval,
        deferral: Deferral,
    ) -> Result<Approval, EngineError> {
        let mut approval = self.approval_for(a, deferral)?;
        approval.metadata = approved.metadata.clone();
        let status = &approved.status;
        approval.spec.payload["approved"] = json!({
            "by": status.decided_by,
            "at": status.decided_at,
            "rationale": status.rationale,
        });
        self.inner.approvals.reopen(&mut approval).await?;
        Ok(approval)
    }
}
