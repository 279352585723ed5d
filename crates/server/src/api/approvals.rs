//! `/v1/namespaces/{ns}/approvals[/{name}[/approve|/deny|/edit]]`.

use axum::Json;
use axum::extract::State;
use joch_core::Approval;
use joch_engine::ApprovalDecision;
use serde::Deserialize;
use serde_json::Value;

use super::{List, ListQueryParams};
use crate::extract::{Body, Caller, Path, Query};
use crate::{ApiError, AppState};

pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<Approval>, ApiError> {
    Ok(Json(state.engine.approvals().read(&by, &ns, &name).await?))
}

pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
    Query(q): Query<ListQueryParams>,
) -> Result<Json<List<Approval>>, ApiError> {
    Ok(Json(
        state
            .engine
            .approvals()
            .read_all(&by, &ns, q.into())
            .await?
            .into(),
    ))
}

/// A decision, as an approver sends it.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct DecisionBody {
    /// Who decides, when joch has no authentication; with it, the token's
    /// name is recorded and this is ignored.
    #[serde(default)]
    approved_by: Option<String>,
    #[serde(default)]
    rationale: Option<String>,
    /// For the model, when denying.
    #[serde(default)]
    message: Option<String>,
    /// `edit`: the arguments to run instead.
    #[serde(default)]
    input: Option<Value>,
    /// For a user-input request: the value to inject.
    #[serde(default)]
    value: Option<Value>,
    /// Let the decision stand for later calls of the same tool.
    #[serde(default)]
    always: bool,
}

impl DecisionBody {
    /// The decision; the engine records it under the authenticated
    /// principal's name (or, without authentication, `approvedBy`).
    fn into_decision(self) -> ApprovalDecision {
        ApprovalDecision {
            by: self.approved_by.unwrap_or_default(),
            rationale: self.rationale,
            message: self.message,
            edited_input: self.input,
            value: self.value,
            always: self.always,
            for_user: false,
        }
    }
}

/// Approves (with `input`, edits); the call runs in the background and the
/// waiting caller gets its result.
pub(crate) async fn approve(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
    Body(body): Body<DecisionBody>,
) -> Result<Json<Approval>, ApiError> {
    let decision = body.into_decision();
    Ok(Json(
        state
            .engine
            .approvals()
            .approve(&by, &ns, &name, decision)
            .await?,
    ))
}

/// Approves with new arguments (required here), checked against the tool's
/// inputSchema and then by the request policies again.
pub(crate) async fn edit(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
    Body(body): Body<DecisionBody>,
) -> Result<Json<Approval>, ApiError> {
    let decision = body.into_decision();
    if decision.edited_input.is_none() {
        return Err(joch_engine::EngineError::InvalidDecision(
            "edit needs input: the arguments to run".to_owned(),
        )
        .into());
    }
    Ok(Json(
        state
            .engine
            .approvals()
            .approve(&by, &ns, &name, decision)
            .await?,
    ))
}

/// Rejects; the call ends Denied and the model gets the message.
pub(crate) async fn deny(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
    Body(body): Body<DecisionBody>,
) -> Result<Json<Approval>, ApiError> {
    let decision = body.into_decision();
    Ok(Json(
        state
            .engine
            .approvals()
            .reject(&by, &ns, &name, decision)
            .await?,
    ))
}
