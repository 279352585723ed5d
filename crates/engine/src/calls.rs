//! The front of the call path: admit a call, decide on it, record it.
//!
//! Durability rule: the write that immediately precedes a side effect is
//! synced, and so is the write that precedes an answer to the caller. Writes
//! commit in order, so syncing one makes all earlier ones durable too; every
//! other write may ride along unsynced. A read-only or idempotent call thus
//! costs one sync (its result), a risky call two (Running, then its result),
//! and both share each sync with every other call in flight (group commit).
//!
//! A call whose caller waits for its outcome, and that needs no durable
//! intent (it will not run, or its tool may safely run twice) and no key
//! claim, is written once, when it settles, instead of three times
//! (Pending, Running, settled): see [`Intent`].

use std::sync::Arc;
use std::time::Duration;

use joch_core::normalize::normalize_args;
use joch_core::patch::apply_patch;
use joch_core::{
    Backend, CallApproval, CallError, CallSideEffects, Hook, HookDecision, Phase, Policy, Tool,
    ToolCall, ToolCallStatus, checksum,
};
use joch_store::{Durability, StoreError};
use serde_json::{Map, Value, json};
use tracing::Instrument;

use crate::approvals::Deferral;
use crate::hooks::{REPLAY_OVERRIDE_ANNOTATION, refusal};
use crate::idempotency;
use crate::mcp::SCHEMA_DRIFT_POLICY;
use crate::policy::{self, Decision, Effect, Facts};
use crate::resources::admit;
use crate::schema::Compiled;
use crate::telemetry;
use crate::tracing_spans;
use crate::{Engine, EngineError};

/// What a caller gets back for a call.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The record, exactly as stored.
    pub record: ToolCall,
    /// The tool's output in full. The record may hold less: the tool's
    /// `observability` settings redact or drop it there, but the caller that
    /// made the call gets what the tool returned.
    pub output: Option<Value>,
    /// True when this is an earlier call with the same idempotency key,
    /// returned from the record without running anything.
    pub replayed: bool,
}

impl CallOutcome {
    /// The record with the full output: what the calling agent receives.
    pub fn into_response(self) -> ToolCall {
        let mut record = self.record;
        if self.output.is_some() {
            record.status.output = self.output;
        }
        record
    }

    pub(crate) fn stored(record: ToolCall, replayed: bool) -> Self {
        Self {
            record,
            output: None,
            replayed,
        }
    }
}

/// A recorded call, ready to run.
pub(crate) struct Recorded {
    pub(crate) call: ToolCall,
    pub(crate) tool: Arc<Tool>,
    pub(crate) args: Map<String, Value>,
    pub(crate) schemas: Option<Arc<Compiled>>,
    /// Set when the call must not run; it settles with this phase, error and
    /// answer for the model.
    pub(crate) rejection: Option<Rejection>,
    /// The namespace's policies, for the result hook.
    pub(crate) policies: Arc<Vec<Policy>>,
    /// What the request hook saw, extended with the output for the result hook.
    pub(crate) facts: Option<Facts>,
}

/// Why a call will not run.
pub(crate) struct Rejection {
    pub(crate) phase: Phase,
    pub(crate) error: CallError,
    pub(crate) answer: Option<Value>,
}

impl Rejection {
    fn failed(code: &str, message: String) -> Self {
        Rejection {
            phase: Phase::Failed,
            error: CallError::new(code, message),
            answer: None,
        }
    }

    /// A refusal the model is told about: `{"success": false, "error": headline, "reason"}`.
    pub(crate) fn refused(
        call: &ToolCall,
        phase: Phase,
        headline: &str,
        code: &str,
        reason: String,
    ) -> Self {
        Rejection {
            phase,
            answer: Some(refusal(call, headline, Some(&reason))),
            error: CallError::new(code, reason),
        }
    }

    /// A policy's denial.
    pub(crate) fn by_policy(call: &ToolCall, decision: &Decision) -> Self {
        let reason = decision
            .verdict
            .reason
            .clone()
            .unwrap_or_else(|| format!("denied by policy {}", decision.policy_id));
        Self::refused(
            call,
            Phase::Denied,
            "Denied by policy",
            "denied_by_policy",
            reason,
        )
    }
}

/// When a call's record is first written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Intent {
    /// At admission, with this durability: the caller reads the record
    /// back before the call ends (`submit`), or the call must be stored
    /// before anything else happens (hook mode).
    Now(Durability),
    /// The caller waits for the outcome. A call that needs no durable
    /// intent and claims no key is written when it settles, or as `Running`
    /// once it has run for the engine's `intent_grace` (so a slow call can
    /// be seen, and found after a crash); any other is written at
    /// admission, unsynced.
    WhenSettled,
}

/// Either a new record, or the call already holding the idempotency key.
pub(crate) enum Admission {
    New(Box<Recorded>),
    KeyHeldBy(String),
}

impl Engine {
    /// Records a call, runs it and returns it settled. The answer is durable
    /// when this returns; the record was durable before the tool's side
    /// effect could happen. A call deferred for approval is answered once
    /// decided. A call whose idempotency key is held by an earlier call with
    /// the same arguments returns that call, once settled, without running.
    pub async fn call(&self, namespace: &str, call: ToolCall) -> Result<CallOutcome, EngineError> {
        self.call_reporting_pause(namespace, call, None).await
    }

    /// [`call`](Self::call), and if the call is recorded `AwaitingApproval`,
    /// `paused` gets its Approval before the wait: a surface that can reach
    /// the caller's user (MCP elicitation) may then ask them too, deciding
    /// through [`approve`](Self::approve) / [`reject`](Self::reject) like
    /// any approver. Nothing is sent for a call that does not wait.
    pub async fn call_reporting_pause(
        &self,
        namespace: &str,
        call: ToolCall,
        paused: Option<tokio::sync::oneshot::Sender<joch_core::Approval>>,
    ) -> Result<CallOutcome, EngineError> {
        gateway_only(&call)?;
        // The artifact tools' names are reserved: they read handles, not a Tool.
        if joch_core::artifact_tools::is_artifact_tool(call.tool_name()) {
            return self.call_artifact_tool(namespace, call).await;
        }
        let span = tracing_spans::call_span(&call);
        self.call_traced(namespace, call, paused)
            .instrument(span)
            .await
    }

    async fn call_traced(
        &self,
        namespace: &str,
        call: ToolCall,
        paused: Option<tokio::sync::oneshot::Sender<joch_core::Approval>>,
    ) -> Result<CallOutcome, EngineError> {
        match self
            .record(namespace, call, Intent::WhenSettled, None)
            .await?
        {
            Admission::New(recorded) if recorded.call.status.phase == Phase::AwaitingApproval => {
                let name = &recorded.call.metadata.name;
                if let Some(paused) = paused.filter(|p| !p.is_closed()) {
                    // The Approval was written (synced) before `record` returned.
                    match self.get_approval(namespace, name).await {
                        Ok(approval) => drop(paused.send(approval)),
                        Err(e) => {
                            tracing::warn!(call = %name, error = %e, "the pending approval could not be read")
                        }
                    }
                }
                let settled = self
                    .wait_settled(namespace, &recorded.call.metadata.name)
                    .instrument(tracing::info_span!("await_approval"))
                    .await?;
                Ok(CallOutcome::stored(settled, false))
            }
            Admission::New(recorded) => self.run(*recorded).await,
            Admission::KeyHeldBy(holder) => {
                let original = self.wait_settled(namespace, &holder).await?;
                telemetry::idempotent_replay(namespace, original.tool_name());
                Ok(CallOutcome::stored(original, true))
            }
        }
    }

    /// Records a call durably and returns that record at once (`Pending`, or
    /// `AwaitingApproval`); the call runs in the background and settles in
    /// the store. If its idempotency key is held by a settled call, that
    /// call is returned; by an unsettled one, `IdempotencyKeyInUse`.
    pub async fn submit(
        &self,
        namespace: &str,
        call: ToolCall,
    ) -> Result<CallOutcome, EngineError> {
        gateway_only(&call)?;
        if joch_core::artifact_tools::is_artifact_tool(call.tool_name()) {
            return self.call_artifact_tool(namespace, call).await;
        }
        let recorded = match self
            .record(namespace, call, Intent::Now(Durability::Sync), None)
            .await?
        {
            Admission::New(recorded) => *recorded,
            Admission::KeyHeldBy(holder) => {
                let existing = self.key_holder(namespace, &holder).await?;
                if !existing.status.phase.is_terminal() {
                    return Err(EngineError::IdempotencyKeyInUse { call: holder });
                }
                telemetry::idempotent_replay(namespace, existing.tool_name());
                return Ok(CallOutcome::stored(existing, true));
            }
        };
        let accepted = recorded.call.clone();
        if accepted.status.phase == Phase::Pending {
            self.run_in_background(recorded);
        }
        Ok(CallOutcome::stored(accepted, false))
    }

    pub(crate) fn run_in_background(&self, recorded: Recorded) {
        let engine = self.clone();
        let span = tracing_spans::call_span(&recorded.call);
        tokio::spawn(
            async move {
            let name = recorded.call.metadata.name.clone();
            if let Err(e) = engine.run(recorded).await {
                tracing::error!(call = %name, error = %e, "background call could not be settled");
            }
            }
            .instrument(span),
        );
    }

    /// Resolves the tool, normalises the input, runs the request hook,
    /// checks the input, claims the idempotency key, and stores the call
    /// (`Pending`, or `AwaitingApproval` with its Approval).
    pub(crate) async fn record(
        &self,
        namespace: &str,
        mut call: ToolCall,
        intent: Intent,
        skip: Option<&str>,
    ) -> Result<Admission, EngineError> {
        if call.metadata.name.is_empty() {
            call.metadata.name = crate::engine::new_call_name();
        }
        // Set by the store when it writes the call: empty means not yet written.
        call.metadata.resource_version.clear();
        admit(namespace, &mut call, None)?;
        // Only joch marks a call as an artifact tool's (see artifact_tools.rs).
        call.spec.from_artifact_tool = false;
        let tool = self.resolve_tool(namespace, &call).await?;
        let effects = tool.spec.side_effects.clone();

        let mut rejection = None;
        let mut args = match normalize_args(std::mem::take(&mut call.spec.input)) {
            Ok(args) => args,
            Err(e) => {
                rejection = Some(Rejection::failed("invalid_arguments", e.to_string()));
                Map::new()
            }
        };
        let key = idempotency::key_of(&call, &tool, &args)?;
        call.status = ToolCallStatus {
            checksum: checksum(call.tool_name(), &args),
            // An unregistered tool (hook mode) has no version.
            tool_version: Some(tool.metadata.resource_version.clone()).filter(|v| !v.is_empty()),
            ..Default::default()
        };
        call.spec.side_effects = Some(CallSideEffects {
            level: effects.level,
            idempotent: effects.idempotent,
            idempotency_key: key.clone(),
        });

        if let Some(reason) = skip {
            let skipped = Rejection::refused(
                &call,
                Phase::Skipped,
                "Skipped",
                "skipped",
                reason.to_owned(),
            );
            rejection.get_or_insert(skipped);
        }
        if rejection.is_none() {
            if let Some(reason) = self.drift_block(&tool).await? {
                telemetry::record_decisions(
                    &mut call,
                    vec![HookDecision {
                        hook: Hook::Request.step().to_owned(),
                        decision: "deny".to_owned(),
                        policy_id: Some(SCHEMA_DRIFT_POLICY.to_owned()),
                        policy_version: None,
                        reason: Some(reason.clone()),
                    }],
                );
                rejection = Some(Rejection::refused(
                    &call,
                    Phase::Denied,
                    "Tool quarantined",
                    "tool_quarantined",
                    reason,
                ));
            }
        }
        if rejection.is_none() && skip.is_none() {
            if let Some(limited) = self.rate_limit(&call).await? {
                let reason = limited.decision.reason.clone().unwrap_or_default();
                telemetry::record_decisions(&mut call, vec![limited.decision]);
                let mut refused = Rejection::refused(
                    &call,
                    Phase::Denied,
                    "Rate limited",
                    "rate_limited",
                    reason,
                );
                refused.error.details =
                    Some(json!({"retryAfterSeconds": limited.retry_after_seconds}));
                rejection = Some(refused);
            }
        }
        if rejection.is_none() && skip.is_none() {
            let budgets = self.budget_check(&call, &tool).await?;
            for warning in budgets.warnings {
                tracing::warn!(namespace, call = %call.metadata.name, warning = %warning["message"], "budget");
                self.emit_for(&call, "warning", warning).await?;
            }
            if let Some((decision, reason)) = budgets.denial {
                telemetry::record_decisions(&mut call, vec![decision]);
                rejection = Some(Rejection::refused(
                    &call,
                    Phase::Denied,
                    "Budget exceeded",
                    "budget_exceeded",
                    reason,
                ));
            }
        }
        let policies = match skip {
            Some(_) => Arc::default(),
            None => self.policies(namespace).await?,
        };
        let mut facts = None;
        let mut deferral = None;
        // What the request hook decided, for the `policy_decision` event.
        let mut decided = rejection.is_none().then_some(("allow", None::<String>));
        if rejection.is_none() && !policies.is_empty() {
            let overridden = call
                .metadata
                .annotations
                .get(REPLAY_OVERRIDE_ANNOTATION)
                .is_some_and(|v| v == "true");
            let count = self.tool_call_count(&call).await?;
            let mut request = Facts::request(&call, &tool, &args, count, overridden);
            let reads_spend = self
                .inner
                .spend_readers
                .get_or_load(namespace, async {
                    Ok::<_, EngineError>(policies.iter().any(reads_spend))
                })
                .await?;
            if *reads_spend {
                request.value["cost"] = self.spend_facts(&call, &tool).await?;
            }
            let outcome = tracing::info_span!("evaluate_policies", hook = "toolCallRequest")
                .in_scope(|| {
                    policy::decide(&*self.inner.policy, &policies, Hook::Request, &request)
                });
            telemetry::record_decisions(&mut call, outcome.records(Hook::Request));
            if let Some(w) = outcome.winner() {
                decided = Some((w.verdict.effect.name(), w.verdict.reason.clone()));
            }
            match outcome.winner().map(|w| (w, &w.verdict.effect)) {
                Some((w, Effect::Deny)) => rejection = Some(Rejection::by_policy(&call, w)),
                Some((w, Effect::Defer(_) | Effect::RequestUserInput(_))) => {
                    deferral = Some(Deferral::from_decision(w))
                }
                _ => {
                    let patches = outcome.patches();
                    // A policy may ask for a handle instead of an inline result.
                    if let Some(inline) = patches.iter().rev().find_map(|p| p.inline) {
                        call.spec.inline = Some(inline);
                    }
                    if !patches.is_empty() {
                        call.status.original_input = Some(Value::Object(args.clone()));
                        let mut patched = Value::Object(std::mem::take(&mut args));
                        patches
                            .into_iter()
                            .for_each(|p| apply_patch(&mut patched, p));
                        args = match patched {
                            Value::Object(map) => map,
                            _ => Map::new(),
                        };
                    }
                }
            }
            facts = Some(request.with_input(&args));
        }
        if rejection.is_none() && deferral.is_none() && effects.requires_approval {
            deferral = Some(Deferral::tool_requires_approval());
        }
        if let Some(standing) = match &deferral {
            Some(d) if d.is_approval() => {
                self.standing_decision(namespace, call.tool_name()).await?
            }
            _ => None,
        } {
            let approve = standing.spec.decision == "approve";
            let reason = format!(
                "standing {} by {} (approval {})",
                standing.spec.decision, standing.spec.decided_by, standing.spec.approval_ref.name
            );
            let policy = deferral.as_ref().and_then(|d| d.policy()).cloned();
            telemetry::record_decisions(
                &mut call,
                vec![HookDecision {
                    hook: Hook::Request.step().to_owned(),
                    decision: if approve { "allow" } else { "deny" }.to_owned(),
                    policy_id: policy.as_ref().map(|p| p.name.clone()),
                    policy_version: policy.map(|p| p.version),
                    reason: Some(reason.clone()),
                }],
            );
            deferral = None;
            decided = Some((if approve { "allow" } else { "deny" }, Some(reason.clone())));
            if !approve {
                rejection = Some(Rejection::refused(
                    &call,
                    Phase::Denied,
                    "Denied by approver",
                    "denied_by_approver",
                    reason,
                ));
            }
        }

        let schemas = match self.inner.schemas.get(&tool) {
            Ok(schemas) => Some(schemas),
            Err(e) => {
                rejection.get_or_insert(Rejection::failed("invalid_tool_config", e.to_string()));
                None
            }
        };
        let args_value = Value::Object(args);
        // A declarative tool with a `validate` action checks its parameters
        // itself, so that its on_failure actions answer the model.
        let validates_itself = matches!(&tool.spec.backend, Backend::Actions(a) if a.actions.iter().any(|a| a.kind() == "validate"));
        if rejection.is_none() && !validates_itself {
            if let Err(e) = schemas
                .as_ref()
                .map_or(Ok(()), |s| s.check_input(&args_value))
            {
                rejection = Some(Rejection {
                    phase: Phase::Failed,
                    error: e,
                    answer: None,
                });
            }
        }
        let observability = &tool.spec.observability;
        call.spec.input = crate::execute::recorded_value(
            &args_value,
            observability.log_args,
            &observability.redact_fields,
        );
        call.status.input_withheld = call.spec.input != args_value;
        let args = match args_value {
            Value::Object(args) => args,
            _ => Map::new(),
        };

        let awaits_approval = deferral.is_some() && rejection.is_none();
        let durability = match intent {
            Intent::Now(durability) => durability,
            Intent::WhenSettled => Durability::Deferred,
        };
        let durability = match (&deferral, &rejection) {
            (Some(_), None) => {
                call.transition(Phase::AwaitingApproval)?;
                call.spec.approval = Some(CallApproval {
                    required: true,
                    status: Some("pending".to_owned()),
                    ..Default::default()
                });
                Durability::Sync
            }
            _ => durability,
        };
        call.status.replica.clone_from(&self.inner.config.replica);
        let store = &self.inner.store;
        let written_when_settled = intent == Intent::WhenSettled
            && key.is_none()
            && !awaits_approval
            && (rejection.is_some() || effects.is_repeatable());
        let created = match key {
            None if written_when_settled => Ok(()),
            None => store.create_object(&mut call, durability).await,
            Some(key) => {
                let window = self.idempotency_window(namespace).await?;
                let claim = idempotency::claim(&tool, key, &call.status.checksum, window);
                store
                    .create_object_claimed(&mut call, claim, durability)
                    .await
            }
        };
        match created {
            Ok(()) => {}
            Err(StoreError::KeyClaimed {
                call: holder,
                checksum,
            }) if checksum == call.status.checksum => {
                return Ok(Admission::KeyHeldBy(holder));
            }
            Err(StoreError::KeyClaimed { call: holder, .. }) => {
                return Err(EngineError::IdempotencyKeyReused { call: holder });
            }
            Err(e) => return Err(e.into()),
        }
        if let Some((action, reason)) = decided {
            self.emit_for(
                &call,
                "policy_decision",
                json!({"action": action, "reason": reason}),
            )
            .await?;
        }
        if let (Some(deferral), None) = (deferral, &rejection) {
            let approval = self.open_approval(&call, &tool, deferral).await?;
            let payload = json!({"approval": approval.metadata.name, "input": call.spec.input, "options": approval.spec.options});
            let reason = approval
                .spec
                .payload
                .get("reason")
                .cloned()
                .unwrap_or(Value::Null);
            self.emit_for(
                &call,
                "run_paused",
                json!({"reason": reason, "payload": payload}),
            )
            .await?;
        }
        Ok(Admission::New(Box::new(Recorded {
            call,
            tool,
            args,
            schemas,
            rejection,
            policies,
            facts,
        })))
    }

    /// Waits until the named call has settled and returns it.
    pub(crate) async fn wait_settled(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ToolCall, EngineError> {
        let mut settled = self.inner.settled.subscribe();
        loop {
            let call = self.key_holder(namespace, name).await?;
            if call.status.phase.is_terminal() {
                return Ok(call);
            }
            // A settle elsewhere in this process wakes us at once; the timer
            // covers a call settled by another process sharing the store.
            let _ = tokio::time::timeout(Duration::from_millis(500), settled.changed()).await;
        }
    }

    /// Reads the call holding an idempotency key. The store reports a claim
    /// as soon as it is applied, but a reader sees the holder only once its
    /// group commit lands, a moment later: a brief NotFound means "not yet".
    pub(crate) async fn key_holder(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ToolCall, EngineError> {
        let mut waited = Duration::ZERO;
        loop {
            match self.get_call(namespace, name).await {
                Err(EngineError::NotFound { .. }) if waited < Duration::from_secs(5) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    waited += Duration::from_millis(5);
                }
                other => return other,
            }
        }
    }
}

/// A hook-mode call comes through the hook endpoints, which hand it to the
/// agent; through the gateway nobody would run it.
fn gateway_only(call: &ToolCall) -> Result<(), EngineError> {
    if call.spec.mode == joch_core::CallMode::Hook {
        return Err(EngineError::BadRequest(
            "spec.mode hook: report calls the agent runs itself through /v1/hooks/aos or /v1/hooks/claude".to_owned(),
        ));
    }
    Ok(())
}

/// True when a policy reads `cost.*`, so the spend so far must be summed
/// for it (three indexed sums: not paid by namespaces that never ask).
/// Answered once per policy snapshot, not per call: it encodes the spec.
fn reads_spend(policy: &Policy) -> bool {
    serde_json::to_string(&policy.spec).is_ok_and(|text| text.contains("cost."))
}
