//! Protocol 2026-07-28: a call deferred to a person answers `input_required`
//! (SEP-2322), and the client's retry gets the decided outcome.
//!
//! A 2026-07-28 request has no session to hold a question open on, so a
//! `tools/call` whose call waits for approval ends at once: the call is
//! recorded `AwaitingApproval` with its Approval, and the client gets
//! - `inputRequests.approval`: the question for its user, when the client
//!   declared elicitation: a form for an `askUser` approval or a
//!   `userInput` value (the form a session's client is sent live,
//!   `elicit.rs`), for a consent to an upstream (URL mode) its
//!   authorization URL, else (URL mode) the link where the Approval is
//!   decided;
//! - `requestState`: `toolcall/<name>`, the ToolCall's name and nothing
//!   else. The state is the record in the store, so the retry is served by
//!   whichever replica it reaches; the engine lets only the principal that
//!   made the call resume it (`Calls::resume`);
//! - `_meta["joch.dev/approvalUrl"]`: the same link, for any client;
//! - `_meta["joch.dev/retryBy"]`: the instant by which the client must
//!   retry, also said in a URL-mode notice's message.
//!
//! Such a client may never come back (the OpenAI Agents SDK tells its model
//! the tool failed), so the call runs only on its retry (`spec.runsOn:
//! retry`, `engine/src/calls/decided/retry.rs`): an approval alone leaves it
//! waiting, and if no retry comes by `retryBy` it ends `TimedOut`
//! (`not_retried`), never run. A client running the call as a task
//! (`tasks.rs`) is not answered so: its call runs on approval.
//!
//! The retry (same `tools/call`, with `requestState` and perhaps the
//! form's answer in `inputResponses.approval`) records the answer as the
//! user's decision, carries an approved call out, and waits up to
//! [`RETRY_WAIT`] for it to settle: settled, it gets the call's result,
//! read from the record (the tool ran once; another retry reads the same
//! outcome); still waiting, `input_required` again with the state only.
//!
//! A `resources/read` or `prompts/get` deferred to a person (they are calls
//! of the server's surface tool) answers and resumes the same way.

use std::time::Duration;

use joch_core::{Approval, RunsOn, Time, Tool, ToolCall};
use joch_engine::{EngineError, Principal};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, ElicitRequest, ElicitRequestParams, InputRequest, InputRequiredResult,
    InputResponses, MetaObject, ProtocolVersion,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};

use super::elicit;
use super::handler::JochMcp;

/// What a `requestState` joch gives starts with; the call's name follows.
const STATE_PREFIX: &str = "toolcall/";
/// The key of the question in `inputRequests` and of its answer in `inputResponses`.
const APPROVAL_INPUT: &str = "approval";
/// `_meta` key of the link where the Approval is decided.
const META_APPROVAL_URL: &str = "joch.dev/approvalUrl";
/// `_meta` key of the instant by which a call that runs on the client's
/// retry must be retried (RFC 3339).
const META_RETRY_BY: &str = "joch.dev/retryBy";
/// How long a retry waits for the decision before answering
/// `input_required` again (the client then retries after a pause).
pub(super) const RETRY_WAIT: Duration = Duration::from_secs(10);

/// True for a request of protocol 2026-07-28 or later (no session).
pub(super) fn stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
}

/// True when the request retries a call joch answered `input_required`.
pub(super) fn is_retry(request: &CallToolRequestParams) -> bool {
    request.request_state.is_some()
}

/// A request retried after `input_required`: the tool its call is of (a
/// server's surface tool for a resource read or a prompt get), the state
/// joch gave and the answers the client brings.
pub(super) struct Retry<'a> {
    pub(super) tool: &'a str,
    /// The arguments the retry carries, as its call's input is made.
    pub(super) input: Value,
    pub(super) state: Option<&'a str>,
    pub(super) responses: Option<&'a InputResponses>,
}

impl<'a> From<&'a CallToolRequestParams> for Retry<'a> {
    fn from(request: &'a CallToolRequestParams) -> Self {
        Retry {
            tool: &request.name,
            input: Value::Object(request.arguments.clone().unwrap_or_default()),
            state: request.request_state.as_deref(),
            responses: request.input_responses.as_ref(),
        }
    }
}

impl Retry<'_> {
    pub(super) fn asked(&self) -> joch_engine::Retry<'_> {
        joch_engine::Retry {
            tool: self.tool,
            input: &self.input,
        }
    }
}

impl JochMcp {
    /// The `input_required` answer for a call waiting on `approval`, which
    /// runs on its approval (a task's) or on the client's retry.
    pub(super) fn input_required(
        &self,
        approval: &Approval,
        tool: Option<&Tool>,
        context: &RequestContext<RoleServer>,
        runs_on: RunsOn,
    ) -> InputRequiredResult {
        let url = self.approval_url(approval);
        let retry_by = (runs_on == RunsOn::Retry)
            .then(|| approval.retry_deadline())
            .flatten();
        let elicitation = context.client_capabilities().and_then(|c| c.elicitation);
        // A client that declares elicitation without naming a mode takes forms.
        let form = elicitation
            .as_ref()
            .is_some_and(|e| e.form.is_some() || e.url.is_none());
        let by_url = elicitation.as_ref().is_some_and(|e| e.url.is_some());
        let question = if by_url && elicit::is_consent(approval) {
            // The user's consent at the upstream's authorization server:
            // its URL, not where the Approval is decided.
            Some(elicit::form(approval, tool))
        } else if form && elicit::may_ask(approval) {
            Some(elicit::form(approval, tool))
        } else if by_url {
            Some(ElicitRequestParams::UrlElicitationParams {
                meta: None,
                message: notice(approval, retry_by),
                url: url.clone(),
                elicitation_id: approval.metadata.name.clone(),
            })
        } else {
            None
        };
        let requests = question.map(|params| {
            let request = InputRequest::Elicitation(ElicitRequest::new(params));
            [(APPROVAL_INPUT.to_owned(), request)].into()
        });
        let state = format!("{STATE_PREFIX}{}", approval.metadata.name);
        InputRequiredResult::new(requests, Some(state)).with_meta(approval_meta(&url, retry_by))
    }

    /// A retry with a `requestState`: records the answer it carries, then
    /// the call's outcome, or `input_required` again while it still waits.
    pub(super) async fn resume(
        &self,
        by: &Principal,
        namespace: &str,
        request: Retry<'_>,
        tool: Option<&Tool>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Result<ToolCall, InputRequiredResult>, ErrorData> {
        let (name, asked) = request
            .state
            .and_then(parse_state)
            .ok_or_else(|| ErrorData::invalid_params("requestState is not one joch gave", None))?;
        // Whose call it is, and that the retry asks what it asked, before
        // anything is decided on it.
        let call = self
            .resumed(by, namespace, name, &request, Duration::ZERO)
            .await?;
        let answer = request.responses.and_then(|r| r.get(APPROVAL_INPUT));
        if let (Some(answer), false) = (answer, call.status.phase.is_terminal()) {
            if let Ok(approval) = self.engine.approvals().get(namespace, name).await {
                let decider = elicit::decider_name(&call);
                elicit::decide_by_answer(
                    &self.engine,
                    &approval,
                    tool,
                    answer,
                    decider,
                    by.clone(),
                )
                .await;
            }
        }
        // Paused again since the client was last asked (a consent after a
        // person's approval): the new question, now or once it comes.
        let approvals = self.engine.approvals();
        let current = approvals.get(namespace, name).await.ok();
        let next = async {
            match current.filter(|a| !reasks(a, asked)) {
                Some(seen) => approvals.next_pause(by, namespace, name, &seen).await,
                None => Ok(approvals.get(namespace, name).await.ok()),
            }
        };
        let call = tokio::select! {
            call = self.resumed(by, namespace, name, &request, RETRY_WAIT) => call?,
            Ok(Some(paused)) = next => {
                if reasks(&paused, asked) {
                    let mut again = self.input_required(&paused, tool, context, RunsOn::Retry);
                    again.request_state = Some(format!("{STATE_PREFIX}{name}/{}", paused.metadata.resource_version));
                    return Ok(Err(again));
                }
                self.resumed(by, namespace, name, &request, RETRY_WAIT).await?
            }
        };
        // Approved, it ran, and its upstream asks the client something.
        if let Some(round) = super::rounds::asked(&call) {
            return Ok(Err(super::rounds::input_required(&call, round)));
        }
        if call.status.phase.is_terminal() {
            return Ok(Ok(call));
        }
        let state = format!("{STATE_PREFIX}{name}");
        let url = self.approval_url_of(namespace, name);
        let retry_by = approvals
            .get(namespace, name)
            .await
            .ok()
            .and_then(|a| a.retry_deadline());
        Ok(Err(
            InputRequiredResult::from_request_state(state).with_meta(approval_meta(&url, retry_by))
        ))
    }

    /// The call `name` resumed by `retry` (see `Calls::resume`): a
    /// requestState naming no call of the caller's, or a retry asking
    /// something else than its call, is invalid params (-32602).
    async fn resumed(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        retry: &Retry<'_>,
        wait: Duration,
    ) -> Result<ToolCall, ErrorData> {
        self.engine
            .calls()
            .resume_or_asked(by, namespace, name, retry.asked(), wait)
            .await
            .map_err(resume_refused)
    }

    fn approval_url(&self, approval: &Approval) -> String {
        self.approval_url_of(&approval.metadata.namespace, &approval.metadata.name)
    }

    /// The Approval resource, where an approver decides (the console has
    /// no page of one approval yet: its inbox lists them all).
    fn approval_url_of(&self, namespace: &str, name: &str) -> String {
        let base = self.public_url.as_deref().unwrap_or_default();
        format!("{base}/v1/namespaces/{namespace}/approvals/{name}")
    }
}

/// A resume the engine refused: a requestState naming no call of the
/// caller's, or a retry asking something else than its call, is invalid
/// params (-32602).
pub(super) fn resume_refused(e: EngineError) -> ErrorData {
    match e {
        EngineError::NotFound { .. } => ErrorData::invalid_params(
            "requestState names no call of yours in this namespace",
            None,
        ),
        EngineError::Refused { code, message } => {
            ErrorData::invalid_params(message, Some(json!({"code": code})))
        }
        e => ErrorData::internal_error(e.to_string(), None),
    }
}

/// The call a `requestState` names, and the resourceVersion of the
/// Approval of a later pause the client was asked about (`None`: only the
/// first pause was asked).
fn parse_state(state: &str) -> Option<(&str, Option<&str>)> {
    let rest = state.strip_prefix(STATE_PREFIX)?;
    let (name, asked) = match rest.split_once('/') {
        Some((name, version)) => (name, Some(version)),
        None => (rest, None),
    };
    (!name.is_empty()).then_some((name, asked))
}

/// True when `approval` is a later pause of its call (reopened in place
/// for its user's consent after a person approved) that the client,
/// last asked about `asked`, has not been asked yet.
fn reasks(approval: &Approval, asked: Option<&str>) -> bool {
    approval.status.phase == joch_core::ApprovalPhase::Pending
        && elicit::is_consent(approval)
        && approval.spec.payload.get("approved").is_some()
        && asked != Some(approval.metadata.resource_version.as_str())
}

/// The `_meta` of an `input_required` answer: where the Approval is
/// decided, and by when the client must retry a call that runs on it.
fn approval_meta(url: &str, retry_by: Option<Time>) -> MetaObject {
    let mut meta = MetaObject::new();
    meta.insert(META_APPROVAL_URL.to_owned(), json!(url));
    if let Some(by) = retry_by {
        meta.insert(META_RETRY_BY.to_owned(), json!(by.to_string()));
    }
    meta
}

/// A URL-mode notice's message: what waits, and what the client must do
/// for a call that runs on its retry.
fn notice(approval: &Approval, retry_by: Option<Time>) -> String {
    let tool = approval.spec.payload["tool"].as_str().unwrap_or("?");
    let mut message = format!("A call of tool {tool:?} waits for approval: decide it there.");
    if let Some(by) = retry_by {
        message.push_str(&format!(
            " Once it is approved, it runs only when this request is retried with its requestState, by {by}; if it is not, it ends TimedOut and never runs."
        ));
    }
    message
}

#[cfg(test)]
mod tests {
    use super::parse_state;

    #[test]
    fn a_state_names_the_call_and_the_later_pause_asked() {
        let table = [
            ("toolcall/c1", Some(("c1", None))),
            ("toolcall/c1/42", Some(("c1", Some("42")))),
            ("toolcall/", None),
            ("toolcall//42", None),
            ("task/c1", None),
        ];
        for (state, parsed) in table {
            assert_eq!(parse_state(state), parsed, "{state}");
        }
    }
}
