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

use joch_core::normalize::normalize_args;
use joch_core::{
    Backend, CallApproval, CallMode, CallSideEffects, Hook, HookDecision, Object, Phase, Policy,
    Principal, ToolCall, ToolCallStatus, checksum,
};
use joch_store::{Durability, StoreError};
use serde_json::{Map, Value, json};

use crate::approvals::Deferral;
use crate::calls::{Recorded, Rejection};
use crate::detections;
use crate::hooks::REPLAY_OVERRIDE_ANNOTATION;
use crate::idempotency;
use crate::mcp::SCHEMA_DRIFT_POLICY;
use crate::policy::{self, Effect, Facts};
use crate::resources::admit;
use crate::rules;
use crate::telemetry;
use crate::{Engine, EngineError};

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
    /// Resolves the tool, normalises the input, runs the request hook,
    /// checks the input, claims the idempotency key, and stores the call
    /// (`Pending`, or `AwaitingApproval` with its Approval).
    pub(crate) async fn record(
        &self,
        by: &Principal,
        namespace: &str,
        mut call: ToolCall,
        intent: Intent,
        skip: Option<&str>,
    ) -> Result<Admission, EngineError> {
        rules::acts_in(by, namespace)?;
        let minted = call.metadata.name.is_empty();
        if minted {
            call.metadata.name = crate::engine::new_call_name();
            crate::tracing_spans::record_call_id(&call.metadata.name);
        }
        // Set by the store when it writes the call: empty means not yet written.
        call.metadata.resource_version.clear();
        admit(namespace, &mut call, None)?;
        // Only joch marks a call as an artifact tool's (see artifact_tools.rs).
        call.spec.from_artifact_tool = false;
        let tool = self.resolve_tool(namespace, &call).await?;
        let effects = tool.spec.side_effects.clone();

        let mut rejection = None;
        // What the caller sent, kept for the record when it is no object.
        let mut as_sent = None;
        let mut args = match std::mem::take(&mut call.spec.input) {
            Value::Object(args) => args,
            other => match normalize_args(other.clone()) {
                Ok(args) => args,
                Err(e) => {
                    rejection = Some(Rejection::failed("invalid_arguments", e.to_string()));
                    as_sent = Some(other);
                    Map::new()
                }
            },
        };
        let key = idempotency::key_of(&call, &tool, &args)?;
        call.status = ToolCallStatus {
            checksum: checksum(call.tool_name(), &args),
            // An unregistered tool (hook mode) has no version.
            tool_version: Some(tool.metadata.resource_version.clone()).filter(|v| !v.is_empty()),
            principal: Some(by.reference()),
            ..Default::default()
        };
        if !rules::sees(by, &tool) {
            if call.spec.mode != CallMode::Hook {
                return Err(self.refuse_unseen(call, args).await);
            }
            // A hook's caller runs the tool itself: it is told no, as for a
            // tool joch does not know, so that it does not run it.
            rejection.get_or_insert(unseen(&call));
        }
        call.spec.side_effects = Some(CallSideEffects {
            level: effects.level,
            idempotent: effects.idempotent,
            idempotency_key: key.clone(),
        });

        if let Some(reason) = skip {
            rejection.get_or_insert(Rejection::skipped(&call, reason.to_owned()));
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
                        shadow: false,
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
            let detectors = self.detectors(namespace, &policies).await?;
            let found = request.detect_input(detectors);
            call.status.detections.extend(found);
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
                        let detectors = request.detectors.as_deref();
                        let mut original = Value::Object(args.clone());
                        // The input as sent is kept, but not the spans a
                        // policy redacted: the record must not hold them.
                        detections::redact_detected(&mut original, &patches, detectors);
                        call.status.original_input = Some(original);
                        let mut patched = Value::Object(std::mem::take(&mut args));
                        detections::apply_patches(&mut patched, &patches, detectors);
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
                    shadow: false,
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
                if deferral.take().is_some() {
                    not_sent_for_approval(&mut call);
                }
                rejection = Some(Rejection {
                    phase: Phase::Failed,
                    answer: Some(crate::schema::invalid_arguments_answer(
                        &call.metadata.name,
                        &e,
                    )),
                    error: e,
                });
            }
        }
        let observability = &tool.spec.observability;
        let sent_no_object = as_sent.is_some();
        call.spec.input = crate::execute::recorded_value(
            as_sent.unwrap_or_else(|| args_value.clone()),
            observability.log_args,
            &observability.redact_fields,
        );
        call.status.input_withheld = match sent_no_object {
            true => !observability.log_args,
            false => call.spec.input != args_value,
        };
        let args = match args_value {
            Value::Object(args) => args,
            _ => Map::new(),
        };

        let awaits_approval = deferral.is_some() && rejection.is_none();
        // A paused call is synced: a person may take hours over it.
        let durability = match intent {
            _ if awaits_approval => Durability::Sync,
            Intent::Now(durability) => durability,
            Intent::WhenSettled => Durability::Deferred,
        };
        if awaits_approval {
            call.transition(Phase::AwaitingApproval)?;
            call.spec.approval = Some(CallApproval {
                required: true,
                status: Some("pending".to_owned()),
                ..Default::default()
            });
        }
        call.status.replica.clone_from(&self.inner.config.replica);
        let store = &self.inner.store;
        let written_when_settled = intent == Intent::WhenSettled
            && key.is_none()
            && !awaits_approval
            && (rejection.is_some() || effects.is_repeatable())
            // A name the caller chose may be taken: refused before anything runs.
            && (minted || self.name_is_free(&call).await?);
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
}

/// True when a policy reads `cost.*`, so the spend so far must be summed
/// for it (three indexed sums: not paid by namespaces that never ask).
/// Answered once per policy snapshot, not per call: it encodes the spec.
fn reads_spend(policy: &Policy) -> bool {
    serde_json::to_string(&policy.spec).is_ok_and(|text| text.contains("cost."))
}

impl Engine {
    async fn name_is_free(&self, call: &ToolCall) -> Result<bool, EngineError> {
        let taken = self
            .inner
            .store
            .get(
                ToolCall::KIND,
                &call.metadata.namespace,
                &call.metadata.name,
            )
            .await;
        match taken {
            Ok(_) => Ok(false),
            Err(StoreError::NotFound { .. }) => Ok(true),
            Err(e) => Err(e.into()),
        }
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
        "tool_not_found",
        format!("no tool {:?} in this namespace", call.tool_name()),
    )
}

impl Engine {
    /// Records a gateway call of a tool the principal may not see as
    /// refused (so the ledger shows the attempt and who made it) and
    /// answers as for a tool that does not exist.
    async fn refuse_unseen(&self, mut call: ToolCall, args: Map<String, Value>) -> EngineError {
        let not_found = EngineError::NotFound {
            kind: "Tool".to_owned(),
            name: call.tool_name().to_owned(),
        };
        call.spec.input = Value::Object(args);
        let refusal = unseen(&call);
        call.status.replica.clone_from(&self.inner.config.replica);
        call.status.error = Some(refusal.error);
        call.status.completed_at = Some(crate::engine::now());
        if let Err(e) = call.transition(Phase::Denied) {
            return e.into();
        }
        match self.store_settled(&mut call).await {
            Ok(()) => not_found,
            Err(e) => e,
        }
    }
}
