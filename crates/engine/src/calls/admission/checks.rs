//! The checks of [`super::steps`], one function each, but the request
//! policies' (in `policies.rs`).

use joch_core::actions::Action;
use joch_core::{
    Backend, CallMode, DecisionKind, ErrorCode, EventKind, Hook, HookDecision, Phase, ToolCall,
};
use serde_json::{Value, json};

use super::admitting::{Admitting, Verdict};
use crate::calls::Rejection;
use crate::calls::deferral::Deferral;
use crate::mcp::SCHEMA_DRIFT_POLICY;
use crate::rules;
use crate::telemetry;
use crate::{Calls, EngineError};

impl Calls {
    /// A tool outside the principal's tool selector does not exist for it.
    /// A gateway call of one is recorded refused and answered `NotFound`; a
    /// hook's caller runs the tool itself, so it is told no, as for a tool
    /// joch does not know, so that it does not run it.
    pub(super) async fn visible(&self, a: &mut Admitting<'_>) -> Result<Verdict, EngineError> {
        if a.by.is_none_or(|by| rules::sees(by, &a.tool)) {
            return Ok(Verdict::Continue);
        }
        if a.call.spec.mode == CallMode::Hook {
            return Ok(Verdict::Reject(unseen(&a.call)));
        }
        let input = match &a.malformed {
            Some((_, sent)) => sent.clone(),
            None => Value::Object(std::mem::take(&mut a.args)),
        };
        Err(self.refuse_unseen(a.call.clone(), input).await)
    }

    pub(super) async fn not_quarantined(
        &self,
        a: &mut Admitting<'_>,
    ) -> Result<Verdict, EngineError> {
        let Some(reason) = self.inner.mcp.drift_block(&a.tool).await? else {
            return Ok(Verdict::Continue);
        };
        telemetry::record_decisions(
            &mut a.call,
            vec![HookDecision {
                hook: Hook::Request.step().to_owned(),
                decision: DecisionKind::Deny,
                policy_id: Some(SCHEMA_DRIFT_POLICY.to_owned()),
                policy_version: None,
                reason: Some(reason.clone()),
                shadow: false,
            }],
        );
        Ok(Verdict::Reject(Rejection::refused(
            &a.call,
            Phase::Denied,
            "Tool quarantined",
            ErrorCode::ToolQuarantined,
            reason,
        )))
    }

    pub(super) async fn within_rate_limit(
        &self,
        a: &mut Admitting<'_>,
    ) -> Result<Verdict, EngineError> {
        let Some(limited) = self.rate_limit(&a.call).await? else {
            return Ok(Verdict::Continue);
        };
        let reason = limited.decision.reason.clone().unwrap_or_default();
        telemetry::record_decisions(&mut a.call, vec![limited.decision]);
        let mut refused = Rejection::refused(
            &a.call,
            Phase::Denied,
            "Rate limited",
            ErrorCode::RateLimited,
            reason,
        );
        refused.error.details = Some(json!({"retryAfterSeconds": limited.retry_after_seconds}));
        Ok(Verdict::Reject(refused))
    }

    /// Refuses a call over a budget; warns (as events) of budgets near theirs.
    pub(super) async fn within_budget(
        &self,
        a: &mut Admitting<'_>,
    ) -> Result<Verdict, EngineError> {
        let budgets = self.budget_check(&a.call, &a.tool).await?;
        for warning in budgets.warnings {
            tracing::warn!(namespace = %a.call.metadata.namespace, call = %a.call.metadata.name, warning = %warning["message"], "budget");
            self.inner
                .events
                .emit_for(&a.call, EventKind::Warning, warning)
                .await?;
        }
        let Some((decision, reason)) = budgets.denial else {
            return Ok(Verdict::Continue);
        };
        telemetry::record_decisions(&mut a.call, vec![decision]);
        Ok(Verdict::Reject(Rejection::refused(
            &a.call,
            Phase::Denied,
            "Budget exceeded",
            ErrorCode::BudgetExceeded,
            reason,
        )))
    }

    /// A deferral to a person that a standing decision (an earlier
    /// "approve always" or "deny always") answers instead, unless the
    /// caller made that decision itself (`rules::stands_for`): then the
    /// call waits for a person. A call it answers records it in
    /// `status.standing`.
    pub(super) async fn standing(&self, a: &mut Admitting<'_>) -> Result<Verdict, EngineError> {
        let Some(deferral) = a.deferral.as_ref().filter(|d| d.is_approval()) else {
            return Ok(Verdict::Continue);
        };
        let Some(by) = a.by else {
            return Ok(Verdict::Continue);
        };
        let namespace = a.call.metadata.namespace.clone();
        let Some(standing) = self
            .inner
            .approvals
            .standing_decision(&namespace, a.call.tool_name())
            .await?
            .filter(|s| rules::stands_for(&s.spec, by))
        else {
            return Ok(Verdict::Continue);
        };
        let approve = standing.spec.decision == "approve";
        let reason = format!(
            "standing {} by {} (approval {})",
            standing.spec.decision, standing.spec.decided_by, standing.spec.approval_ref.name
        );
        let policy = deferral.policy().cloned();
        let decision = match approve {
            true => DecisionKind::Allow,
            false => DecisionKind::Deny,
        };
        telemetry::record_decisions(
            &mut a.call,
            vec![HookDecision {
                hook: Hook::Request.step().to_owned(),
                decision,
                policy_id: policy.as_ref().map(|p| p.name.clone()),
                policy_version: policy.map(|p| p.version),
                reason: Some(reason.clone()),
                shadow: false,
            }],
        );
        a.call.status.standing = Some(standing.spec.clone());
        a.deferral = None;
        a.decided = Some((decision, Some(reason.clone())));
        Ok(match approve {
            true => Verdict::Continue,
            false => Verdict::Reject(Rejection::refused(
                &a.call,
                Phase::Denied,
                "Denied by approver",
                ErrorCode::DeniedByApprover,
                reason,
            )),
        })
    }

    pub(super) fn tool_config(&self, a: &mut Admitting<'_>) -> Verdict {
        match self.inner.catalog.schemas(&a.tool) {
            Ok(schemas) => {
                a.schemas = Some(schemas);
                Verdict::Continue
            }
            Err(e) => Verdict::Reject(Rejection::failed(
                ErrorCode::InvalidToolConfig,
                e.to_string(),
            )),
        }
    }

    /// Invalid arguments fail the call, and the model is told each
    /// violation. A declarative tool with a `validate` action checks its
    /// parameters itself, so that its on_failure actions answer the model.
    pub(super) fn input_schema(a: &mut Admitting<'_>) -> Verdict {
        let validates_itself = matches!(&a.tool.spec.backend, Backend::Actions(actions) if actions.actions.iter().any(|x| matches!(x, Action::Validate { .. })));
        let Some(schemas) = a.schemas.as_ref().filter(|_| !validates_itself) else {
            return Verdict::Continue;
        };
        let args = Value::Object(std::mem::take(&mut a.args));
        let checked = schemas.check_input(&args);
        if let Value::Object(args) = args {
            a.args = args;
        }
        let Err(e) = checked else {
            return Verdict::Continue;
        };
        if a.deferral.take().is_some() {
            not_sent_for_approval(&mut a.call);
        }
        Verdict::Reject(Rejection {
            phase: Phase::Failed,
            answer: Some(crate::catalog::schema::invalid_arguments_answer(
                &a.call.metadata.name,
                &e,
            )),
            error: e,
        })
    }
}

pub(super) fn well_formed(a: &mut Admitting<'_>) -> Verdict {
    match &a.malformed {
        Some((why, _)) => {
            Verdict::Reject(Rejection::failed(ErrorCode::InvalidArguments, why.clone()))
        }
        None => Verdict::Continue,
    }
}

pub(super) fn not_stopped(a: &mut Admitting<'_>) -> Verdict {
    match a.stopped {
        Some(reason) => Verdict::Reject(Rejection::skipped(&a.call, reason.to_owned())),
        None => Verdict::Continue,
    }
}

/// A tool marked `requiresApproval` waits for a person, unless a policy
/// deferred it already.
pub(super) fn tool_approval(a: &mut Admitting<'_>) -> Verdict {
    match a.deferral.is_none() && a.tool.spec.side_effects.requires_approval {
        true => Verdict::Defer(Deferral::tool_requires_approval()),
        false => Verdict::Continue,
    }
}

/// A call a policy deferred, whose input then proved invalid, is not sent
/// for approval: its `defer` decision says so, so that the record does
/// not show a deferral without an Approval and no word why.
fn not_sent_for_approval(call: &mut ToolCall) {
    let request = Hook::Request.step();
    if let Some(deferred) = call.status.hook_decisions.iter_mut().rev().find(|d| {
        d.hook == request && matches!(d.decision.as_str(), "defer" | "request_user_input")
    }) {
        let why = "not sent for approval: the input does not match the tool's inputSchema";
        deferred.reason = Some(match deferred.reason.take() {
            Some(reason) => format!("{reason} ({why})"),
            None => why.to_owned(),
        });
    }
}

/// The refusal of a tool outside the principal's tool selector: for it,
/// the tool does not exist.
fn unseen(call: &ToolCall) -> Rejection {
    Rejection::refused(
        call,
        Phase::Denied,
        "Unknown tool",
        ErrorCode::ToolNotFound,
        format!("no tool {:?} in this namespace", call.tool_name()),
    )
}

impl Calls {
    /// Records a gateway call of a tool the principal may not see as
    /// refused (so the ledger shows the attempt and who made it) and
    /// answers as for a tool that does not exist.
    async fn refuse_unseen(&self, mut call: ToolCall, input: Value) -> EngineError {
        let not_found = EngineError::NotFound {
            kind: crate::NotFoundKind::Tool,
            name: call.tool_name().to_owned(),
        };
        call.spec.input = input;
        let refusal = unseen(&call);
        call.status.replica.clone_from(&self.inner.settings.replica);
        call.status.error = Some(refusal.error);
        call.status.completed_at = Some(crate::clock::now());
        if let Err(e) = call.transition(Phase::Denied) {
            return e.into();
        }
        match self.store_settled(&mut call).await {
            Ok(()) => not_found,
            Err(e) => e,
        }
    }
}
