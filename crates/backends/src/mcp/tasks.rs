//! An upstream server's own task (SEP-2663): over a connection of protocol
//! 2026-07-28 joch declares the tasks extension, and a server may answer a
//! `tools/call` with a task instead of its result. joch then follows the
//! task to its end within the call (the joch ToolCall stays the durable
//! task its own client sees): it polls `tasks/get` as the server's
//! `pollIntervalMs` says, reports each new status as an output chunk
//! (`{upstreamTask, status, message}`: the call's `output_chunk` events and
//! its client's progress), relays the task's `input_required` questions to
//! the client that made the call and sends the answers with `tasks/update`,
//! and takes the task's result as the call's. When the call is cancelled,
//! the server gets `tasks/cancel`.

use std::sync::Arc;
use std::time::Duration;

use joch_core::mcp_surface::CallClient;
use joch_core::{CallError, ErrorCode, OutputChunks};
use rmcp::model::{
    CallToolResult, CancelTaskParams, GetTaskParams, Task, TaskPayload, UpdateTaskParams,
};
use serde_json::{Value, json};

use super::{Client, Ended, rounds};

/// The poll interval when the server names none, and its bounds.
const DEFAULT_POLL: Duration = Duration::from_millis(500);
const MIN_POLL: Duration = Duration::from_millis(50);
const MAX_POLL: Duration = Duration::from_secs(5);

/// Follows the server's task `task` to its result.
pub(super) async fn follow(
    client: &Client,
    task: Task,
    sink: Option<&dyn OutputChunks>,
    caller: Option<&Arc<dyn CallClient>>,
) -> Result<CallToolResult, Ended> {
    let id = task.task_id.clone();
    let poll = task
        .poll_interval_ms
        .map_or(DEFAULT_POLL, Duration::from_millis)
        .clamp(MIN_POLL, MAX_POLL);
    let mut seen = None;
    report(sink, &task, &mut seen);
    loop {
        let cancelled = async {
            match caller {
                Some(caller) => caller.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = cancelled => {
                let _ = client.cancel_task(CancelTaskParams::new(&id)).await;
                return Err(Ended::Cancelled);
            }
            () = tokio::time::sleep(poll) => {}
        }
        let got = client.get_task(GetTaskParams::new(&id)).await?.task;
        report(sink, &got.task, &mut seen);
        match got.payload {
            TaskPayload::Working => {}
            TaskPayload::InputRequired { input_requests } => {
                let answers = rounds::answers(input_requests, caller)
                    .await
                    .map_err(Ended::Refused)?;
                client
                    .update_task(UpdateTaskParams::new(&id, answers))
                    .await?;
            }
            TaskPayload::Completed { result } => {
                return serde_json::from_value(Value::Object(result)).map_err(|e| {
                    Ended::Refused(CallError::new(
                        ErrorCode::McpError,
                        format!("the server's task result cannot be read: {e}"),
                    ))
                });
            }
            TaskPayload::Failed { error } => {
                return Err(Ended::Refused(CallError {
                    code: ErrorCode::McpError.as_str().to_owned(),
                    message: format!("the server's task {id} failed"),
                    details: Some(Value::Object(error)),
                }));
            }
            TaskPayload::Cancelled => {
                return Err(Ended::Refused(CallError::new(
                    ErrorCode::McpError,
                    format!("the server cancelled its task {id}"),
                )));
            }
            _ => {}
        }
    }
}

/// Reports the task's status and message when they changed.
fn report(sink: Option<&dyn OutputChunks>, task: &Task, seen: &mut Option<Value>) {
    let now = json!({
        "upstreamTask": task.task_id,
        "status": task.status,
        "message": task.status_message,
    });
    if seen.as_ref() != Some(&now) {
        if let Some(sink) = sink {
            sink.chunk(now.clone());
        }
        *seen = Some(now);
    }
}
