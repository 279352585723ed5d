//! A server of protocol 2026-07-28 asks its questions during a call as an
//! `input_required` result (SEP-2322: `inputRequests`, `requestState`)
//! instead of requests on a session. Each question goes to the client that
//! made the call through the same relay as a session's `elicitation/create`
//! or `sampling/createMessage` (recorded, refused if the client cannot
//! answer), and the call is sent again with the answers. A question the
//! client cannot answer ends the call with that refusal: the server is
//! never given an answer nobody gave.
//!
//! A client that itself answers by retrying (joch's front at 2026-07-28)
//! is given the questions instead ([`to_client`]): the call waits on it
//! (the engine's `calls/rounds.rs`), and is sent again with its answers
//! and the server's `requestState` ([`resumed`]).

use std::sync::Arc;

use joch_core::mcp_surface::{CallClient, ClientCapabilities, InputRound};
use joch_core::{CallError, ErrorCode};
use rmcp::model::{CallToolRequestParams, InputRequests, InputRequiredResult, InputResponses};
use serde_json::{Value, json};

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

/// `params` with the answers of the round the call's client has just
/// answered, and the server's `requestState` of that round.
pub(super) fn resumed(
    params: CallToolRequestParams,
    input: Option<&InputRound>,
) -> CallToolRequestParams {
    let Some(round) = input else {
        return params;
    };
    let answers: InputResponses = round
        .responses
        .as_ref()
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default();
    let mut params = params.with_input_responses(answers);
    params.request_state = round.state.clone();
    params
}

/// The server's questions for a client that answers by retrying: an
/// `input_required` failure carrying `{inputRequests, requestState}`, or,
/// when one asks what the client did not declare it can answer, a
/// `client_incapable` one naming what it would need
/// (`requiredCapabilities`, as MCP's `-32021` does).
pub(super) fn to_client(asked: InputRequiredResult, caps: ClientCapabilities) -> CallError {
    let requests = asked.input_requests.unwrap_or_default();
    let requests = match serde_json::to_value(&requests) {
        Ok(requests) => requests,
        Err(e) => return unreadable(e),
    };
    let incapable = requests.as_object().and_then(|all| {
        all.values().find_map(|request| {
            let method = request.get("method").and_then(Value::as_str)?;
            let params = request.get("params").cloned().unwrap_or(Value::Null);
            (!caps.allows(method, &params)).then(|| (method.to_owned(), params))
        })
    });
    if let Some((method, params)) = incapable {
        return CallError {
            code: ErrorCode::ClientIncapable.as_str().to_owned(),
            message: format!(
                "the server asked {method}, which the client that made the call did not declare it can answer"
            ),
            details: Some(json!({
                "requiredCapabilities": ClientCapabilities::required(&method, &params),
            })),
        };
    }
    CallError {
        code: ErrorCode::InputRequired.as_str().to_owned(),
        message: "the server asks the client that made the call for input".to_owned(),
        details: Some(json!({
            "inputRequests": requests,
            "requestState": asked.request_state,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked() -> InputRequiredResult {
        let requests = json!({
            "name": {"method": "elicitation/create", "params": {"mode": "form", "message": "?",
                "requestedSchema": {"type": "object", "properties": {}}}},
            "roots": {"method": "roots/list"},
        });
        let mut asked = InputRequiredResult::from_input_requests(
            serde_json::from_value(requests).expect("questions"),
        );
        asked.request_state = Some("theirs".to_owned());
        asked
    }

    #[test]
    fn a_client_that_retries_gets_the_questions_or_what_it_lacks() {
        let both = ClientCapabilities {
            elicitation_form: true,
            roots: true,
            rounds: true,
            ..ClientCapabilities::default()
        };
        let given = to_client(asked(), both);
        assert_eq!(given.code, "input_required");
        let details = given.details.expect("details");
        assert_eq!(details["requestState"], "theirs");
        assert_eq!(details["inputRequests"]["roots"]["method"], "roots/list");

        let no_roots = ClientCapabilities {
            roots: false,
            ..both
        };
        let refused = to_client(asked(), no_roots);
        assert_eq!(refused.code, "client_incapable");
        let required = &refused.details.expect("details")["requiredCapabilities"];
        assert_eq!(required, &json!({"roots": {}}));
    }

    #[test]
    fn a_resumed_call_carries_the_answers_and_the_servers_state() {
        let round = InputRound {
            round: 1,
            requests: json!({}),
            state: Some("theirs".to_owned()),
            asked_at: serde_json::from_value(json!("2026-07-28T00:00:00.000Z")).expect("a time"),
            answered_at: None,
            responses: Some(json!({"name": {"action": "decline"}})),
        };
        let params = resumed(CallToolRequestParams::new("t"), Some(&round));
        assert_eq!(params.request_state.as_deref(), Some("theirs"));
        let answers = params.input_responses.expect("answers");
        assert_eq!(answers["name"]["action"], "decline");
        let first = resumed(CallToolRequestParams::new("t"), None);
        assert!(first.request_state.is_none() && first.input_responses.is_none());
    }
}
