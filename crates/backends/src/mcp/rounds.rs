//! A server of protocol 2026-07-28 asks its questions during a call as an
//! `input_required` result (SEP-2322: `inputRequests`, `requestState`)
//! instead of requests on a session. Each question goes to the client that
//! made the call through the same relay as a session's `elicitation/create`
//! or `sampling/createMessage` (recorded, refused if the client cannot
//! answer), and the call is sent again with the answers. A question the
//! client cannot answer ends the call with that refusal: the server is
//! never given an answer nobody gave.

use std::sync::Arc;

use joch_core::mcp_surface::CallClient;
use joch_core::{CallError, ErrorCode};
use rmcp::model::{CallToolRequestParams, InputRequests, InputRequiredResult, InputResponses};
use serde_json::Value;

/// At most this many rounds of questions in one call (as rmcp's client).
pub(super) const MAX_ROUNDS: usize = rmcp::model::DEFAULT_MRTR_MAX_ROUNDS;

/// `params` again, with the client's answers to what `asked` asks and the
/// server's `requestState`; or why the call cannot go on.
pub(super) async fn answered(
    params: CallToolRequestParams,
    asked: InputRequiredResult,
    caller: Option<&Arc<dyn CallClient>>,
) -> Result<CallToolRequestParams, CallError> {
    let answers = answers(asked.input_requests.unwrap_or_default(), caller).await?;
    let mut params = params.with_input_responses(answers);
    params.request_state = asked.request_state;
    Ok(params)
}

/// The client's answer to each question (also an upstream task's
/// `input_required`, see `tasks.rs`); or why one has none.
pub(super) async fn answers(
    asked: InputRequests,
    caller: Option<&Arc<dyn CallClient>>,
) -> Result<InputResponses, CallError> {
    let mut answers = InputResponses::new();
    for (key, request) in asked {
        let request = serde_json::to_value(&request).map_err(unreadable)?;
        let method = request
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let question = request.get("params").cloned().unwrap_or(Value::Null);
        let Some(caller) = caller else {
            return Err(CallError::new(
                ErrorCode::ClientIncapable,
                format!("the server asked {method} and the call has no client to ask"),
            ));
        };
        let answer = caller
            .request(&method, question)
            .await
            .map_err(|e| CallError {
                message: format!(
                    "the server asked {method}, which was not answered: {}",
                    e.message
                ),
                ..e
            })?;
        answers.insert(key, answer);
    }
    Ok(answers)
}

fn unreadable(e: serde_json::Error) -> CallError {
    CallError::new(
        ErrorCode::McpError,
        format!("the server's input_required cannot be read: {e}"),
    )
}
