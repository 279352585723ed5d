//! Replay: run a recorded call again as a new call, or hand back its
//! recorded result. Gated as seed 000 says: idempotent reads replay freely,
//! non-idempotent writes need an explicit override.

use joch_core::{ObjectMeta, ObjectRef, Principal, Tool, ToolCall, ToolCallStatus};
use joch_store::Durability;
use serde::Deserialize;

use crate::Calls;
use crate::EngineError;
use crate::calls::CallOutcome;
use crate::clock::now;
use crate::policies::REPLAY_OVERRIDE_ANNOTATION;

/// How to replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReplayMode {
    /// Run the tool again with the recorded input.
    #[default]
    Execute,
    /// Run nothing: the new call carries the recorded outcome (to re-run an
    /// agent deterministically against recorded tool results).
    Record,
}

/// A replay request.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Replay {
    /// Execute or hand back the record.
    #[serde(default)]
    pub mode: ReplayMode,
    /// Needed to execute again a tool that is neither read-only nor idempotent.
    #[serde(default, rename = "override")]
    pub override_writes: bool,
}

impl Calls {
    /// Stores the replay already settled with the original's outcome; nothing runs.
    async fn replay_from_record(
        &self,
        by: &Principal,
        namespace: &str,
        mut call: ToolCall,
        original: &ToolCall,
    ) -> Result<CallOutcome, EngineError> {
        call.metadata.name = crate::clock::new_call_name();
        crate::resources::admit(namespace, &mut call, None)?;
        let at = now();
        call.status = ToolCallStatus {
            phase: original.status.phase,
            checksum: original.status.checksum.clone(),
            tool_version: original.status.tool_version.clone(),
            output: original.status.output.clone(),
            error: original.status.error.clone(),
            // The output may be a handle or media by reference: keep what it names.
            artifacts: original.status.artifacts.clone(),
            started_at: Some(at),
            completed_at: Some(at),
            principal: Some(by.reference()),
            ..ToolCallStatus::default()
        };
        call.spec.side_effects = original.spec.side_effects.clone().map(|mut s| {
            s.idempotency_key = None;
            s
        });
        self.inner
            .store
            .create_object(&mut call, Durability::Sync)
            .await?;
        Ok(CallOutcome {
            record: call,
            output: None,
            replayed: false,
            timings: None,
        })
    }
}

impl Calls {
    /// Replays a settled call as a new ToolCall linked by `spec.replayOf`.
    pub async fn replay(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        replay: Replay,
    ) -> Result<CallOutcome, EngineError> {
        crate::rules::may_in(by, namespace, &crate::rules::Action::ReplayCall)?;
        let original = self.record(namespace, name).await?;
        if !original.status.phase.is_terminal() {
            return Err(refused(
                joch_core::RefusalCode::ReplayNotPossible,
                format!("{name:?} has not settled yet"),
            ));
        }
        if !self
            .inner
            .visibility
            .sees_tool(by, namespace, original.tool_name())
            .await?
        {
            return Err(EngineError::NotFound {
                kind: crate::NotFoundKind::Tool,
                name: original.tool_name().to_owned(),
            });
        }
        if original.status.input_withheld {
            return Err(refused(
                joch_core::RefusalCode::ReplayNotPossible,
                format!(
                    "{name:?} cannot be replayed: its input was redacted or withheld from the record"
                ),
            ));
        }
        let mut call = ToolCall {
            metadata: ObjectMeta {
                labels: original.metadata.labels.clone(),
                ..ObjectMeta::default()
            },
            status: ToolCallStatus::default(),
            ..original.clone()
        };
        call.spec.replay_of = Some(ObjectRef::new(name));
        call.spec.side_effects = None; // a replay is a deliberate new execution: no key
        call.spec.approval = None;
        if replay.override_writes {
            // Policies see it as `override`, and the record shows it.
            call.metadata
                .annotations
                .insert(REPLAY_OVERRIDE_ANNOTATION.to_owned(), "true".to_owned());
        }

        match replay.mode {
            ReplayMode::Record => {
                self.replay_from_record(by, namespace, call, &original)
                    .await
            }
            ReplayMode::Execute => {
                let tool: Tool = self
                    .inner
                    .store
                    .get_object(namespace, original.tool_name())
                    .await?;
                if !tool.spec.side_effects.is_repeatable() && !replay.override_writes {
                    return Err(refused(
                        joch_core::RefusalCode::ReplayNotAllowed,
                        format!(
                            "{:?} is not read-only or idempotent: replaying it repeats its side effect; pass override to do so",
                            tool.metadata.name
                        ),
                    ));
                }
                self.call(by, namespace, call).await
            }
        }
    }
}

fn refused(code: joch_core::RefusalCode, message: String) -> EngineError {
    EngineError::Refused { code, message }
}
