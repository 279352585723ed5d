//! The call path: record, validate, execute, settle.
//!
//! Durability rule: the write that immediately precedes a side effect is
//! synced, and so is the write that precedes an answer to the caller. Writes
//! commit in order, so syncing one makes all earlier ones durable too; every
//! other write may ride along unsynced. A read-only or idempotent call thus
//! costs one sync (its result), a risky call two (Running, then its result),
//! and both share each sync with every other call in flight (group commit).

use std::sync::Arc;
use std::time::Instant;

use joch_core::normalize::normalize_args;
use joch_core::redact::{REDACTED, redact_fields};
use joch_core::{
    Approval, CallError, CallSideEffects, Invocation, Phase, Tool, ToolCall, ToolCallStatus,
    checksum,
};
use joch_store::Durability;
use serde_json::{Map, Value};
use tracing::Instrument;

use crate::engine::now;
use crate::resources::admit;
use crate::schema::Compiled;
use crate::{Engine, EngineError};

/// A call that has settled (any terminal phase).
#[derive(Debug, Clone)]
pub struct Settled {
    /// The record, exactly as stored.
    pub record: ToolCall,
    /// The tool's output in full. The record may hold less: the tool's
    /// `observability` settings redact or drop it there, but the caller that
    /// made the call gets what the tool returned.
    pub output: Option<Value>,
}

impl Settled {
    /// The record with the full output: what the calling agent receives.
    pub fn into_response(self) -> ToolCall {
        let mut record = self.record;
        if self.output.is_some() {
            record.status.output = self.output;
        }
        record
    }
}

/// A recorded call, ready to run.
struct Recorded {
    call: ToolCall,
    tool: Tool,
    args: Map<String, Value>,
    schemas: Option<Arc<Compiled>>,
    /// Set when the call must not run; it will settle with this error.
    rejection: Option<(Phase, CallError)>,
}

impl Engine {
    /// Records a call, runs it and returns it settled. The answer is durable
    /// when this returns; the record was durable before the tool's side
    /// effect could happen.
    pub async fn call(&self, namespace: &str, call: ToolCall) -> Result<Settled, EngineError> {
        let recorded = self.record(namespace, call, Durability::Deferred).await?;
        self.run(recorded).await
    }

    /// Records a call durably (phase `Pending`) and returns that record at
    /// once; the call runs in the background and settles in the store.
    pub async fn submit(&self, namespace: &str, call: ToolCall) -> Result<ToolCall, EngineError> {
        let recorded = self.record(namespace, call, Durability::Sync).await?;
        let pending = recorded.call.clone();
        let engine = self.clone();
        tokio::spawn(async move {
            let name = recorded.call.metadata.name.clone();
            if let Err(e) = engine.run(recorded).await {
                tracing::error!(call = %name, error = %e, "background call could not be settled");
            }
        });
        Ok(pending)
    }

    /// Resolves the tool, normalises and checks the input, and stores the
    /// call as `Pending`.
    async fn record(
        &self,
        namespace: &str,
        mut call: ToolCall,
        durability: Durability,
    ) -> Result<Recorded, EngineError> {
        if call.metadata.name.is_empty() {
            call.metadata.name = uuid::Uuid::new_v4().to_string();
        }
        admit(namespace, &mut call, None)?;
        let tool: Tool = self
            .inner
            .store
            .get_object(namespace, call.tool_name())
            .await?;
        let effects = &tool.spec.side_effects;

        call.status = ToolCallStatus {
            tool_version: Some(tool.metadata.resource_version.clone()),
            ..Default::default()
        };
        let idempotency_key = call
            .spec
            .side_effects
            .take()
            .and_then(|s| s.idempotency_key);
        call.spec.side_effects = Some(CallSideEffects {
            level: effects.level,
            idempotent: effects.idempotent,
            idempotency_key,
        });
        if effects.requires_approval {
            call.spec.approval = Some(Approval {
                required: true,
                status: Some("pending".to_owned()),
                ..Default::default()
            });
        }

        let mut rejection = None;
        let args = match normalize_args(std::mem::take(&mut call.spec.input)) {
            Ok(args) => args,
            Err(e) => {
                rejection = Some((
                    Phase::Failed,
                    CallError::new("invalid_arguments", e.to_string()),
                ));
                Map::new()
            }
        };
        call.status.checksum = checksum(call.tool_name(), &args);
        let schemas = match self.inner.schemas.get(&tool) {
            Ok(schemas) => Some(schemas),
            Err(e) => {
                rejection.get_or_insert((
                    Phase::Failed,
                    CallError::new("invalid_tool_config", e.to_string()),
                ));
                None
            }
        };
        let args_value = Value::Object(args);
        if rejection.is_none() {
            if let Err(e) = schemas
                .as_ref()
                .map_or(Ok(()), |s| s.check_input(&args_value))
            {
                rejection = Some((Phase::Failed, e));
            }
        }
        if rejection.is_none() && effects.requires_approval {
            // Approvals are not wired in yet: never run a call that needs one.
            rejection = Some((
                Phase::Denied,
                CallError::new(
                    "approval_unavailable",
                    "the tool requires approval and no approval flow is configured",
                ),
            ));
        }
        call.spec.input = recorded_value(
            &args_value,
            tool.spec.observability.log_args,
            &tool.spec.observability.redact_fields,
        );
        let args = match args_value {
            Value::Object(args) => args,
            _ => Map::new(),
        };

        self.inner
            .store
            .create_object(&mut call, durability)
            .await?;
        Ok(Recorded {
            call,
            tool,
            args,
            schemas,
            rejection,
        })
    }

    /// Takes a recorded call to a terminal phase.
    async fn run(&self, recorded: Recorded) -> Result<Settled, EngineError> {
        let Recorded {
            mut call,
            tool,
            args,
            schemas,
            rejection,
        } = recorded;
        let span = tracing::info_span!("execute_tool", tool = %tool.metadata.name, call = %call.metadata.name);
        async move {
            if let Some((phase, error)) = rejection {
                return self.settle(call, phase, None, Some(error), None).await;
            }
            let Some(backend) = self.inner.backends.get(tool.spec.backend.kind()).cloned() else {
                let error = CallError::new(
                    "backend_unavailable",
                    format!("no {:?} backend is configured", tool.spec.backend.kind()),
                );
                return self
                    .settle(call, Phase::Failed, None, Some(error), None)
                    .await;
            };

            call.transition(Phase::Running)?;
            call.status.attempts += 1;
            call.status.started_at = Some(now());
            let durability = if tool.spec.side_effects.is_repeatable() {
                Durability::Deferred
            } else {
                Durability::Sync
            };
            self.inner
                .store
                .update_object(&mut call, durability)
                .await?;

            let started = Instant::now();
            let invocation = Invocation {
                namespace: &call.metadata.namespace,
                call_id: &call.metadata.name,
                tool: &tool,
                args: &args,
                checksum: &call.status.checksum,
                attempt: call.status.attempts,
            };
            let result = backend.invoke(invocation).await;
            let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);

            let (phase, output, error) = match result {
                Ok(output) => match schemas.as_ref().map_or(Ok(()), |s| s.check_output(&output)) {
                    Ok(()) => (Phase::Succeeded, Some(output), None),
                    Err(e) => (Phase::Failed, Some(output), Some(e)),
                },
                Err(e) => (Phase::Failed, None, Some(e)),
            };
            let observability = &tool.spec.observability;
            call.status.output = output
                .as_ref()
                .map(|o| recorded_value(o, observability.log_result, &observability.redact_fields));
            self.settle(call, phase, output, error, Some(latency_ms))
                .await
        }
        .instrument(span)
        .await
    }

    /// Moves the call to its terminal phase and stores it durably.
    async fn settle(
        &self,
        mut call: ToolCall,
        phase: Phase,
        output: Option<Value>,
        error: Option<CallError>,
        latency_ms: Option<u64>,
    ) -> Result<Settled, EngineError> {
        call.transition(phase)?;
        call.status.completed_at = Some(now());
        call.status.latency_ms = latency_ms;
        call.status.error = error;
        self.inner
            .store
            .update_object(&mut call, Durability::Sync)
            .await?;
        tracing::debug!(phase = %phase, latency_ms, "tool call settled");
        Ok(Settled {
            record: call,
            output,
        })
    }
}

/// What of a value the record keeps: all of it, with named fields redacted,
/// or only the marker that it was withheld.
fn recorded_value(value: &Value, keep: bool, redact: &[String]) -> Value {
    if !keep {
        return Value::String(REDACTED.to_owned());
    }
    let mut value = value.clone();
    redact_fields(&mut value, redact);
    value
}
