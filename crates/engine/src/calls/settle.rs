//! The end of the call path: a call moves to its terminal phase and is
//! stored durably (the store appends its audit entry in the same write),
//! its event closes its timeline, and whoever waits on it is woken.

use joch_core::{CallError, EventKind, Phase, ToolCall};
use joch_store::Durability;
use serde_json::{Value, json};

use crate::calls::{CallOutcome, Rejection};
use crate::clock::now;
use crate::telemetry;
use crate::tracing_spans;
use crate::{Calls, EngineError};

impl Calls {
    /// Settles a call that will not run, telling the model why.
    pub(in crate::calls) async fn refuse(
        &self,
        mut call: ToolCall,
        rejection: Rejection,
    ) -> Result<CallOutcome, EngineError> {
        call.status.output = rejection.answer.clone();
        self.settle(
            call,
            rejection.phase,
            rejection.answer,
            Some(rejection.error),
            None,
        )
        .await
    }

    /// Moves the call to its terminal phase and stores it durably.
    /// `answer` is what the caller gets as output.
    pub(in crate::calls) async fn settle(
        &self,
        mut call: ToolCall,
        phase: Phase,
        answer: Option<Value>,
        error: Option<CallError>,
        latency_ms: Option<u64>,
    ) -> Result<CallOutcome, EngineError> {
        call.transition(phase)?;
        if let Some(error) = &error {
            tracing_spans::record_error(&error.code);
        }
        if self.inner.settings.trace_content {
            if let Some(answer) = &answer {
                tracing_spans::record_content("gen_ai.tool.call.result", answer);
            }
        }
        // Only a call in an execution has a timeline: the event copies the
        // output, which no other call should pay for.
        if call.spec.execution_ref.is_some() {
            let completed = json!({
                "source": if call.spec.replay_of.is_some() { "replay" } else { "execute" },
                "success": phase == Phase::Succeeded,
                // Events, like the record, name artifacts rather than hold them.
                "output": if call.status.artifacts.is_empty() { answer.as_ref() } else { call.status.output.as_ref() },
                "error": error.as_ref().map(|e| e.message.clone()),
            });
            self.inner
                .events
                .emit_for(&call, EventKind::ToolCompleted, completed)
                .await?;
        }
        call.status.completed_at = Some(now());
        call.status.latency_ms = latency_ms;
        call.status.error = error;
        self.store_settled(&mut call).await?;
        self.settled();
        telemetry::call_settled(
            &call,
            telemetry::call_labels(&self.inner.catalog, &call).await,
            phase,
            latency_ms,
        );
        tracing::info!(
            namespace = %call.metadata.namespace,
            tool = %call.tool_name(),
            call = %call.metadata.name,
            phase = %phase,
            latency_ms,
            "tool call settled"
        );
        Ok(CallOutcome {
            record: call,
            output: answer,
            replayed: false,
            timings: None,
        })
    }

    /// Stores a settled call, durably; the store appends its audit entry in
    /// the same write. Its first write, for a call written only once it
    /// settled (see `admission::Intent`).
    pub(in crate::calls) async fn store_settled(
        &self,
        call: &mut ToolCall,
    ) -> Result<(), EngineError> {
        let store = &self.inner.store;
        if call.metadata.resource_version.is_empty() {
            store.create_object(call, Durability::Sync).await?;
        } else {
            store.update_object(call, Durability::Sync).await?;
        }
        Ok(())
    }
}
