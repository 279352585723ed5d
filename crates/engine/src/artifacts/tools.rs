//! The forged artifact tools as recorded calls: `artifact_grep` and its
//! siblings read the handle of another call of the same execution.
//!
//! Visibility: an execution's calls whose result is a handle, that are not
//! themselves artifact-tool calls. That set is the `callId` enum offered to
//! models, and the only calls an artifact tool may read; a `callId` outside
//! it is refused, and the refusal recorded, so tools cannot be stacked.
//! Artifact tools read what the caller already received, so they skip the
//! request policies, approvals and idempotency of the normal call path.

use joch_core::artifact_tools::{self, is_artifact_tool};
use joch_core::normalize::normalize_args;
use joch_core::{CallError, ErrorCode, ObjectRef, Phase, Principal, ToolCall, checksum};
use joch_store::{Durability, ListQuery};
use serde_json::Value;

use crate::Artifacts;
use crate::calls::CallOutcome;
use crate::catalog::admit;
use crate::{Engine, EngineError};

/// Most calls of one execution an enum offers (the newest are kept).
const MAX_VISIBLE: usize = 200;

impl Engine {
    /// The handle `args.callId` names, if the execution offers it.
    async fn target(
        &self,
        by: &Principal,
        namespace: &str,
        execution: &str,
        args: &serde_json::Map<String, Value>,
    ) -> Result<Result<ObjectRef, CallError>, EngineError> {
        let id = match artifact_tools::call_id(args) {
            Ok(id) => id.to_owned(),
            Err(e) => return Ok(Err(CallError::custom(e.code, e.message))),
        };
        let visible = self.artifacts().calls(by, namespace, execution).await?;
        if let Some(call) = visible.iter().find(|c| c.metadata.name == id) {
            let artifact = call.handle().map(|h| h.id.clone()).unwrap_or_default();
            return Ok(Ok(ObjectRef::new(artifact)));
        }
        let why = match self.calls().record(namespace, &id).await {
            Ok(c) if c.spec.from_artifact_tool => format!(
                "callId {id:?} is a call of {}: artifact tools read handles of other tools' calls, never their own results",
                c.tool_name()
            ),
            Ok(c) if c.spec.execution_ref.as_ref().map(|r| r.name.as_str()) != Some(execution) => {
                format!("callId {id:?} is not a call of execution {execution:?}")
            }
            Ok(_) => {
                format!("call {id:?} returned its result inline: there is no artifact to read")
            }
            Err(_) => format!("callId {id:?} names no call of execution {execution:?}"),
        };
        let mut error = CallError::new(ErrorCode::ArtifactCallNotVisible, why);
        error.details = Some(serde_json::json!({
            "callId": id,
            "visible": visible.iter().map(|c| c.metadata.name.clone()).collect::<Vec<_>>(),
        }));
        Ok(Err(error))
    }

    async fn read_for_tool(
        &self,
        namespace: &str,
        tool: &str,
        args: &serde_json::Map<String, Value>,
        target: &ObjectRef,
    ) -> Result<Result<Value, CallError>, EngineError> {
        // The caller's sight of `target` was asked when it was chosen; joch reads it.
        let joch = joch_core::Principal::local();
        let (_, content) = self
            .artifacts()
            .read(&joch, namespace, &target.name, None)
            .await?;
        let tool = tool.to_owned();
        let args = args.clone();
        // Regex and JSON work over megabytes: off the async threads.
        let answer =
            tokio::task::spawn_blocking(move || artifact_tools::run(&tool, &args, &content))
                .await
                .map_err(EngineError::task("the artifact tool"))?;
        Ok(answer.map_err(|e| CallError::custom(e.code, e.message)))
    }
}

impl Artifacts<'_> {
    /// The calls of `execution` whose handles artifact tools may read,
    /// oldest first.
    /// Only calls of tools that exist for `by` count (see `rules.rs`).
    pub async fn calls(
        &self,
        by: &Principal,
        namespace: &str,
        execution: &str,
    ) -> Result<Vec<ToolCall>, EngineError> {
        crate::catalog::valid_namespace(namespace)?;
        crate::identity::rules::may_in(
            by,
            namespace,
            &crate::identity::rules::Action::Read(crate::identity::rules::Collection::Executions),
        )?;
        let mut visible = Vec::new();
        let mut continue_from = None;
        loop {
            let mut query = ListQuery {
                namespace: namespace.to_owned(),
                limit: 1000,
                continue_from,
                ..ListQuery::default()
            };
            query.index.execution = Some(execution.to_owned());
            let page = self.inner.store.list_objects::<ToolCall>(query).await?;
            visible.extend(
                page.items
                    .into_iter()
                    .filter(|c| !c.spec.from_artifact_tool && c.handle().is_some()),
            );
            match page.continue_token {
                Some(token) => continue_from = Some(token),
                None => break,
            }
        }
        if by.tools.is_some() {
            let mut seen = Vec::with_capacity(visible.len());
            for call in visible {
                if self.sees_tool(by, namespace, call.tool_name()).await? {
                    seen.push(call);
                }
            }
            visible = seen;
        }
        let extra = visible.len().saturating_sub(MAX_VISIBLE);
        visible.drain(..extra);
        Ok(visible)
    }

    /// MCP definitions of the artifact tools for `execution`, or none when
    /// it has no handles to read.
    pub async fn tool_definitions(
        &self,
        by: &Principal,
        namespace: &str,
        execution: &str,
    ) -> Result<Vec<Value>, EngineError> {
        let ids: Vec<String> = self
            .calls(by, namespace, execution)
            .await?
            .into_iter()
            .map(|c| c.metadata.name)
            .collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(artifact_tools::definitions(&ids))
    }

    /// Runs an artifact tool as a recorded call (`spec.fromArtifactTool:
    /// true`). Its answer is a bounded plain value; a `callId` that is not
    /// a visible handle of the call's execution settles the call `Failed`.
    pub async fn call_tool(
        &self,
        by: &Principal,
        namespace: &str,
        mut call: ToolCall,
    ) -> Result<CallOutcome, EngineError> {
        crate::identity::rules::may_in(by, namespace, &crate::identity::rules::Action::CallTool)?;
        let tool = call.tool_name().to_owned();
        if !is_artifact_tool(&tool) {
            return Err(EngineError::NotFound {
                kind: "Tool".to_owned(),
                name: tool,
            });
        }
        let Some(execution) = call.spec.execution_ref.as_ref().map(|r| r.name.clone()) else {
            return Err(EngineError::Misdirected(format!(
                "{tool} reads the handles of one execution: give spec.executionRef"
            )));
        };
        if call.metadata.name.is_empty() {
            call.metadata.name = crate::engine::new_call_name();
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
            started_at: Some(crate::engine::now()),
            principal: Some(by.reference()),
            ..Default::default()
        };
        self.inner
            .store
            .create_object(&mut call, Durability::Deferred)
            .await?;

        let result = match self.target(by, namespace, &execution, &args).await? {
            Ok(target) => self.read_for_tool(namespace, &tool, &args, &target).await?,
            Err(refusal) => Err(refusal),
        };
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
