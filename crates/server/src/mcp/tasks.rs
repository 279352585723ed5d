//! The tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`): a
//! client that declares it gets each `tools/call` as a task, and the task
//! is the durable ToolCall (task id = the call's name).
//!
//! - `tools/call` records the call and answers at once with the task
//!   (`Calls::submit`: the call runs in the background and settles in the
//!   store). A refusal that needs no task (an unknown tool) is a result.
//! - `tasks/get` reads the call, on any replica, after any restart or a
//!   replica's death: `working` while pending or running; while it waits
//!   for a person, `input_required` with the question `input_required`
//!   would ask (`deferred.rs`) if the client can answer it, else `working`
//!   naming the Approval's link; once settled, `completed` with the
//!   `tools/call` result (a refusal is a result with `isError`), or
//!   `cancelled` for a call the caller cancelled.
//! - `tasks/update` takes the answer to that question (key `approval`),
//!   deciding the Approval as the user's answer does.
//! - `tasks/cancel` cancels the call (`Calls::cancel`): withdrawn while
//!   it waits for a person, stopped by the replica running it otherwise;
//!   `Failed`, `error.code: cancelled`.
//!
//! Only the principal that made the call sees its task.

use joch_core::{ErrorCode, Phase, ToolCall};
use joch_engine::{Engine, EngineError, Principal};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, DetailedTask,
    GetTaskParams, GetTaskResult, Task, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;

use super::convert::{call_result, is_mcp_tool, refused};
use super::elicit;
use super::handler::JochMcp;

/// How often a client is asked to poll a task.
const POLL_INTERVAL_MS: u64 = 500;
/// The key of the question in `inputRequests`, as in `input_required`.
const APPROVAL_INPUT: &str = "approval";

/// True when the request's client declared the tasks extension.
pub(super) fn wanted(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks())
}

impl JochMcp {
    /// `tools/call` as a task: recorded, answered with its task at once.
    pub(super) async fn start_task(
        &self,
        by: &Principal,
        namespace: &str,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (call, _name) = self.call_for(request, context);
        match self.engine.calls().submit(by, namespace, call).await {
            Ok(outcome) => Ok(CreateTaskResult::new(task(&outcome.into_response())).into()),
            Err(e) => {
                let e = crate::ApiError::from(e);
                let result = refused(e.code.as_str(), &e.message);
                serde_json::from_value(result)
                    .map(CallToolResponse::Complete)
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))
            }
        }
    }

    /// The task `id`'s call, if the caller made it; else invalid params,
    /// as for no task at all.
    async fn own_task(
        &self,
        by: &Principal,
        namespace: &str,
        id: &str,
    ) -> Result<ToolCall, ErrorData> {
        self.engine
            .calls()
            .own(by, namespace, id)
            .await
            .map_err(|e| match e {
                EngineError::NotFound { .. } => ErrorData::invalid_params(
                    "no task of yours has this id in this namespace",
                    None,
                ),
                e => ErrorData::internal_error(e.to_string(), None),
            })
    }

    /// `tasks/get`: the call as it stands.
    pub(super) async fn get_task_of(
        &self,
        params: GetTaskParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let (by, namespace) = self.caller(context)?;
        let call = self.own_task(&by, &namespace, &params.task_id).await?;
        let tool = self
            .engine
            .resources()
            .cached_tool(&by, &namespace, call.tool_name())
            .await
            .ok();
        let mut base = task(&call);
        let payload = match call.status.phase {
            _ if cancelled(&call) => TaskPayload::Cancelled,
            phase if phase.is_terminal() => {
                let result = call_result(&call, tool.as_deref().is_some_and(is_mcp_tool));
                let Value::Object(result) = result else {
                    return Err(ErrorData::internal_error("a result is an object", None));
                };
                TaskPayload::Completed { result }
            }
            Phase::AwaitingApproval => {
                let approval = self
                    .engine
                    .approvals()
                    .get(&namespace, &call.metadata.name)
                    .await
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                let asked = self.input_required(
                    &approval,
                    tool.as_deref(),
                    context,
                    joch_core::RunsOn::Approval,
                );
                let link = asked
                    .meta
                    .as_ref()
                    .and_then(|m| m.get("joch.dev/approvalUrl"));
                base.status_message = link
                    .and_then(Value::as_str)
                    .map(|url| format!("waiting for approval: {url}"));
                match asked.input_requests {
                    Some(input_requests) => TaskPayload::InputRequired { input_requests },
                    None => TaskPayload::Working,
                }
            }
            _ => TaskPayload::Working,
        };
        Ok(GetTaskResult::new(DetailedTask::new(base, payload)))
    }

    /// `tasks/update`: the user's answer to the task's question.
    pub(super) async fn update_task_of(
        &self,
        params: UpdateTaskParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (by, namespace) = self.caller(context)?;
        let call = self.own_task(&by, &namespace, &params.task_id).await?;
        let Some(answer) = params.input_responses.get(APPROVAL_INPUT) else {
            return Ok(());
        };
        let Ok(approval) = self
            .engine
            .approvals()
            .get(&namespace, &call.metadata.name)
            .await
        else {
            return Ok(());
        };
        let tool = self
            .engine
            .resources()
            .cached_tool(&by, &namespace, call.tool_name())
            .await
            .ok();
        let decider = elicit::decider_name(&call);
        elicit::decide_by_answer(
            &self.engine,
            &approval,
            tool.as_deref(),
            answer,
            decider,
            by,
        )
        .await;
        Ok(())
    }

    /// `tasks/cancel`: cancels the call, whichever replica runs it.
    pub(super) async fn cancel_task_of(
        &self,
        params: CancelTaskParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (by, namespace) = self.caller(context)?;
        // Whose task it is, with the same answer as `tasks/get` for another's.
        self.own_task(&by, &namespace, &params.task_id).await?;
        self.engine
            .calls()
            .cancel(&by, &namespace, &params.task_id)
            .await
            .map(drop)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    fn caller(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<(Principal, String), ErrorData> {
        Ok((
            self.principal(&context.extensions)?,
            self.namespace(&context.extensions)?,
        ))
    }
}

/// The task a call is, without its payload.
fn task(call: &ToolCall) -> Task {
    let created = call
        .metadata
        .creation_timestamp
        .map(|t| t.to_string())
        .unwrap_or_default();
    let updated = call
        .status
        .completed_at
        .map(|t| t.to_string())
        .unwrap_or_else(|| created.clone());
    let status = match call.status.phase {
        _ if cancelled(call) => TaskStatus::Cancelled,
        phase if phase.is_terminal() => TaskStatus::Completed,
        // `tasks/get` says `input_required` when the client can answer.
        _ => TaskStatus::Working,
    };
    Task::new(call.metadata.name.clone(), status, created, updated)
        .with_poll_interval_ms(POLL_INTERVAL_MS)
}

fn cancelled(call: &ToolCall) -> bool {
    call.status
        .error
        .as_ref()
        .is_some_and(|e| e.is(ErrorCode::Cancelled))
}

/// How long a call the client cancelled may take to end through its
/// upstream (an MCP server told `notifications/cancelled`) before joch
/// cancels it itself.
const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// Cancels `by`'s call `name` after [`CANCEL_GRACE`], as `tasks/cancel`
/// would (the engine's gate: the caller's own call; a settled call is left
/// as it is), from a task of its own.
pub(super) fn cancel_after_grace(engine: &Engine, by: &Principal, namespace: &str, name: &str) {
    let (engine, by, ns, name) = (
        engine.clone(),
        by.clone(),
        namespace.to_owned(),
        name.to_owned(),
    );
    tokio::spawn(async move {
        tokio::time::sleep(CANCEL_GRACE).await;
        if let Err(e) = engine.calls().cancel(&by, &ns, &name).await {
            tracing::debug!(error = %e, call = %name, "a client's cancellation");
        }
    });
}
