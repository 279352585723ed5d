//! One `tools/call` of a call to its upstream: progress passed on while it
//! runs, the server's questions answered (`rounds.rs`) or given back to a
//! client that answers by retrying, the server's own task followed
//! (`tasks.rs`), the client's cancellation passed on.

use std::sync::Arc;

use joch_core::CallError;
use joch_core::ErrorCode;
use joch_core::mcp_surface::CallClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde_json::json;

use super::progress::ProgressRoutes;
use super::{Client, rounds, tasks};

/// How a `tools/call` ended without a result.
pub(super) enum Ended {
    /// The client cancelled it; the server was sent `notifications/cancelled`.
    Cancelled,
    Failed(ServiceError),
    /// The server asked what could not be answered (`rounds.rs`).
    Refused(CallError),
}

impl From<ServiceError> for Ended {
    fn from(e: ServiceError) -> Self {
        Ended::Failed(e)
    }
}

/// `tools/call`, passing each progress notification the server sends for
/// it to `sink` while it runs, and what the server asks during it to
/// `caller`; if `caller` cancels, the server is told and the call ends.
/// (rmcp gives every request its own progress token, so the request is
/// sent first and its token routed then; a report sent before that is
/// missed, which costs a chunk, never the result.)
pub(super) async fn call_tool(
    client: &Client,
    routes: &ProgressRoutes,
    mut params: CallToolRequestParams,
    sink: Option<&dyn joch_core::OutputChunks>,
    caller: Option<&Arc<dyn CallClient>>,
) -> Result<CallToolResult, Ended> {
    for _ in 0..rounds::MAX_ROUNDS {
        match call_once(client, routes, params.clone(), sink, caller).await? {
            ServerResult::CallToolResult(result) => return Ok(result),
            ServerResult::CreateTaskResult(created) => {
                return tasks::follow(client, created.task, sink, caller).await;
            }
            // A client that answers by retrying gets the questions as its own.
            ServerResult::InputRequiredResult(asked)
                if caller.is_some_and(|c| c.capabilities().rounds) =>
            {
                let caps = caller.map(|c| c.capabilities()).unwrap_or_default();
                return Err(Ended::Refused(rounds::to_client(asked, caps)));
            }
            ServerResult::InputRequiredResult(asked) => {
                params = rounds::answered(params, asked, caller)
                    .await
                    .map_err(Ended::Refused)?;
            }
            _ => return Err(Ended::Failed(ServiceError::UnexpectedResponse)),
        }
    }
    Err(Ended::Refused(CallError::new(
        ErrorCode::McpError,
        format!(
            "the server still asked for input after {} rounds",
            rounds::MAX_ROUNDS
        ),
    )))
}

/// One `tools/call` request of a call: its result, or (2026-07-28) the
/// server's questions or its task.
async fn call_once(
    client: &Client,
    routes: &ProgressRoutes,
    params: CallToolRequestParams,
    sink: Option<&dyn joch_core::OutputChunks>,
    caller: Option<&Arc<dyn CallClient>>,
) -> Result<ServerResult, Ended> {
    if let Some(caller) = caller {
        // Cancelled before it was sent: a server may ignore the cancellation
        // of a request it has not seen yet, so it is not sent at all.
        tokio::select! {
            biased;
            () = caller.cancelled() => return Err(Ended::Refused(CallError::new(
                ErrorCode::Cancelled,
                "the call was cancelled before it was sent to the server",
            ))),
            () = std::future::ready(()) => {}
        }
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = client
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await?;
    let _call = caller.map(|c| client.service().route(&handle.id, c.clone()));
    let (_route, mut progress) = routes.route(&handle.progress_token);
    let (id, peer) = (handle.id.clone(), handle.peer.clone());
    let response = handle.await_response();
    tokio::pin!(response);
    let cancelled = async {
        match caller {
            Some(caller) => caller.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(cancelled);
    let response = loop {
        tokio::select! {
            response = &mut response => break response,
            Some(chunk) = progress.recv() => if let Some(sink) = sink { sink.chunk(chunk) },
            () = &mut cancelled => {
                let notice: Result<CancelledNotificationParam, _> = serde_json::from_value(
                    json!({"requestId": id, "reason": "the client cancelled the call"}),
                );
                if let Ok(notice) = notice {
                    let _ = peer.notify_cancelled(notice).await;
                }
                return Err(Ended::Cancelled);
            }
        }
    };
    while let Ok(chunk) = progress.try_recv() {
        if let Some(sink) = sink {
            sink.chunk(chunk);
        }
    }
    Ok(response?)
}
