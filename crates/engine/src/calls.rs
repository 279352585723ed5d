//! The call path: record, validate, execute, settle.
//!
//! Durability rule: the write that immediately precedes a side effect is
//! synced, and so is the write that precedes an answer to the caller. Writes
//! commit in order, so syncing one makes all earlier ones durable too; every
//! other write may ride along unsynced. A read-only or idempotent call thus
//! costs one sync (its result), a risky call two (Running, then its result),
//! and both share each sync with every other call in flight (group commit).

use std::sync::Arc;
use std::time::{Duration, Instant};

use joch_core::normalize::normalize_args;
use joch_core::redact::{REDACTED, redact_fields};
use joch_core::{
    CallApproval, CallError, CallSideEffects, Invocation, Phase, Tool, ToolCall, ToolCallStatus,
    checksum,
};
use joch_store::{Durability, StoreError};
use serde_json::{Map, Value};
use tracing::Instrument;

use crate::engine::now;
use crate::idempotency;
use crate::resources::admit;
use crate::schema::Compiled;
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

    fn replay(record: ToolCall) -> Self {
        Self {
            record,
            output: None,
            replayed: true,
        }
    }
}

/// A recorded call, ready to run.
pub(crate) struct Recorded {
    pub(crate) call: ToolCall,
    pub(crate) tool: Tool,
    pub(crate) args: Map<String, Value>,
    pub(crate) schemas: Option<Arc<Compiled>>,
    /// Set when the call must not run; it will settle with this error.
    pub(crate) rejection: Option<(Phase, CallError)>,
}

/// Either a new record, or the call already holding the idempotency key.
enum Admission {
    New(Box<Recorded>),
    KeyHeldBy(String),
}

impl Engine {
    /// Records a call, runs it and returns it settled. The answer is durable
    /// when this returns; the record was durable before the tool's side
    /// effect could happen. A call whose idempotency key is held by an
    /// earlier call with the same arguments returns that call, once settled,
    /// without running anything.
    pub async fn call(&self, namespace: &str, call: ToolCall) -> Result<CallOutcome, EngineError> {
        match self.record(namespace, call, Durability::Deferred).await? {
            Admission::New(recorded) => self.run(*recorded).await,
            Admission::KeyHeldBy(holder) => Ok(CallOutcome::replay(
                self.wait_settled(namespace, &holder).await?,
            )),
        }
    }

    /// Records a call durably (phase `Pending`) and returns that record at
    /// once; the call runs in the background and settles in the store. If
    /// its idempotency key is held by a settled call, that call is returned;
    /// by an unsettled one, `IdempotencyKeyInUse`.
    pub async fn submit(
        &self,
        namespace: &str,
        call: ToolCall,
    ) -> Result<CallOutcome, EngineError> {
        let recorded = match self.record(namespace, call, Durability::Sync).await? {
            Admission::New(recorded) => *recorded,
            Admission::KeyHeldBy(holder) => {
                let existing = self.get_call(namespace, &holder).await?;
                if !existing.status.phase.is_terminal() {
                    return Err(EngineError::IdempotencyKeyInUse { call: holder });
                }
                return Ok(CallOutcome::replay(existing));
            }
        };
        let pending = recorded.call.clone();
        let engine = self.clone();
        tokio::spawn(async move {
            let name = recorded.call.metadata.name.clone();
            if let Err(e) = engine.run(recorded).await {
                tracing::error!(call = %name, error = %e, "background call could not be settled");
            }
        });
        Ok(CallOutcome {
            record: pending,
            output: None,
            replayed: false,
        })
    }

    /// Resolves the tool, normalises and checks the input, claims the
    /// idempotency key, and stores the call as `Pending`.
    async fn record(
        &self,
        namespace: &str,
        mut call: ToolCall,
        durability: Durability,
    ) -> Result<Admission, EngineError> {
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
        let key = idempotency::key_of(&call, &tool, &args)?;

        call.status = ToolCallStatus {
            checksum: checksum(call.tool_name(), &args),
            tool_version: Some(tool.metadata.resource_version.clone()),
            ..Default::default()
        };
        call.spec.side_effects = Some(CallSideEffects {
            level: effects.level,
            idempotent: effects.idempotent,
            idempotency_key: key.clone(),
        });
        if effects.requires_approval {
            call.spec.approval = Some(CallApproval {
                required: true,
                status: Some("pending".to_owned()),
                ..Default::default()
            });
        }
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
        let args = Value::Object(args);
        if rejection.is_none() {
            if let Err(e) = schemas.as_ref().map_or(Ok(()), |s| s.check_input(&args)) {
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
        let observability = &tool.spec.observability;
        call.spec.input =
            recorded_value(&args, observability.log_args, &observability.redact_fields);
        call.status.input_withheld = call.spec.input != args;
        let args = match args {
            Value::Object(args) => args,
            _ => Map::new(),
        };

        let store = &self.inner.store;
        let created = match key {
            None => store.create_object(&mut call, durability).await,
            Some(key) => {
                let window = self.inner.config.idempotency_window;
                let claim = idempotency::claim(&tool, key, &call.status.checksum, window);
                store
                    .create_object_claimed(&mut call, claim, durability)
                    .await
            }
        };
        match created {
            Ok(()) => Ok(Admission::New(Box::new(Recorded {
                call,
                tool,
                args,
                schemas,
                rejection,
            }))),
            Err(StoreError::KeyClaimed {
                call: holder,
                checksum,
            }) if checksum == call.status.checksum => Ok(Admission::KeyHeldBy(holder)),
            Err(StoreError::KeyClaimed { call: holder, .. }) => {
                Err(EngineError::IdempotencyKeyReused { call: holder })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Waits until the named call has settled and returns it.
    async fn wait_settled(&self, namespace: &str, name: &str) -> Result<ToolCall, EngineError> {
        let mut settled = self.inner.settled.subscribe();
        loop {
            let call = self.get_call(namespace, name).await?;
            if call.status.phase.is_terminal() {
                return Ok(call);
            }
            // A settle elsewhere in this process wakes us at once; the timer
            // covers a call settled by another process sharing the store.
            let _ = tokio::time::timeout(Duration::from_millis(500), settled.changed()).await;
        }
    }

    /// Takes a recorded call to a terminal phase.
    pub(crate) async fn run(&self, recorded: Recorded) -> Result<CallOutcome, EngineError> {
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
            let kind = tool.spec.backend.kind();
            let Some(backend) = self.inner.backends.get(kind).cloned() else {
                let error = CallError::new(
                    "backend_unavailable",
                    format!("no {kind:?} backend is configured"),
                );
                return self
                    .settle(call, Phase::Failed, None, Some(error), None)
                    .await;
            };

            // A call recovered after a crash is already Running: this is its next attempt.
            if call.status.phase != Phase::Running {
                call.transition(Phase::Running)?;
            }
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
                idempotency_key: call
                    .spec
                    .side_effects
                    .as_ref()
                    .and_then(|s| s.idempotency_key.as_deref()),
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
    pub(crate) async fn settle(
        &self,
        mut call: ToolCall,
        phase: Phase,
        output: Option<Value>,
        error: Option<CallError>,
        latency_ms: Option<u64>,
    ) -> Result<CallOutcome, EngineError> {
        call.transition(phase)?;
        call.status.completed_at = Some(now());
        call.status.latency_ms = latency_ms;
        call.status.error = error;
        self.inner
            .store
            .update_object(&mut call, Durability::Sync)
            .await?;
        self.inner.settled.send_modify(|n| *n = n.wrapping_add(1));
        tracing::debug!(phase = %phase, latency_ms, "tool call settled");
        Ok(CallOutcome {
            record: call,
            output,
            replayed: false,
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
