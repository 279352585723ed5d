//! After a crash: reconcile the calls a previous run left unfinished, and
//! let an operator settle the ones whose outcome nobody can know.
//!
//! The rule that makes this decidable is in `calls.rs`: a risky call's
//! `Running` record is synced before its side effect. So a `Pending` call
//! never reached its tool and is safe to run; a `Running` one may have, and
//! is re-run only when repeating it is harmless.

use std::sync::Arc;

use joch_core::{
    Approval, ApprovalPhase, CallError, ErrorCode, Phase, Principal, Resolution, Tool, ToolCall,
};
use joch_store::{ListQuery, StoreErrorKind};
use serde_json::Value;

use crate::Calls;
use crate::EngineError;
use crate::calls::Recorded;
use crate::clock::now;
use crate::policies::Facts;

/// What recovery does with one unfinished call.
enum Verdict {
    /// A hook call the agent still holds: it may yet report.
    Leave,
    /// Settled as it stands: it must not, or cannot, run again.
    Settle(Phase, CallError, Tally),
    /// Run (again) with its tool.
    Run(Box<Tool>),
}

/// Which count of the report a settled call adds to.
enum Tally {
    Interrupted,
    Abandoned,
}

impl Verdict {
    fn failed(message: &str, code: ErrorCode) -> Self {
        Verdict::Settle(
            Phase::Failed,
            CallError::new(code, message),
            Tally::Abandoned,
        )
    }
}

/// What [`Calls::recover`](crate::Calls::recover) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// `Pending` calls started again (they had never run).
    pub resumed: usize,
    /// `Running` calls of repeatable tools run again (attempts + 1).
    pub rerun: usize,
    /// `Running` calls of risky tools marked `Unknown` (reason `interrupted`).
    pub interrupted: usize,
    /// Calls settled `Failed` because they could not be run again (tool
    /// deleted, input not recorded, cancelled).
    pub abandoned: usize,
    /// Approvals still waiting for a person; their deadlines are re-armed.
    pub approvals_pending: usize,
    /// Calls whose approval was decided, but whose decider stopped before
    /// acting on it: run, denied or timed out now, as decided.
    pub decided: usize,
}

/// How an operator settles an `Unknown` call.
#[derive(Debug, Clone)]
pub struct Resolve {
    /// `Succeeded` or `Failed`.
    pub phase: Phase,
    /// The outcome, when the operator knows it.
    pub output: Option<Value>,
    /// Why; kept on the record.
    pub reason: String,
}

impl Calls {
    pub(crate) async fn reconcile(
        &self,
        call: ToolCall,
        report: &mut RecoveryReport,
    ) -> Result<(), EngineError> {
        match self.verdict(&call).await? {
            Verdict::Leave => Ok(()),
            Verdict::Settle(phase, error, tally) => {
                self.settle(call, phase, None, Some(error), None).await?;
                match tally {
                    Tally::Interrupted => report.interrupted += 1,
                    Tally::Abandoned => report.abandoned += 1,
                }
                Ok(())
            }
            Verdict::Run(tool) => {
                if call.status.phase == Phase::Running {
                    report.rerun += 1;
                } else {
                    report.resumed += 1;
                }
                self.run_again(call, *tool).await
            }
        }
    }

    /// What recovery does with an unfinished call, by the rule of this
    /// module's head.
    async fn verdict(&self, call: &ToolCall) -> Result<Verdict, EngineError> {
        let running = call.status.phase == Phase::Running;
        if call.spec.mode == joch_core::CallMode::Hook {
            // Running: the agent has it and may still report. Pending: no
            // decision reached the agent, so it did not run it.
            return Ok(if call.status.phase == Phase::Pending {
                Verdict::failed(
                    "joch stopped before its decision reached the agent",
                    ErrorCode::Interrupted,
                )
            } else {
                Verdict::Leave
            });
        }
        let repeatable = call
            .spec
            .side_effects
            .as_ref()
            .is_some_and(|s| s.idempotent || s.level == joch_core::SideEffectLevel::ReadOnly);
        if running && !repeatable {
            let error = CallError::new(
                ErrorCode::Interrupted,
                "joch stopped while the tool was running; its side effect may or may not have happened",
            );
            return Ok(Verdict::Settle(Phase::Unknown, error, Tally::Interrupted));
        }
        if self.cancel_marked(call).await? {
            // Cancelled while its replica was going away: not run again.
            return Ok(Verdict::failed(
                "the call was cancelled; joch stopped before it could stop it",
                ErrorCode::Cancelled,
            ));
        }
        let ns = &call.metadata.namespace;
        let tool: Option<Tool> = match self.inner.store.get_object(ns, call.tool_name()).await {
            Ok(tool) => Some(tool),
            Err(e) if e.kind() == StoreErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        match tool {
            Some(tool) if call.spec.input.is_object() && !call.status.input_withheld => {
                Ok(Verdict::Run(Box::new(tool)))
            }
            _ => {
                let error = CallError::new(
                    ErrorCode::Interrupted,
                    "joch stopped before this call finished, and it cannot be run again: its tool is gone or its input was not recorded",
                );
                let phase = if running {
                    Phase::Unknown
                } else {
                    Phase::Failed
                };
                Ok(Verdict::Settle(phase, error, Tally::Abandoned))
            }
        }
    }

    /// Runs a recovered call again, under today's policies.
    pub(in crate::calls) async fn run_again(
        &self,
        call: ToolCall,
        tool: Tool,
    ) -> Result<(), EngineError> {
        let ns = call.metadata.namespace.clone();
        let args = call.spec.input.as_object().cloned().unwrap_or_default();
        let schemas = self.inner.catalog.schemas(&tool).ok();
        let policies = self.inner.catalog.policies(&ns).await?;
        let facts = match policies.is_empty() {
            true => None,
            false => {
                let count = self.tool_call_count(&call).await?;
                let mut facts = Facts::request(&call, &tool, &args, count, false);
                facts.detect_input(self.inner.policies.detectors(&ns, &policies).await?);
                Some(facts)
            }
        };
        let recorded = Recorded {
            call,
            tool: Arc::new(tool),
            args,
            schemas,
            rejection: None,
            policies,
            facts,
        };
        self.run_in_background(recorded);
        Ok(())
    }

    /// A call left `AwaitingApproval`: if its approval was decided, carries
    /// the decision out; if its approval was never opened (joch stopped in
    /// between), fails it, since nobody can approve it. With `lapsed` set,
    /// only what that lapsed replica left undone.
    pub(crate) async fn reconcile_awaiting(
        &self,
        call: ToolCall,
        lapsed: Option<&str>,
        report: &mut RecoveryReport,
    ) -> Result<(), EngineError> {
        let left_by =
            |replica: &Option<String>| lapsed.is_none_or(|r| replica.as_deref() == Some(r));
        let meta = &call.metadata;
        match self
            .inner
            .store
            .get_object::<Approval>(&meta.namespace, &meta.name)
            .await
        {
            Ok(approval) => {
                if approval.status.phase != ApprovalPhase::Pending
                    && left_by(&approval.status.replica)
                {
                    self.inner.approvals.carry_out(&approval).await?;
                    report.decided += 1;
                }
            }
            Err(e) if e.kind() == StoreErrorKind::NotFound => {
                if left_by(&call.status.replica) {
                    let error = CallError::new(
                        ErrorCode::Interrupted,
                        "joch stopped before it could ask for this call's approval; the call never ran",
                    );
                    self.settle(call, Phase::Failed, None, Some(error), None)
                        .await?;
                    report.abandoned += 1;
                }
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// Every call in `phase`, across namespaces.
    pub(crate) async fn calls_in(&self, phase: Phase) -> Result<Vec<ToolCall>, EngineError> {
        let mut calls = Vec::new();
        let mut query = ListQuery {
            limit: 1000,
            ..ListQuery::default()
        };
        query.index.phase = Some(phase.as_str().to_owned());
        loop {
            let page = self
                .inner
                .store
                .list_objects::<ToolCall>(query.clone())
                .await?;
            calls.extend(page.items);
            match page.continue_token {
                Some(token) => query.continue_from = Some(token),
                None => return Ok(calls),
            }
        }
    }
}

impl Calls {
    /// Reconciles every call left `Pending` or `Running` by a previous run.
    /// Call before serving. Calls that are run again run in the background.
    ///
    /// With a shared store (`EngineConfig::replica` set), the calls left
    /// unfinished belong to replicas that may still be running them: only
    /// approval deadlines are armed here, and a lapsed replica's calls are
    /// reconciled when its lease is reaped (`lifecycle/replicas.rs`).
    pub async fn recover(&self) -> Result<RecoveryReport, EngineError> {
        let mut report = RecoveryReport::default();
        if self.inner.settings.replica.is_some() {
            report.approvals_pending = self.inner.approvals.rearm_pending_approvals().await?;
            return Ok(report);
        }
        for phase in [Phase::Running, Phase::Pending] {
            for call in self.calls_in(phase).await? {
                self.reconcile(call, &mut report).await?;
            }
        }
        for call in self.calls_in(Phase::AwaitingApproval).await? {
            self.reconcile_awaiting(call, None, &mut report).await?;
        }
        report.approvals_pending = self.inner.approvals.rearm_pending_approvals().await?;
        if report != RecoveryReport::default() {
            tracing::warn!(
                ?report,
                "recovered calls left unfinished by the previous run"
            );
        }
        Ok(report)
    }

    /// Settles an `Unknown` call as an operator decided, keeping their reason.
    pub async fn resolve(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        resolve: Resolve,
    ) -> Result<ToolCall, EngineError> {
        crate::rules::may_in(by, namespace, &crate::rules::Action::ResolveCall)?;
        let mut call = self.record(namespace, name).await?;
        if call.status.phase != Phase::Unknown {
            return Err(EngineError::Refused {
                code: joch_core::RefusalCode::NotUnknown,
                message: format!(
                    "only Unknown calls can be resolved; {name:?} is {}",
                    call.status.phase
                ),
            });
        }
        if !matches!(resolve.phase, Phase::Succeeded | Phase::Failed) {
            return Err(EngineError::InvalidDecision(
                "a call can be resolved only to Succeeded or Failed".to_owned(),
            ));
        }
        call.transition(resolve.phase)?;
        call.status.resolution = Some(Resolution {
            reason: resolve.reason.clone(),
            resolved_at: now(),
            resolved_by: Some(by.reference()),
        });
        call.status.output = resolve.output;
        call.status.error = match resolve.phase {
            Phase::Failed => Some(CallError::new(ErrorCode::ResolvedFailed, resolve.reason)),
            _ => None,
        };
        self.store_settled(&mut call).await?;
        self.settled();
        Ok(call)
    }
}
