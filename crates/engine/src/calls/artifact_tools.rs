//! The forged artifact tools' calls (`artifact_grep` and its siblings,
//! which the artifacts part runs): recorded, settled, audited like any
//! call, but past no request policy, approval or idempotency key, since
//! they read what the caller already received.

use joch_core::artifact_tools::is_artifact_tool;
use joch_core::normalize::normalize_args;
use joch_core::{Phase, Principal, ToolCall, checksum};
use joch_store::Durability;
use serde_json::Value;

use crate::Calls;
use crate::EngineError;
use crate::calls::CallOutcome;
use crate::resources::admit;

impl Calls {
    /// Runs an artifact tool as a recorded call (`spec.fromArtifactTool:
    /// true`), as `by` ([`call`](Self::call) runs one too). Its answer is a bounded plain value; a `callId` that is not
    /// a visible handle of the call's execution settles the call `Failed`.
    pub async fn call_artifact_tool(
        &self,
        by: &Principal,
        namespace: &str,
        mut call: ToolCall,
    ) -> Result<CallOutcome, EngineError> {
        crate::rules::may_in(by, namespace, &crate::rules::Action::CallTool)?;
        let tool = call.tool_name().to_owned();
        if !is_artifact_tool(&tool) {
            return Err(EngineError::NotFound {
                kind: crate::NotFoundKind::Tool,
                name: tool,
            });
        }
        let Some(execution) = call.spec.execution_ref.as_ref().map(|r| r.name.clone()) else {
            return Err(EngineError::Misdirected(format!(
                "{tool} reads the handles of one execution: give spec.executionRef"
            )));
        };
        if call.metadata.name.is_empty() {
            call.metadata.name = crate::clock::new_call_name();
        }
        admit(namespace, &mut call, None)?;
        let args = normalize_args(std::mem::take(&mut call.spec.input))
            .map_err(|e| EngineError::Misdirected(e.to_string()))?;
        call.spec.input = Value::Object(args.clone());
        call.spec.from_artifact_tool = true;
        call.spec.inline = None;
        call.status = joch_core::ToolCallStatus {
            checksum: checksum(&tool, &args),
            phase: Phase::Running,
            attempts: 1,
            started_at: Some(crate::clock::now()),
            principal: Some(by.reference()),
            ..Default::default()
        };
        self.inner
            .store
            .create_object(&mut call, Durability::Deferred)
            .await?;

        let result = self
            .inner
            .artifacts
            .run_tool(by, namespace, &execution, &tool, &args)
            .await?;
        match result {
            Ok(answer) => {
                call.status.output = Some(answer.clone());
                self.settle(call, Phase::Succeeded, Some(answer), None, Some(0))
                    .await
            }
            Err(error) => {
                self.settle(call, Phase::Failed, None, Some(error), None)
                    .await
            }
        }
    }
}
