//! The forged artifact tools: `artifact_grep` and its siblings read the
//! handle of another call of the same execution (their calls are recorded
//! by `calls/artifact_tools.rs`).
//!
//! Visibility: an execution's calls whose result is a handle, that are not
//! themselves artifact-tool calls. That set is the `callId` enum offered to
//! models, and the only calls an artifact tool may read; a `callId` outside
//! it is refused, and the refusal recorded, so tools cannot be stacked.
//! Artifact tools read what the caller already received, so they skip the
//! request policies, approvals and idempotency of the normal call path.

use joch_core::artifact_tools;
use joch_core::{CallError, ErrorCode, ObjectRef, Principal, ToolCall};
use joch_store::ListQuery;
use serde_json::Value;

use super::Artifacts;
use crate::EngineError;

/// Most calls of one execution an enum offers (the newest are kept).
const MAX_VISIBLE: usize = 200;

impl Artifacts {
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
        let visible = self.calls(by, namespace, execution).await?;
        if let Some(call) = visible.iter().find(|c| c.metadata.name == id) {
            let artifact = call.handle().map(|h| h.id.clone()).unwrap_or_default();
            return Ok(Ok(ObjectRef::new(artifact)));
        }
        let why = match self.store.get_object::<ToolCall>(namespace, &id).await {
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

    /// What artifact tool `tool` answers `args` for `by`, in `execution`:
    /// `Err` inside when the call it names is not a handle the execution
    /// offers `by` (a refusal the call records).
    pub(crate) async fn run_tool(
        &self,
        by: &Principal,
        namespace: &str,
        execution: &str,
        tool: &str,
        args: &serde_json::Map<String, Value>,
    ) -> Result<Result<Value, CallError>, EngineError> {
        match self.target(by, namespace, execution, args).await? {
            Ok(target) => self.read_for_tool(namespace, tool, args, &target).await,
            Err(refusal) => Ok(Err(refusal)),
        }
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
        let (_, content) = self.read(&joch, namespace, &target.name, None).await?;
        let tool = tool.to_owned();
        let args = args.clone();
        // Regex and JSON work over megabytes: off the async threads.
        let answer =
            tokio::task::spawn_blocking(move || artifact_tools::run(&tool, &args, &content))
                .await
                .map_err(EngineError::task("the artifact tool"))?;
        Ok(answer.map_err(|e| CallError::custom(e.code, e.message)))
    }

    /// The calls of `execution` whose handles artifact tools may read,
    /// oldest first.
    /// Only calls of tools that exist for `by` count (see `rules.rs`).
    pub async fn calls(
        &self,
        by: &Principal,
        namespace: &str,
        execution: &str,
    ) -> Result<Vec<ToolCall>, EngineError> {
        crate::resources::valid_namespace(namespace)?;
        crate::rules::may_in(
            by,
            namespace,
            &crate::rules::Action::Read(crate::rules::Collection::Executions),
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
            let page = self.store.list_objects::<ToolCall>(query).await?;
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
                if self
                    .visibility
                    .sees_tool(by, namespace, call.tool_name())
                    .await?
                {
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
}
