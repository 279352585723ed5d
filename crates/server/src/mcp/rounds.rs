//! Protocol 2026-07-28: an upstream's questions during a call (SEP-2322
//! `input_required`: elicitation, sampling, `roots/list`, one or several,
//! in one round or several) reach the client that made the call as the
//! call's own `input_required`, and its retry answers them.
//!
//! - The call waits, `Running`, with the round on its record
//!   (`status.inputRequired`, the engine's `calls/rounds.rs`). The client
//!   gets the upstream's `inputRequests` as they were sent, and
//!   `requestState` `input/<call>/<round>`: the upstream's own state stays
//!   on the record, bound to the call, so that a state the client changed
//!   names no round (refused, `-32602`) and the upstream only ever gets
//!   its own state back.
//! - The retry (same tool and arguments, that `requestState`, the answers
//!   in `inputResponses`) is the caller's own call or nothing, and its
//!   answers go upstream once, from whichever replica takes the retry
//!   first; every retry then reads the outcome: the result, the next
//!   round's questions, or, while the call still runs after
//!   [`RETRY_WAIT`], `input_required` with the state only (retry again).
//! - A question the client did not declare it can answer ends the call
//!   `Failed`, `client_incapable`, and the client gets `-32021` with
//!   `data.requiredCapabilities`; so does an upstream's own `-32021`.

use joch_core::mcp_surface::InputRound;
use joch_core::{ErrorCode, Phase, ToolCall};
use joch_engine::Principal;
use rmcp::ErrorData;
use rmcp::model::{InputRequests, InputRequiredResult};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;

use super::deferred::{RETRY_WAIT, Retry, resume_refused};
use super::handler::JochMcp;
use super::relay::FrontClient;

/// What a `requestState` naming a round starts with: `input/<call>/<round>`.
const STATE_PREFIX: &str = "input/";

/// The call and round a `requestState` of joch's names.
pub(super) fn parse(state: &str) -> Option<(&str, u32)> {
    let (name, round) = state.strip_prefix(STATE_PREFIX)?.rsplit_once('/')?;
    let round = round.parse().ok().filter(|r| *r > 0)?;
    (!name.is_empty() && !name.contains('/')).then_some((name, round))
}

/// The round `call` waits on its client for, if it does.
pub(super) fn asked(call: &ToolCall) -> Option<&InputRound> {
    let round = call.status.input_required.as_ref()?;
    (call.status.phase == Phase::Running && round.answered_at.is_none()).then_some(round)
}

/// The client's `input_required` for `round` of `call`.
pub(super) fn input_required(call: &ToolCall, round: &InputRound) -> InputRequiredResult {
    let requests: Option<InputRequests> = serde_json::from_value(round.requests.clone()).ok();
    InputRequiredResult::new(requests, Some(state(call, round.round)))
}

fn state(call: &ToolCall, round: u32) -> String {
    format!("{STATE_PREFIX}{}/{round}", call.metadata.name)
}

/// The JSON-RPC error a settled call answers at 2026-07-28 instead of its
/// result: `-32021` when its upstream asked what its client did not declare
/// (joch's `client_incapable`, or the upstream's own `-32021`).
pub(super) fn refusal(call: &ToolCall) -> Option<ErrorData> {
    let error = call.status.error.as_ref()?;
    let details = error.details.as_ref();
    let data = if error.code == ErrorCode::ClientIncapable.as_str() {
        details.cloned()
    } else if error.code == ErrorCode::McpError.as_str()
        && details.and_then(|d| d.get("code")).and_then(Value::as_i64)
            == Some(i64::from(
                rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY.0,
            ))
    {
        details.and_then(|d| d.get("data")).cloned()
    } else {
        None
    }?;
    data.get("requiredCapabilities")?;
    Some(ErrorData::new(
        rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        error.message.clone(),
        Some(data),
    ))
}

impl JochMcp {
    /// A retry answering `round` of call `name` (a `tools/call`, or a
    /// `resources/read` or `prompts/get`): the call settled, or the
    /// client's next `input_required`.
    pub(super) async fn answer_round(
        &self,
        by: &Principal,
        namespace: &str,
        (name, round): (&str, u32),
        retry: Retry<'_>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Result<ToolCall, InputRequiredResult>, ErrorData> {
        let answers = serde_json::to_value(retry.responses.cloned().unwrap_or_default())
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        // This client answers the upstream's next questions, if any: the
        // round's sending holds it from its start to its end.
        let (_cancel, cancelled) = tokio::sync::watch::channel(false);
        let client = FrontClient::of(context, cancelled);
        let _attached =
            self.engine
                .mcp()
                .attach_client(namespace, name, std::sync::Arc::new(client));
        let call = self
            .engine
            .calls()
            .answer_input(
                by,
                namespace,
                (name, round),
                retry.asked(),
                &answers,
                RETRY_WAIT,
            )
            .await
            .map_err(resume_refused)?;
        if let Some(next) = asked(&call) {
            return Ok(Err(input_required(&call, next)));
        }
        if call.status.phase.is_terminal() {
            return Ok(Ok(call));
        }
        // Still running: the client retries with the state of the round
        // it answered, and is told the outcome then.
        let current = call
            .status
            .input_required
            .as_ref()
            .map_or(round, |r| r.round);
        Ok(Err(InputRequiredResult::from_request_state(state(
            &call, current,
        ))))
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_state_names_the_call_and_its_round() {
        let table = [
            ("input/c1/1", Some(("c1", 1))),
            ("input/c1/12", Some(("c1", 12))),
            ("input/c1/1-TAMPERED", None),
            ("input/c1/0", None),
            ("input//1", None),
            ("input/a/b/1", None),
            ("toolcall/c1", None),
        ];
        for (state, parsed) in table {
            assert_eq!(parse(state), parsed, "{state}");
        }
    }
}
