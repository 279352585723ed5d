//! Claude Code / Claude Agent SDK HTTP hooks: `POST /v1/hooks/claude`
//! takes the bodies of `PreToolUse`, `PostToolUse` and `PostToolUseFailure`
//! and answers in their format. The `tool_use_id` is the ToolCall's name;
//! the session is its execution.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use joch_core::{CallError, ErrorCode, HookAnswer, Principal, ToolCall};
use joch_engine::{Deferred, HookResult};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{namespace, reference};
use crate::extract::{Body, Caller, Query};
use crate::{ApiError, ApiWord, AppState};

/// Header naming the agent; Claude's hook bodies do not.
const AGENT_HEADER: &str = "joch-agent";

/// The fields joch reads from a hook body; others (`transcript_path`,
/// `cwd`, `permission_mode`...) are ignored.
#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct HookBody {
    session_id: Option<String>,
    hook_event_name: String,
    tool_name: String,
    #[serde(default)]
    tool_input: Value,
    tool_use_id: String,
    #[serde(default)]
    tool_response: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    /// Set when a subagent made the call.
    #[serde(default)]
    agent_type: Option<String>,
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct HookParams {
    /// `ask`: a call that needs a person's approval is answered `ask`, and
    /// Claude Code asks its user; by default joch waits for an approver.
    #[serde(default)]
    on_defer: Option<String>,
}

/// `/v1/hooks/claude`.
pub(crate) async fn default_namespace(
    State(state): State<AppState>,
    Caller(by): Caller,
    headers: HeaderMap,
    Query(params): Query<HookParams>,
    Body(body): Body<HookBody>,
) -> Result<Json<Value>, ApiError> {
    let ns = namespace(None, &headers);
    serve(state, by, ns, &headers, params, body).await
}

/// `/v1/namespaces/{ns}/hooks/claude`.
pub(crate) async fn in_namespace(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
    headers: HeaderMap,
    Query(params): Query<HookParams>,
    Body(body): Body<HookBody>,
) -> Result<Json<Value>, ApiError> {
    serve(state, by, ns, &headers, params, body).await
}

async fn serve(
    state: AppState,
    by: Principal,
    ns: String,
    headers: &HeaderMap,
    params: HookParams,
    body: HookBody,
) -> Result<Json<Value>, ApiError> {
    let deferred = match params.on_defer.as_deref() {
        None | Some("wait") => Deferred::Wait,
        Some("ask") => Deferred::AskAgent,
        Some(other) => {
            return Err(ApiError::new(
                axum::http::StatusCode::BAD_REQUEST,
                ApiWord::BadRequest,
                format!("onDefer must be wait or ask, got {other:?}"),
            ));
        }
    };
    let answer = match body.hook_event_name.as_str() {
        "PreToolUse" => pre_tool_use(&state, &by, &ns, headers, body, deferred).await?,
        "PostToolUse" => {
            let output = body.tool_response.unwrap_or(Value::Null);
            post_tool_use(
                &state,
                &by,
                &ns,
                &body.tool_use_id,
                HookResult::Output(output),
            )
            .await?
        }
        "PostToolUseFailure" => {
            let message = match &body.error {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => "the tool failed".to_owned(),
            };
            let failure = HookResult::Failed(CallError::new(ErrorCode::ToolError, message));
            post_tool_use(&state, &by, &ns, &body.tool_use_id, failure).await?
        }
        other => {
            return Err(ApiError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                ApiWord::UnsupportedHookEvent,
                format!(
                    "joch handles PreToolUse, PostToolUse and PostToolUseFailure, not {other:?}"
                ),
            ));
        }
    };
    Ok(Json(answer))
}

async fn pre_tool_use(
    state: &AppState,
    by: &Principal,
    ns: &str,
    headers: &HeaderMap,
    body: HookBody,
    deferred: Deferred,
) -> Result<Value, ApiError> {
    let mut call = ToolCall::of(body.tool_use_id, body.tool_name, body.tool_input);
    let agent = headers
        .get(AGENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(body.agent_type)
        .unwrap_or_else(|| "claude-code".to_owned());
    call.spec.agent_ref = reference("spec.agentRef.name", Some(&agent));
    call.spec.execution_ref = reference("spec.executionRef.name", body.session_id.as_deref());
    let verdict = state
        .engine
        .calls()
        .hook_request_deferring(by, ns, call, deferred)
        .await?;
    let mut output = json!({"hookEventName": "PreToolUse"});
    // Claude's permission: a modification runs, with the updated input.
    let permission = match verdict.decision {
        HookAnswer::Modify => HookAnswer::Allow,
        other => other,
    };
    let reason = verdict.reason.clone();
    output["permissionDecision"] = json!(permission.as_str());
    output["permissionDecisionReason"] = json!(reason.unwrap_or_else(|| match permission {
        HookAnswer::Deny => "denied by joch".to_owned(),
        HookAnswer::Ask => "joch asks a person to approve this call".to_owned(),
        _ => "allowed by joch".to_owned(),
    }));
    if let Some(input) = verdict
        .modified
        .filter(|_| verdict.decision == HookAnswer::Modify)
    {
        output["updatedInput"] = input;
    }
    Ok(json!({"hookSpecificOutput": output}))
}

/// After the tool ran: Claude cannot take the result back, so a denied or
/// modified result blocks with a reason the model reads.
async fn post_tool_use(
    state: &AppState,
    by: &Principal,
    ns: &str,
    id: &str,
    result: HookResult,
) -> Result<Value, ApiError> {
    let verdict = state.engine.calls().hook_result(by, ns, id, result).await?;
    Ok(match (verdict.decision, verdict.modified) {
        (HookAnswer::Deny, _) => json!({
            "decision": "block",
            "reason": verdict.reason.unwrap_or_else(|| "joch withheld this result".to_owned()),
        }),
        (HookAnswer::Modify, Some(result)) => json!({
            "decision": "block",
            "reason": format!("joch's policy changed this result; use this instead: {result}"),
        }),
        _ => json!({}),
    })
}
