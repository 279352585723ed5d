//! Asking the MCP client's user to decide a call that waits for a person,
//! through MCP elicitation (`elicitation/create`), when the client declared
//! that it can at `initialize`.
//!
//! The user is one more approver racing the REST and CLI ones: the answer
//! decides through `Approvals::approve` / `Approvals::reject`, exactly like
//! `POST .../approvals/{name}/approve|deny`, so audit, events, idempotency
//! and the run that follows are the same. Those decisions are conditional
//! writes; an answer that comes second is dropped quietly. A client that
//! cannot be asked, or a question that fails, changes nothing: the approval
//! waits for the usual approvers and its deadline.
//!
//! Who may be asked is the policy's choice for a yes/no approval
//! (`approvalRouting.askUser`: it lets the agent's own user approve the
//! agent's call); a `userInput` value is always the user's to give.

use std::future::Future;
use std::pin::Pin;

use joch_core::ApprovalActionKind;
use joch_core::{Approval, Tool};
use joch_engine::{ApprovalDecision, Engine, EngineError, Principal};
use rmcp::model::{
    BooleanSchema, CancelledNotificationParam, ClientResult, ElicitRequest, ElicitRequestParams,
    ElicitResult, ElicitationAction, ElicitationSchema, EnumSchema, IntegerSchema, NumberSchema,
    PrimitiveSchemaDefinition, RequestId, ServerRequest, StringSchema,
};
use rmcp::service::{ElicitationMode, Peer, PeerRequestOptions, RoleServer, ServiceError};
use serde_json::Value;

/// Longest argument text put in a question; the Approval has it all.
const MAX_ARGS_CHARS: usize = 2_000;

/// True when the client declared elicitation at `initialize` (form, or
/// URL mode, in which a consent's authorization URL is relayed).
pub(super) fn client_can_answer(peer: &Peer<RoleServer>) -> bool {
    !peer.supported_elicitation_modes().is_empty()
}

/// True for a call waiting for its user's consent: its authorization URL
/// goes to clients that take URL-mode elicitation; the user's consent
/// itself comes back through joch's OAuth callback, not the answer.
pub(super) fn is_consent(approval: &Approval) -> bool {
    approval.spec.action.kind == ApprovalActionKind::Consent
}

/// Whether `approval` may be put to the client's user: a value asked by a
/// `userInput` requirement always; a yes/no approval only when its policy
/// says `askUser`.
pub(super) fn may_ask(approval: &Approval) -> bool {
    approval.spec.action.kind == ApprovalActionKind::UserInput || approval.spec.routing.ask_user
}

/// What the user is asked.
#[derive(Debug, Clone, PartialEq)]
enum Question {
    /// Yes or no, with an optional reason.
    Approve,
    /// A value for the argument `arg`; `json` when the tool wants an object
    /// or array there, which a form can only take as text.
    Value { arg: String, json: bool },
    /// Open the authorization URL and consent there (URL mode): the
    /// consent is given at the authorization server; no answer decides.
    OpenUrl,
}

/// A decision the user's answer makes; `by` is filled in by the caller.
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    Approve(ApprovalDecision),
    Reject(ApprovalDecision),
}

/// An `elicitation/create` in flight for one waiting call.
pub(super) struct Asking {
    id: RequestId,
    question: Question,
    approval: Approval,
    answer: Pin<Box<dyn Future<Output = Result<ClientResult, ServiceError>> + Send>>,
}

impl Asking {
    /// Sends the question. Must run in the `tools/call` handler's own task:
    /// rmcp then sends it on that request's response stream, where a
    /// streamable HTTP client is listening. `None` when it cannot be sent.
    pub(super) async fn start(
        peer: &Peer<RoleServer>,
        approval: Approval,
        tool: Option<&Tool>,
    ) -> Option<Self> {
        let (question, params) = request(&approval, tool);
        let mode = match question {
            Question::OpenUrl => ElicitationMode::Url,
            _ => ElicitationMode::Form,
        };
        if !peer.supported_elicitation_modes().contains(&mode) {
            return None;
        }
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        let sent = peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await;
        match sent {
            Ok(handle) => Some(Self {
                id: handle.id.clone(),
                question,
                approval,
                answer: Box::pin(handle.await_response()),
            }),
            Err(e) => {
                tracing::debug!(approval = %approval.metadata.name, error = %e, "elicitation could not be sent");
                None
            }
        }
    }

    /// Waits for the client's answer.
    pub(super) async fn answered(&mut self) -> Result<ClientResult, ServiceError> {
        (&mut self.answer).await
    }

    /// Decides by the answer, in a task of its own: once the user has
    /// answered, the decision lands even if the client leaves meanwhile.
    /// `caller` is the session's principal, deciding for its user under
    /// the engine's rules (recorded as `askedUser`), under the name `by`.
    pub(super) fn decide(
        self,
        engine: &Engine,
        answer: Result<ClientResult, ServiceError>,
        by: String,
        caller: Principal,
    ) {
        let name = self.approval.metadata.name.clone();
        let result = match answer {
            Ok(ClientResult::ElicitResult(result)) => result,
            Ok(other) => {
                tracing::warn!(approval = %name, answer = ?other, "elicitation answered with something else");
                return;
            }
            Err(e) => {
                tracing::debug!(approval = %name, error = %e, "elicitation failed; the approval waits for other approvers");
                return;
            }
        };
        let Some(verdict) = verdict(&self.question, &result) else {
            if self.question == Question::OpenUrl {
                // Opened: the consent comes back through /oauth/callback.
                return;
            }
            tracing::warn!(approval = %name, answer = ?result.content, "elicitation answer does not fit the question; left undecided");
            return;
        };
        let (engine, namespace) = (engine.clone(), self.approval.metadata.namespace.clone());
        tokio::spawn(async move { record(&engine, &namespace, &name, verdict, by, caller).await });
    }

    /// The call ended before the user answered (decided elsewhere, or timed
    /// out): the client may close the question.
    pub(super) async fn withdraw(self, peer: &Peer<RoleServer>) {
        let reason = "the call no longer waits for this answer".to_owned();
        let _ = peer
            .notify_cancelled(CancelledNotificationParam::new(Some(self.id), Some(reason)))
            .await;
    }
}

/// The call's next pause ([`Approvals::next_pause`](joch_engine::Approvals::next_pause)),
/// for the `tools/call` loop to select on; `None` once the call no longer
/// waits (or its Approval cannot be read: nothing more is asked).
pub(super) type NextPause = Pin<Box<dyn Future<Output = Option<Approval>> + Send>>;

/// The call paused on `approval` (its first pause, or a later one): a
/// question still open about an earlier pause is withdrawn, this one is
/// put to the client's user when it may be (`asking`), and the next pause
/// is waited for. Runs in the `tools/call` handler's task, as `start` must.
pub(super) async fn on_pause(
    peer: &Peer<RoleServer>,
    engine: &Engine,
    caller: &Principal,
    approval: Approval,
    tool: Option<&Tool>,
    asking: &mut Option<Asking>,
) -> NextPause {
    if let Some(earlier) = asking.take() {
        earlier.withdraw(peer).await;
    }
    let (engine, caller, seen) = (engine.clone(), caller.clone(), approval.clone());
    if may_ask(&approval) || is_consent(&approval) {
        *asking = Asking::start(peer, approval, tool).await;
    }
    Box::pin(async move {
        let (namespace, name) = (&seen.metadata.namespace, &seen.metadata.name);
        let approvals = engine.approvals();
        let next = approvals.next_pause(&caller, namespace, name, &seen).await;
        next.unwrap_or_else(|e| {
            tracing::debug!(approval = %name, error = %e, "the call's next pause cannot be heard");
            None
        })
    })
}

/// Whom the user's answer to a question about `call` is recorded as.
pub(super) fn decider_name(call: &joch_core::ToolCall) -> String {
    match &call.spec.agent_ref {
        Some(agent) => format!("mcp-elicitation:{}", agent.name),
        None => "mcp-elicitation".to_owned(),
    }
}

/// The form put to a client of protocol 2026-07-28 in an `input_required`
/// answer: the question a live session's client would be sent.
pub(super) fn form(approval: &Approval, tool: Option<&Tool>) -> ElicitRequestParams {
    request(approval, tool).1
}

/// Decides `approval` by a client's answer to [`form`], sent with its retry,
/// as an answer to a live question decides; returns once recorded (or
/// dropped: an answer that does not fit, or comes after another decision).
pub(super) async fn decide_by_answer(
    engine: &Engine,
    approval: &Approval,
    tool: Option<&Tool>,
    answer: &Value,
    by: String,
    caller: Principal,
) {
    let name = &approval.metadata.name;
    if !may_ask(approval) {
        // The client was told where a person decides (URL mode), not asked.
        tracing::debug!(approval = %name, "an answer to a notice decides nothing");
        return;
    }
    let (question, _) = request(approval, tool);
    let verdict = serde_json::from_value::<ElicitResult>(answer.clone())
        .ok()
        .and_then(|result| verdict(&question, &result));
    let Some(verdict) = verdict else {
        if question != Question::OpenUrl {
            tracing::warn!(approval = %name, %answer, "input response does not fit the question; left undecided");
        }
        return;
    };
    let namespace = &approval.metadata.namespace;
    record(engine, namespace, name, verdict, by, caller).await;
}

/// Records the user's verdict through the engine, like any approver's.
async fn record(
    engine: &Engine,
    namespace: &str,
    name: &str,
    verdict: Verdict,
    by: String,
    caller: Principal,
) {
    let (approve, decision) = match verdict {
        Verdict::Approve(d) => (true, d),
        Verdict::Reject(d) => (false, d),
    };
    let decision = ApprovalDecision {
        by,
        for_user: true,
        ..decision
    };
    let approvals = engine.approvals();
    let decided = if approve {
        approvals
            .approve(&caller, namespace, name, decision)
            .await
            .map(drop)
    } else {
        approvals
            .reject(&caller, namespace, name, decision)
            .await
            .map(drop)
    };
    match decided {
        Ok(()) => {}
        // Another approver, or the deadline, decided first: theirs stands.
        Err(
            EngineError::Refused {
                code: joch_core::RefusalCode::ApprovalDecided,
                ..
            }
            | EngineError::NotFound { .. },
        ) => {
            tracing::debug!(approval = %name, "elicitation answered after the approval was decided");
        }
        Err(e) => {
            tracing::warn!(approval = %name, error = %e, "elicitation answer could not be recorded");
        }
    }
}

/// The question for `approval`: its message (tool, arguments as recorded,
/// why) and the form the answer fills in.
fn request(approval: &Approval, tool: Option<&Tool>) -> (Question, ElicitRequestParams) {
    let payload = &approval.spec.payload;
    if let (true, Some(url)) = (
        is_consent(approval),
        payload.get("consentUrl").and_then(Value::as_str),
    ) {
        let params = ElicitRequestParams::UrlElicitationParams {
            meta: None,
            message: approval.spec.risk.summary.clone(),
            url: url.to_owned(),
            elicitation_id: approval.metadata.uid.clone(),
        };
        return (Question::OpenUrl, params);
    }
    let tool_name = payload.get("tool").and_then(Value::as_str).unwrap_or("?");
    let mut args = payload
        .get("input")
        .map(Value::to_string)
        .unwrap_or_default();
    if args.chars().count() > MAX_ARGS_CHARS {
        args = args
            .chars()
            .take(MAX_ARGS_CHARS)
            .chain("…".chars())
            .collect();
    }
    let user_input = payload.get("userInput");
    let (question, message, schema) = match user_input {
        Some(input) => {
            let arg = input
                .get("targetArg")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let prompt = input
                .get("prompt")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let declared = tool.and_then(|t| declared_schema(&t.spec.input_schema, arg));
            let (field, json) = value_field(declared, arg, prompt);
            let message = format!(
                "A call of tool {tool_name:?} needs a value for {arg:?}. {prompt}\n\
                 Arguments so far: {args}"
            );
            let schema = ElicitationSchema::new([(arg.to_owned(), field)].into())
                .with_required(vec![arg.to_owned()]);
            (
                Question::Value {
                    arg: arg.to_owned(),
                    json,
                },
                message,
                schema,
            )
        }
        None => {
            let why = &approval.spec.risk.summary;
            let policy = approval
                .spec
                .policy_ref
                .as_ref()
                .map(|p| format!(" (policy {}, version {})", p.name, p.version))
                .unwrap_or_default();
            let message = format!(
                "An agent's call of tool {tool_name:?} waits for approval.\n\
                 Arguments: {args}\n\
                 Why it needs approval: {why}{policy}\n\
                 Approve it?"
            );
            let approve = BooleanSchema::new()
                .title("Approve")
                .description("Run the call as shown");
            let reason = StringSchema::new()
                .title("Reason")
                .description("Recorded with the decision; shown to the agent if you deny");
            let schema = ElicitationSchema::new(
                [
                    (
                        "approve".to_owned(),
                        PrimitiveSchemaDefinition::Boolean(approve),
                    ),
                    (
                        "reason".to_owned(),
                        PrimitiveSchemaDefinition::String(reason),
                    ),
                ]
                .into(),
            )
            .with_required(vec!["approve".to_owned()]);
            (Question::Approve, message, schema)
        }
    };
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    };
    (question, params)
}

/// The tool's input schema at the dotted path `arg`, if it declares one.
fn declared_schema<'a>(schema: &'a Value, arg: &str) -> Option<&'a Value> {
    arg.split('.')
        .try_fold(schema, |at, segment| at.get("properties")?.get(segment))
}

/// The form field asking for the value, typed as the tool declares it when
/// elicitation has that type (string, string enum, number, integer,
/// boolean), else text; and whether that text is to be read as JSON.
fn value_field(
    declared: Option<&Value>,
    arg: &str,
    prompt: &str,
) -> (PrimitiveSchemaDefinition, bool) {
    let kind = declared.and_then(|d| match d.get("type") {
        Some(Value::String(t)) => Some(t.as_str()),
        // `["integer", "null"]`: the type that is not null.
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null"),
        _ => None,
    });
    let title = arg.to_owned();
    let description = match (
        prompt,
        declared
            .and_then(|d| d.get("description"))
            .and_then(Value::as_str),
    ) {
        ("", Some(d)) => d.to_owned(),
        (p, _) => p.to_owned(),
    };
    let choices: Option<Vec<String>> = declared
        .and_then(|d| d.get("enum"))
        .and_then(Value::as_array)
        .and_then(|values| {
            values
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect()
        });
    let field = match (kind, choices) {
        (Some("string") | None, Some(choices)) if !choices.is_empty() => {
            PrimitiveSchemaDefinition::Enum(
                EnumSchema::builder(choices)
                    .title(title)
                    .description(description)
                    .build(),
            )
        }
        (Some("number"), _) => PrimitiveSchemaDefinition::Number(
            NumberSchema::new().title(title).description(description),
        ),
        (Some("integer"), _) => PrimitiveSchemaDefinition::Integer(
            IntegerSchema::new().title(title).description(description),
        ),
        (Some("boolean"), _) => PrimitiveSchemaDefinition::Boolean(
            BooleanSchema::new().title(title).description(description),
        ),
        _ => PrimitiveSchemaDefinition::String(
            StringSchema::new().title(title).description(description),
        ),
    };
    (field, matches!(kind, Some("object" | "array")))
}

/// The decision an answer makes; `None` when it does not answer the
/// question (the approval then waits for someone else).
fn verdict(question: &Question, result: &ElicitResult) -> Option<Verdict> {
    let declined = |said: &str| {
        let reason = format!("the user {said} in the MCP client");
        Verdict::Reject(ApprovalDecision {
            rationale: Some(reason.clone()),
            message: Some(reason),
            ..ApprovalDecision::default()
        })
    };
    let content = match result.action {
        // A URL-mode question informs (open this page): no answer to it decides.
        _ if *question == Question::OpenUrl => return None,
        ElicitationAction::Accept => result.content.as_ref()?,
        ElicitationAction::Decline => return Some(declined("declined")),
        // Dismissed without an explicit choice (MCP): no decision.
        ElicitationAction::Cancel => return None,
        // A later protocol's action this version does not know: no decision.
        _ => return None,
    };
    match question {
        Question::Approve => {
            let reason = content
                .get("reason")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(str::to_owned);
            let decision = ApprovalDecision {
                rationale: reason.clone(),
                ..ApprovalDecision::default()
            };
            match content.get("approve")?.as_bool()? {
                true => Some(Verdict::Approve(decision)),
                false => Some(Verdict::Reject(ApprovalDecision {
                    message: Some(
                        reason.unwrap_or_else(|| "the user did not approve the call".to_owned()),
                    ),
                    ..decision
                })),
            }
        }
        Question::Value { arg, json } => {
            let value = match content.get(arg)? {
                // Asked as text for an object or array: read it as JSON if it is.
                Value::String(text) if *json => {
                    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
                }
                value => value.clone(),
            };
            Some(Verdict::Approve(ApprovalDecision {
                value: Some(value),
                rationale: Some("given by the user in the MCP client".to_owned()),
                ..ApprovalDecision::default()
            }))
        }
        // Accepted above: nothing to decide.
        Question::OpenUrl => None,
    }
}

#[cfg(test)]
mod tests;
