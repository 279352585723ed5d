//! The back of the call path: run the backend, apply the result hook, and
//! hand the result to `settle.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use joch_core::artifact::is_media_type;
use joch_core::{
    Backend, CallError, CallMode, ErrorCode, Hook, Invocation, Phase, Policy, Tool, ToolCall,
    ToolOutput,
};
use joch_store::Durability;
use joch_store::timing::{self, Stage};
use serde_json::Value;
use tracing::Instrument;

use crate::calls::cancels::{MCP_GRACE, Running};
use crate::calls::hooks::refusal;
use crate::calls::prepare::Prepared;
use crate::calls::{CallOutcome, Recorded};
use crate::catalog::schema::Compiled;
use crate::clock::now;
use crate::policies::{self, Effect, Facts};
use crate::telemetry;
use crate::tracing_spans;
use crate::{Calls, EngineError};
use joch_core::redact::recorded_value;

/// What the backend gave, and how long it took.
struct Invoked {
    result: Result<Value, CallError>,
    latency_ms: u64,
    /// The media type of a result that came as text, not JSON.
    text_type: Option<String>,
}

/// What settling a result needs besides the call and the tool.
pub(in crate::calls) struct Concluding<'a> {
    pub(in crate::calls) schemas: Option<&'a Compiled>,
    pub(in crate::calls) policies: &'a Arc<Vec<Policy>>,
    pub(in crate::calls) facts: Option<&'a Facts>,
    /// A failed declarative tool still answers the model (its `on_failure`).
    pub(in crate::calls) answers_on_failure: bool,
    pub(in crate::calls) latency_ms: Option<u64>,
    /// The media type of a result that came as text, not JSON (JSON lines,
    /// CSV), for the artifact it may become.
    pub(in crate::calls) text_type: Option<String>,
}

impl Calls {
    /// Takes a recorded call (`Pending`, `AwaitingApproval` once approved,
    /// or `Running` after a crash) to a terminal phase.
    /// Runs within the caller's `execute_tool` span (see `tracing_spans`).
    pub(in crate::calls) async fn run(
        &self,
        recorded: Recorded,
    ) -> Result<CallOutcome, EngineError> {
        let meta = &recorded.call.metadata;
        let (namespace, name) = (meta.namespace.clone(), meta.name.clone());
        let outcome = self.run_recorded(recorded).await;
        // The store went away mid-call: its record may be left unfinished.
        // Not so for a conflict: another carried the same decision out first
        // (two retries, a decider and recovery), and that one settles it.
        if let Err(EngineError::Store(e)) = &outcome
            && e.kind() != joch_store::StoreErrorKind::Conflict
        {
            self.reconcile_when_back(namespace, name);
        }
        outcome
    }

    async fn run_recorded(&self, recorded: Recorded) -> Result<CallOutcome, EngineError> {
        tracing_spans::record_tool(&recorded.tool);
        if self.inner.settings.trace_content {
            tracing_spans::record_content(
                "gen_ai.tool.call.arguments",
                &Value::Object(recorded.args.clone()),
            );
        }
        let Recorded {
            mut call,
            tool,
            args,
            schemas,
            rejection,
            policies,
            facts,
        } = recorded;
        if let Some(rejection) = rejection {
            return self.refuse(call, rejection).await;
        }
        if call.spec.mode == CallMode::Hook {
            return self.hand_over(call).await;
        }
        // Registered before it runs: a cancel heard meanwhile stops it.
        let running = self.running(&call);
        if *running.watch().borrow() {
            let error =
                CallError::new(ErrorCode::Cancelled, "the call was cancelled before it ran");
            return self
                .settle(call, Phase::Failed, None, Some(error), None)
                .await;
        }
        let prepared = match self.prepare(&tool, &call).await? {
            Ok(prepared) => prepared,
            Err(error) => {
                return self
                    .settle(call, Phase::Failed, None, Some(error), None)
                    .await;
            }
        };
        let written = self.mark_running(&mut call, &tool).await?;
        let invoked = self
            .invoke(&mut call, &tool, &args, &prepared, written, &running)
            .await;
        drop(running);
        // The upstream asked the client: the call waits for its answers (`rounds.rs`).
        if let Err(asked) = &invoked.result
            && asked.code == ErrorCode::InputRequired.as_str()
        {
            return self.park(call, &tool, asked.clone()).await;
        }
        Self::keep_answers(&mut call, &tool);
        if prepared.actions.is_some() {
            // A declarative tool reports its state changes in its result, even a failed one.
            let reported = match &invoked.result {
                Ok(output) => Some(output),
                Err(failure) => failure.details.as_ref(),
            };
            if let Some(reported) = reported {
                self.persist_actions_outcome(&call, reported).await?;
            }
        }
        self.conclude(
            call,
            &tool,
            Concluding {
                schemas: schemas.as_deref(),
                policies: &policies,
                facts: facts.as_ref(),
                answers_on_failure: prepared.actions.is_some(),
                latency_ms: Some(invoked.latency_ms),
                text_type: invoked.text_type,
            },
            invoked.result,
        )
        .await
    }

    /// Marks the call `Running` (its next attempt, for one recovered after a
    /// crash) and writes that if the call is already written, or if its
    /// side effect must not repeat (its first write then: see
    /// `admission::Intent`), synced before that side effect. Returns
    /// whether it is written.
    async fn mark_running(&self, call: &mut ToolCall, tool: &Tool) -> Result<bool, EngineError> {
        if call.status.phase != Phase::Running {
            call.transition(Phase::Running)?;
        }
        call.status.attempts += 1;
        call.status.started_at = Some(now());
        call.status.replica.clone_from(&self.inner.settings.replica);
        let durability = if tool.spec.side_effects.is_repeatable() {
            Durability::Deferred
        } else {
            Durability::Sync
        };
        let written = !call.metadata.resource_version.is_empty();
        if written {
            self.inner.store.update_object(call, durability).await?;
        } else if durability == Durability::Sync {
            self.inner.store.create_object(call, durability).await?;
            return Ok(true);
        }
        Ok(written)
    }

    /// Runs the backend, relaying its chunks, and reads its output.
    async fn invoke(
        &self,
        call: &mut ToolCall,
        tool: &Tool,
        args: &serde_json::Map<String, Value>,
        prepared: &Prepared,
        written: bool,
        running: &Running,
    ) -> Invoked {
        let started = Instant::now();
        let relay = self.relay_chunks(call);
        let client = matches!(tool.spec.backend, Backend::Mcp(_))
            .then(|| self.inner.mcp.call_client(call, tool, running.watch()));
        let invocation = Invocation {
            namespace: &call.metadata.namespace,
            call_id: &call.metadata.name,
            tool,
            args,
            checksum: &call.status.checksum,
            attempt: call.status.attempts,
            idempotency_key: call
                .spec
                .side_effects
                .as_ref()
                .and_then(|s| s.idempotency_key.as_deref()),
            actions: prepared.actions.as_ref(),
            mcp_server: prepared.mcp_server.as_ref(),
            chunks: relay
                .as_ref()
                .map(|relay| relay as &dyn joch_core::OutputChunks),
            client: client.as_ref(),
            upstream_user: call.status.upstream_user.as_deref(),
            input: call
                .status
                .input_required
                .as_ref()
                .filter(|round| round.responses.is_some()),
        };
        let kind = prepared.kind;
        let invoke = (prepared.backend)
            .invoke_output(invocation)
            .instrument(tracing::info_span!("backend", backend = kind));
        // An MCP backend tells its server of a cancel and ends by itself;
        // any other's request is dropped.
        let grace = if client.is_some() {
            MCP_GRACE
        } else {
            Duration::ZERO
        };
        let invoke = until_cancelled(invoke, running, grace);
        timing::enter(Stage::Backend);
        let (result, version) = if written {
            (invoke.await, None)
        } else {
            self.invoke_unwritten(call, invoke).await
        };
        timing::enter(Stage::Settle);
        if let Some(version) = version {
            call.metadata.resource_version = version;
        }
        let (result, text_type) = match result.map(output_value) {
            Ok((value, text_type)) => (Ok(value), text_type),
            Err(e) => (Err(e), None),
        };
        let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if let Some(relay) = relay {
            // Every chunk event lands before the call's completion does.
            relay.finish().await;
        }
        telemetry::backend_latency(
            kind,
            &tool.metadata.name,
            started.elapsed().as_secs_f64() * 1000.0,
        );
        Invoked {
            result,
            latency_ms,
            text_type,
        }
    }

    /// Runs the backend of a call not yet written (see `admission::Intent`): a
    /// call still running after `intent_grace` is written as `Running` then,
    /// unsynced (its tool may run twice), so it can be seen while it runs
    /// and recovered after a crash. Returns the written version, if any.
    async fn invoke_unwritten<T>(
        &self,
        call: &ToolCall,
        invoke: impl Future<Output = T>,
    ) -> (T, Option<String>) {
        let mut invoke = std::pin::pin!(invoke);
        tokio::select! {
            biased;
            done = &mut invoke => return (done, None),
            () = tokio::time::sleep(self.inner.settings.intent_grace) => {}
        }
        let mut running = call.clone();
        let write = self
            .inner
            .store
            .create_object(&mut running, Durability::Deferred);
        let (done, written) = tokio::join!(invoke, write);
        match written {
            Ok(()) => (done, Some(running.metadata.resource_version)),
            Err(e) => {
                // The settled record is written regardless; this one only
                // made the call visible early.
                tracing::warn!(call = %call.metadata.name, error = %e, "the running call's record was not written");
                (done, None)
            }
        }
    }

    /// Settles a call with its tool's result (from a backend, or reported by
    /// the agent in hook mode): output schema, then the result hook, then
    /// the record, redacted as the tool's `observability` says.
    pub(in crate::calls) async fn conclude(
        &self,
        mut call: ToolCall,
        tool: &Tool,
        how: Concluding<'_>,
        result: Result<Value, CallError>,
    ) -> Result<CallOutcome, EngineError> {
        let (mut phase, mut output, mut error) = match result {
            Ok(output) => match how.schemas.map_or(Ok(()), |s| {
                s.check_output(&output, matches!(tool.spec.backend, Backend::Mcp(_)))
            }) {
                Ok(()) => (Phase::Succeeded, Some(output), None),
                Err(e) => (Phase::Failed, Some(output), Some(e)),
            },
            // A failed action chain still answers the model (its on_failure response).
            Err(e) if how.answers_on_failure => (Phase::Failed, e.details.clone(), Some(e)),
            Err(e) => (Phase::Failed, None, Some(e)),
        };
        // It ran, so it cost: priced on what the tool returned, before any
        // policy changes it.
        call.status.cost = tool
            .spec
            .cost
            .as_ref()
            .map(|price| price.of(output.as_ref()));
        let observability = &tool.spec.observability;
        let mut answer = output.clone();

        if let (Phase::Succeeded, Some(result), Some(facts)) = (phase, &mut output, how.facts) {
            let (result_facts, found) = facts.for_result(result);
            call.status.detections.extend(found);
            let span = tracing::info_span!("evaluate_policies", hook = "toolCallResult");
            let outcome = policies::decide_apart(
                self.inner.policies.engine(),
                how.policies,
                Hook::Result,
                &Arc::new(result_facts),
                span,
            )
            .await;
            telemetry::record_decisions(&mut call, outcome.records(Hook::Result));
            match outcome.winner().map(|w| (w, &w.verdict.effect)) {
                Some((_, Effect::Allow)) | None => {}
                Some((_, Effect::Modify(_))) => {
                    let detectors = facts.detectors.as_deref();
                    crate::policies::apply_patches(result, &outcome.patches(), detectors);
                    answer = Some(result.clone());
                }
                // Deny, or anything that would need a person after the fact:
                // what ran stays on the record, the caller gets a refusal.
                Some((w, _)) => {
                    let reason =
                        w.verdict.reason.clone().unwrap_or_else(|| {
                            format!("output withheld by policy {}", w.policy_id)
                        });
                    phase = Phase::Denied;
                    answer = Some(refusal(&call, "Denied by policy", Some(&reason)));
                    error = Some(CallError::new(ErrorCode::OutputDeniedByPolicy, reason));
                }
            }
        }
        // A successful result may be kept as artifacts: media by reference,
        // a result not to be inlined as a handle (which the caller gets).
        let mut kept = output;
        if let Some(result) = answer.take_if(|_| phase == Phase::Succeeded) {
            let spooled = self
                .inner
                .artifacts
                .spool(&mut call, tool, result, how.text_type.as_deref())
                .await?;
            if let Some(recorded) = spooled.recorded {
                kept = Some(recorded);
            }
            answer = Some(spooled.answer);
        }
        // What the tool said reaches the model in an envelope when the tool
        // is untrusted; a refusal by policy is joch's own text.
        if let Some(result) = answer.take_if(|_| phase != Phase::Denied) {
            answer = Some(self.inner.policies.envelop(&mut call, tool, result).await?);
        }
        call.status.output =
            kept.map(|o| recorded_value(o, observability.log_result, &observability.redact_fields));
        self.settle(call, phase, answer, error, how.latency_ms)
            .await
    }
}

/// The backend's answer, or the cancelled call's failure once the call is
/// cancelled and `grace` has passed (an MCP backend tells its server and
/// ends by itself within it; any other's request is dropped at once).
async fn until_cancelled<T>(
    invoke: impl Future<Output = Result<T, CallError>>,
    running: &Running,
    grace: Duration,
) -> Result<T, CallError> {
    tokio::select! {
        biased;
        done = invoke => done,
        () = async {
            running.cancelled().await;
            tokio::time::sleep(grace).await;
        } => Err(Running::failure()),
    }
}

/// A tool's output as the call's result: JSON as it is, media as an
/// artifact's reference, other text (JSON lines, CSV, logs) as a string,
/// with its media type.
fn output_value(output: ToolOutput) -> (Value, Option<String>) {
    match output {
        ToolOutput::Json(value) => (value, None),
        ToolOutput::Bytes { media_type, bytes } if is_media_type(&media_type) => {
            (crate::artifacts::media_result(&media_type, &bytes), None)
        }
        ToolOutput::Bytes { media_type, bytes } => (
            Value::String(String::from_utf8_lossy(&bytes).into_owned()),
            Some(media_type),
        ),
    }
}
