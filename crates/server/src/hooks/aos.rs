//! The AOS guardian endpoint: `POST /v1/hooks/aos`, JSON-RPC 2.0 with
//! `steps/toolCallRequest` (before the agent runs a tool) and
//! `steps/toolCallResult` (after). AOS's `toolCallRequest.executionId`, the
//! id of one tool execution, is the ToolCall's name; it ties the result to
//! the request.
//!
//! Protocol failures are JSON-RPC errors (HTTP 200): -32700 unparsable,
//! -32600 not a request, -32601 unknown method, -32602 bad params, and
//! -32000 for a refusal by joch, with joch's `{code, message, details}` as
//! `error.data`. Nothing is recorded for a request that fails before its
//! call is admitted.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use joch_core::toolcall::HookContext;
use joch_core::{CallError, ErrorCode, HookAnswer, Principal, ToolCall};
use joch_engine::{HookResult, HookVerdict, named_values};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{namespace, reference};
use crate::extract::Caller;
use crate::{ApiError, AppState};

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const REFUSED: i64 = -32000;

/// `/v1/hooks/aos`.
pub(crate) async fn default_namespace(
    State(state): State<AppState>,
    Caller(by): Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(state, by, namespace(None, &headers), body).await
}

/// `/v1/namespaces/{ns}/hooks/aos`.
pub(crate) async fn in_namespace(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
    body: Bytes,
) -> Response {
    serve(state, by, ns, body).await
}

async fn serve(state: AppState, by: Principal, ns: String, body: Bytes) -> Response {
    let message: Value = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(e) => {
            return Json(error(
                Value::Null,
                PARSE_ERROR,
                format!("not JSON: {e}"),
                None,
            ))
            .into_response();
        }
    };
    match message {
        // A batch: each member answered in turn; notifications get no answer.
        Value::Array(batch) if !batch.is_empty() => {
            let mut answers = Vec::new();
            for member in batch {
                if let Some(answer) = handle(&state, &by, &ns, member).await {
                    answers.push(answer);
                }
            }
            match answers.is_empty() {
                true => StatusCode::NO_CONTENT.into_response(),
                false => Json(Value::Array(answers)).into_response(),
            }
        }
        single => match handle(&state, &by, &ns, single).await {
            Some(answer) => Json(answer).into_response(),
            None => StatusCode::NO_CONTENT.into_response(),
        },
    }
}

#[derive(Deserialize)]
struct Request {
    jsonrpc: String,
    method: String,
    #[serde(default)]
    params: Value,
}

/// Answers one JSON-RPC message; `None` for a notification (no `id`).
async fn handle(state: &AppState, by: &Principal, ns: &str, message: Value) -> Option<Value> {
    let id = message.get("id").cloned();
    let answer_id = id.clone().unwrap_or(Value::Null);
    let request = match serde_json::from_value::<Request>(message) {
        Ok(r) if r.jsonrpc == "2.0" => r,
        Ok(_) => {
            return Some(error(
                answer_id,
                INVALID_REQUEST,
                "jsonrpc must be \"2.0\"".into(),
                None,
            ));
        }
        Err(e) => {
            return Some(error(
                answer_id,
                INVALID_REQUEST,
                format!("not a JSON-RPC request: {e}"),
                None,
            ));
        }
    };
    let outcome = match request.method.as_str() {
        "steps/toolCallRequest" => tool_call_request(state, by, ns, request.params).await,
        "steps/toolCallResult" => tool_call_result(state, by, ns, request.params).await,
        other => Err((METHOD_NOT_FOUND, format!("unknown method {other:?}"), None)),
    };
    let answer = match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": answer_id, "result": result}),
        Err((code, message, data)) => error(answer_id, code, message, data),
    };
    id.map(|_| answer)
}

type RpcError = (i64, String, Option<Value>);

fn error(id: Value, code: i64, message: String, data: Option<Value>) -> Value {
    let mut error = json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

fn refused(e: joch_engine::EngineError) -> RpcError {
    let api = ApiError::from(e);
    // A name or field joch rejects is the caller's params at fault.
    let code = match api.status {
        StatusCode::UNPROCESSABLE_ENTITY | StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND => {
            INVALID_PARAMS
        }
        _ => REFUSED,
    };
    let data = json!({"code": api.code, "message": api.message, "details": api.details});
    (code, api.message, Some(data))
}

fn params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    serde_path_to_error::deserialize(params).map_err(|e| {
        let at = e.path().to_string();
        (INVALID_PARAMS, format!("params.{at}: {}", e.inner()), None)
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestParams {
    tool_call_request: ToolCallRequest,
    #[serde(default)]
    reasoning: Option<Value>,
    #[serde(default)]
    context: Context,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolCallRequest {
    execution_id: String,
    tool_id: String,
    #[serde(default)]
    inputs: Vec<Value>,
    /// joch's extension: the caller's idempotency key.
    #[serde(default)]
    idempotency_key: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Context {
    #[serde(default)]
    agent: Option<Value>,
    #[serde(default)]
    session: Option<Value>,
    #[serde(default)]
    turn_id: Option<String>,
    #[serde(default)]
    step_id: Option<String>,
}

async fn tool_call_request(
    state: &AppState,
    by: &Principal,
    ns: &str,
    raw: Value,
) -> Result<Value, RpcError> {
    let p: RequestParams = params(raw)?;
    let request = p.tool_call_request;
    let mut call = ToolCall::of(
        request.execution_id,
        request.tool_id,
        Value::Object(named_values(&request.inputs)),
    );
    let text = |v: &Option<Value>, key: &str| {
        v.as_ref()
            .and_then(|v| v.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let agent = text(&p.context.agent, "id").or_else(|| text(&p.context.agent, "name"));
    call.spec.agent_ref = reference("spec.agentRef.name", agent.as_deref());
    call.spec.execution_ref = reference(
        "spec.executionRef.name",
        text(&p.context.session, "id").as_deref(),
    );
    call.spec.hook_context = Some(HookContext {
        aos_turn_id: p.context.turn_id,
        aos_step_id: p.context.step_id,
    });
    let mut reported = Map::new();
    if let Some(reasoning) = p.reasoning {
        reported.insert("reasoning".to_owned(), reasoning);
    }
    if let Some(agent) = p.context.agent {
        reported.insert("agent".to_owned(), agent);
    }
    call.spec.context = (!reported.is_empty()).then_some(Value::Object(reported));
    if let Some(key) = request.idempotency_key {
        call.spec.side_effects = Some(joch_core::CallSideEffects {
            idempotency_key: Some(key),
            ..Default::default()
        });
    }
    let verdict = state
        .engine
        .calls()
        .hook_request(by, ns, call)
        .await
        .map_err(refused)?;
    let mut answer = verdict_json(&verdict);
    if let Some(args) = verdict
        .modified
        .as_ref()
        .filter(|_| verdict.decision == HookAnswer::Modify)
    {
        answer["modifiedRequest"] = json!({
            "executionId": verdict.call.metadata.name,
            "toolId": verdict.call.tool_name(),
            "inputs": args.as_object().map(|args| {
                args.iter().map(|(name, value)| json!({"name": name, "value": value})).collect::<Vec<_>>()
            }),
        });
    }
    Ok(answer)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResultParams {
    tool_call_result: ToolCallResult,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolCallResult {
    execution_id: String,
    /// The tool's output, as one value.
    #[serde(default)]
    result: Option<Value>,
    /// Or as named outputs, `[{name, value}]`.
    #[serde(default)]
    outputs: Option<Vec<Value>>,
    #[serde(default)]
    is_error: bool,
    /// What went wrong: a message, or `{message, code}`.
    #[serde(default)]
    error: Option<Value>,
}

async fn tool_call_result(
    state: &AppState,
    by: &Principal,
    ns: &str,
    raw: Value,
) -> Result<Value, RpcError> {
    let r = params::<ResultParams>(raw)?.tool_call_result;
    let output = match (r.result, r.outputs) {
        (Some(result), _) => result,
        (None, Some(outputs)) => Value::Object(named_values(&outputs)),
        (None, None) => Value::Null,
    };
    let result = match (&r.error, r.is_error) {
        (None, false) => HookResult::Output(output),
        (error, _) => {
            let message = match error {
                Some(Value::String(s)) => s.clone(),
                Some(e) => e
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| e.to_string(), str::to_owned),
                None => "the tool reported an error".to_owned(),
            };
            let mut failure = CallError::new(ErrorCode::ToolError, message);
            failure.details = Some(output).filter(|o| !o.is_null());
            HookResult::Failed(failure)
        }
    };
    let verdict = state
        .engine
        .calls()
        .hook_result(by, ns, &r.execution_id, result)
        .await
        .map_err(refused)?;
    let mut answer = verdict_json(&verdict);
    if let Some(result) = verdict
        .modified
        .as_ref()
        .filter(|_| verdict.decision == HookAnswer::Modify)
    {
        answer["modifiedResult"] = result.clone();
    }
    Ok(answer)
}

fn verdict_json(verdict: &HookVerdict) -> Value {
    let mut answer = json!({"decision": verdict.decision.as_str()});
    for (key, value) in [
        ("reason", &verdict.reason),
        ("policyId", &verdict.policy_id),
        ("policyVersion", &verdict.policy_version),
    ] {
        if let Some(value) = value {
            answer[key] = json!(value);
        }
    }
    answer["toolCall"] = json!({
        "name": verdict.call.metadata.name,
        "phase": verdict.call.status.phase.as_str(),
    });
    answer
}
