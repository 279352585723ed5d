//! `/v1/namespaces/{ns}/toolcalls[/{name}]`. A POST executes the call; there
//! is no DELETE: the ledger keeps every call.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use joch_core::ToolCall;
use serde::Deserialize;

use super::{List, ListQueryParams};
use crate::extract::{Manifest, Path, Query};
use crate::{ApiError, AppState};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateParams {
    /// `false`: answer 202 once the call is recorded, and run it in the background.
    #[serde(default = "yes")]
    wait: bool,
}

fn yes() -> bool {
    true
}

/// Runs the call: 201 with the settled record, or with `?wait=false` 202
/// with the `Pending` record.
pub(crate) async fn create(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    Query(params): Query<CreateParams>,
    Manifest(call): Manifest<ToolCall>,
) -> Result<Response, ApiError> {
    let (status, call) = if params.wait {
        (
            StatusCode::CREATED,
            state.engine.call(&ns, call).await?.into_response(),
        )
    } else {
        (StatusCode::ACCEPTED, state.engine.submit(&ns, call).await?)
    };
    let location = format!("/v1/namespaces/{ns}/toolcalls/{}", call.metadata.name);
    Ok((status, [(header::LOCATION, location)], Json(call)).into_response())
}

pub(crate) async fn get(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<ToolCall>, ApiError> {
    Ok(Json(state.engine.get_call(&ns, &name).await?))
}

pub(crate) async fn list(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    Query(q): Query<ListQueryParams>,
) -> Result<Json<List<ToolCall>>, ApiError> {
    Ok(Json(state.engine.list_calls(&ns, q.into()).await?.into()))
}

/// Changes labels and annotations only.
pub(crate) async fn relabel(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    Manifest(call): Manifest<ToolCall>,
) -> Result<Json<ToolCall>, ApiError> {
    Ok(Json(state.engine.relabel_call(&ns, &name, call).await?))
}
