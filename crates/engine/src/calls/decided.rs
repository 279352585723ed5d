//! Acting on a decision: run the approved call (with the approver's
//! arguments or the value provided), deny the rejected one, apply the
//! fallback of an expired one, skip a withdrawn one. Every step first
//! checks the call still awaits the decision, so acting twice (a decider
//! and recovery, two replicas) changes nothing the second time.
//!
//! The approvals part stores decisions; it reaches this file through the
//! [`Decided`] seam it was built with (`Back`, below), never through the
//! calls part itself.

mod binding;
mod consent;
mod retry;

use std::sync::Weak;
use std::time::Duration;

use async_trait::async_trait;
use joch_core::approval::ApprovalPhase;
use joch_core::normalize::normalize_args;
use joch_core::patch::apply_patch;
use joch_core::{
    Approval, CallApproval, CallError, DecisionKind, ErrorCode, EventKind, Hook, HookDecision,
    Phase, ToolCall,
};
use serde_json::{Map, Value, json};

use super::{Admitting, Calls, Parts, RESUMPTION, Rejection};
use crate::EngineError;
use crate::approvals::{ApprovalDecision, Decided};
use crate::policies::Facts;
use crate::telemetry;
use joch_core::ApprovalActionKind;

/// The approvals part's way back to the calls part that owns it: a weak
/// reference, so that neither keeps the other alive.
pub(super) struct Back(pub(super) Weak<Parts>);

impl Back {
    fn calls(&self) -> Result<Calls, EngineError> {
        // Gone only once the engine is dropped: nothing is left to run it.
        let inner = self.0.upgrade().ok_or_else(|| {
            EngineError::Store(joch_store::StoreError::Unavailable(
                "the engine has stopped".to_owned(),
            ))
        })?;
        Ok(Calls { inner })
    }
}

#[async_trait]
impl Decided for Back {
    async fn carry_out(
        &self,
        approval: &Approval,
        decision: &ApprovalDecision,
    ) -> Result<Option<Approval>, EngineError> {
        self.calls()?.carry_out(approval, decision).await
    }

    async fn expire_unretried(&self, approval: &Approval) -> Result<Option<Duration>, EngineError> {
        self.calls()?.expire_unretried(approval).await
    }
}

impl Calls {
    /// Does with `approval`'s call what its stored decision says.
    async fn carry_out(
        &self,
        approval: &Approval,
        decision: &ApprovalDecision,
    ) -> Result<Option<Approval>, EngineError> {
        match (approval.status.phase, approval.status.decision.as_deref()) {
            (ApprovalPhase::Pending, _) => Ok(None),
            (ApprovalPhase::Approved, _) => self.resume_approved(approval, decision).await,
            (ApprovalPhase::Rejected, _) => self.deny_rejected(approval).await.map(|()| None),
            (ApprovalPhase::Expired, Some("timeout")) => {
                self.fall_back(approval, decision).await.map(|()| None)
            }
            (ApprovalPhase::Expired, _) => self.skip_withdrawn(approval).await.map(|()| None),
        }
    }

    /// Settles a rejected approval's call `Denied`, with the approver's message.
    async fn deny_rejected(&self, approval: &Approval) -> Result<(), EngineError> {
        self.inner.approvals.withdraw_consents(approval).await;
        let Some(mut call) = self.awaiting_call(approval).await? else {
            return Ok(());
        };
        mark_call(&mut call, "rejected", approval);
        self.inner
            .events
            .emit_for(&call, EventKind::RunResumed, json!({"approved": false}))
            .await?;
        let message = approval
            .status
            .message
            .clone()
            .or_else(|| approval.status.rationale.clone())
            .unwrap_or_else(|| "rejected by an approver".to_owned());
        // A consent not given (declined, or its code refused) is not an
        // approver's "no": the call may succeed once the user consents.
        let (reason, code) = if approval.spec.action.kind == ApprovalActionKind::Consent {
            ("Consent not given", ErrorCode::ConsentRequired)
        } else {
            ("Denied by approver", ErrorCode::DeniedByApprover)
        };
        let rejection = Rejection::refused(&call, Phase::Denied, reason, code, message);
        self.refuse(call, rejection).await.map(drop)
    }

    /// The approval's call, if it still waits for the decision.
    pub(super) async fn awaiting_call(
        &self,
        approval: &Approval,
    ) -> Result<Option<ToolCall>, EngineError> {
        let meta = &approval.metadata;
        let call = self.record(&meta.namespace, &meta.name).await?;
        Ok((call.status.phase == Phase::AwaitingApproval).then_some(call))
    }

    /// Applies an expired approval's fallback to its call: run it, or
    /// settle it `TimedOut`.
    async fn fall_back(
        &self,
        approval: &Approval,
        decision: &ApprovalDecision,
    ) -> Result<(), EngineError> {
        if self.falls_back_to_approve(approval) {
            return self.resume_approved(approval, decision).await.map(drop);
        }
        self.inner.approvals.withdraw_consents(approval).await;
        let Some(mut call) = self.awaiting_call(approval).await? else {
            return Ok(());
        };
        mark_call(&mut call, "timed_out", approval);
        self.inner
            .events
            .emit_for(
                &call,
                EventKind::RunResumed,
                json!({"approved": false, "reason": "approval timed out"}),
            )
            .await?;
        let rejection = if approval.spec.action.kind == ApprovalActionKind::Consent {
            let url = approval
                .spec
                .payload
                .get("consentUrl")
                .and_then(Value::as_str);
            let reason = format!(
                "the user did not consent before the deadline{}: call the tool again, and have the user open the new consent URL it gives (the approval's consentUrl) before its deadline",
                url.map(|_| " at the consent URL").unwrap_or_default()
            );
            Rejection::refused(
                &call,
                Phase::TimedOut,
                "Consent not given",
                ErrorCode::ConsentRequired,
                reason,
            )
        } else {
            let reason = "nobody decided on the approval before its deadline".to_owned();
            Rejection::refused(
                &call,
                Phase::TimedOut,
                "Approval timed out",
                ErrorCode::ApprovalTimedOut,
                reason,
            )
        };
        self.refuse(call, rejection).await.map(drop)
    }

    /// Settles `Skipped` the call of an approval withdrawn because its batch
    /// stopped (the batch settles it so itself, unless it stopped first).
    async fn skip_withdrawn(&self, approval: &Approval) -> Result<(), EngineError> {
        let Some(call) = self.awaiting_call(approval).await? else {
            return Ok(());
        };
        let reason = approval
            .status
            .rationale
            .clone()
            .unwrap_or_else(|| "its batch stopped".to_owned());
        let rejection = Rejection::skipped(&call, reason);
        self.refuse(call, rejection).await.map(drop)
    }

    /// Runs an approved call (see [`run_approved`](Self::run_approved)),
    /// unless it runs only when its caller retries it: then it waits for
    /// that retry, or its retry deadline (`retry.rs`).
    async fn resume_approved(
        &self,
        approval: &Approval,
        decision: &ApprovalDecision,
    ) -> Result<Option<Approval>, EngineError> {
        let Some(call) = self.awaiting_call(approval).await? else {
            return Ok(None);
        };
        if retry::runs_on_retry(&call) {
            self.await_retry(approval);
            return Ok(None);
        }
        self.run_approved(call, approval, decision).await
    }

    /// Runs the approved `call`, with its arguments as approved, edited or
    /// completed, once the request policies in force now have seen them
    /// again (a deny wins; their modifications apply); unless what would run
    /// is no longer what the Approval binds, in which case the call goes
    /// back for a new decision (`binding.rs`): then the Approval as it
    /// waits again.
    pub(super) async fn run_approved(
        &self,
        mut call: ToolCall,
        approval: &Approval,
        decision: &ApprovalDecision,
    ) -> Result<Option<Approval>, EngineError> {
        let namespace = call.metadata.namespace.clone();
        let tool = self.inner.catalog.resolve_tool(&namespace, &call).await?;
        let policies = self.inner.catalog.policies(&namespace).await?;
        let schemas = self.inner.catalog.schemas(&tool).ok();
        let (args, mut rejection) = decided_args(&mut call, approval, decision)?;
        let mut a = Admitting::resumed(call, tool, args, policies, schemas);
        if rejection.is_none() {
            rejection = self.check(&mut a, RESUMPTION).await?;
        }
        if let (None, Some(why)) = (&rejection, binding::unbound(approval, decision, &a)) {
            return self.reconsider(a, approval, why).await;
        }
        self.mark_approved(&mut a.call, approval, decision).await?;
        if a.facts.is_none() {
            let count = self.tool_call_count(&a.call).await?;
            let mut facts = Facts::request(&a.call, &a.tool, &a.args, count, false);
            // Recorded at admission already; scanned again for the result hook.
            facts.detect_input(
                self.inner
                    .policies
                    .detectors(&namespace, &a.policies)
                    .await?,
            );
            a.facts = Some(facts.with_input(&a.args));
        }
        if !a.call.status.input_withheld || decision.edited_input.is_some() {
            a.record_input();
        }
        if rejection.is_none() && approval.spec.action.kind != ApprovalActionKind::Consent {
            if let Some(deferral) = self.consent_after_approval(&a).await? {
                return self
                    .wait_for_consent(a, approval, deferral)
                    .await
                    .map(|()| None);
            }
        }
        self.run_in_background(a.into_recorded(rejection));
        Ok(None)
    }

    /// Marks the call approved (a consent after a person's approval keeps
    /// that person as its approver), says it resumed, and records the
    /// approval as the decision that allowed it under a deferring policy.
    async fn mark_approved(
        &self,
        call: &mut ToolCall,
        approval: &Approval,
        decision: &ApprovalDecision,
    ) -> Result<(), EngineError> {
        let approver = call
            .spec
            .approval
            .as_ref()
            .map(|a| (a.approved_by.clone(), a.approved_at));
        mark_call(call, "approved", approval);
        if let (ApprovalActionKind::Consent, Some((Some(by), at)), Some(marked)) = (
            approval.spec.action.kind,
            approver,
            call.spec.approval.as_mut(),
        ) {
            // Consent after a person's approval: the person approved it.
            (marked.approved_by, marked.approved_at) = (Some(by), at);
        }
        self.inner
            .events
            .emit_for(call, EventKind::RunResumed, json!({"approved": true}))
            .await?;
        // The policy deferred; the approval is what allowed the call under it.
        if let Some(policy) = &approval.spec.policy_ref {
            telemetry::record_decisions(
                call,
                vec![HookDecision {
                    hook: Hook::Request.step().to_owned(),
                    decision: DecisionKind::Allow,
                    policy_id: Some(policy.name.clone()),
                    policy_version: Some(policy.version.clone()),
                    reason: Some(format!("approved by {}", decision.by)),
                    shadow: false,
                }],
            );
        }
        Ok(())
    }
}

/// Records the approval's outcome on the call's `spec.approval`: who
/// approved or who rejected it, and when, in the fields that say which (a
/// deadline that passed is neither).
fn mark_call(call: &mut ToolCall, status: &str, approval: &Approval) {
    let (by, at) = (&approval.status.decided_by, approval.status.decided_at);
    let mut marked = CallApproval {
        required: true,
        status: Some(status.to_owned()),
        reason: approval.status.rationale.clone(),
        ..CallApproval::default()
    };
    match status {
        "approved" => (marked.approved_by, marked.approved_at) = (by.clone(), at),
        "rejected" => (marked.rejected_by, marked.rejected_at) = (by.clone(), at),
        _ => {}
    }
    call.spec.approval = Some(marked);
}

/// The arguments the call runs with once decided: as recorded, as the
/// approver edited them, or completed with the value a person gave; and
/// the call's rejection if its input was not recorded.
fn decided_args(
    call: &mut ToolCall,
    approval: &Approval,
    decision: &ApprovalDecision,
) -> Result<(Map<String, Value>, Option<Rejection>), EngineError> {
    let mut rejection = None;
    let mut args = match (&call.spec.input, call.status.input_withheld) {
        (Value::Object(args), false) => args.clone(),
        _ => {
            rejection = Some(Rejection {
                phase: Phase::Failed,
                error: CallError::new(
                    ErrorCode::InputWithheld,
                    "the call's input was not recorded, so it cannot run after approval",
                ),
                answer: None,
            });
            Map::new()
        }
    };
    if let Some(edited) = &decision.edited_input {
        call.status
            .original_input
            .get_or_insert(call.spec.input.clone());
        args = normalize_args(edited.clone())
            .map_err(|e| EngineError::InvalidDecision(format!("input: {e}")))?;
    }
    if let (Some(value), Some(input)) = (&decision.value, approval.spec.payload.get("userInput")) {
        let target = input
            .get("targetArg")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut patched = Value::Object(args);
        let patch = joch_core::policy::Patch {
            set: [(target.to_owned(), value.clone())].into(),
            ..Default::default()
        };
        apply_patch(&mut patched, &patch);
        args = patched.as_object().cloned().unwrap_or_default();
    }
    Ok((args, rejection))
}
