//! `GET /v1/namespaces/{ns}/tools[/{name}]`: the tools that exist for the
//! caller (a token's tool selector hides the others: they answer 404, as
//! a tool that does not exist). Writes are the shared resource verbs.

use axum::Json;
use axum::extract::State;
use joch_core::Tool;

use super::{List, ListQueryParams};
use crate::extract::{Caller, Path, Query};
use crate::{ApiError, AppState};

pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
    Query(q): Query<ListQueryParams>,
) -> Result<Json<List<Tool>>, ApiError> {
    Ok(Json(
        state
            .engine
            .resources()
            .list_tools(&by, &ns, q.into())
            .await?
            .into(),
    ))
}

pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<Tool>, ApiError> {
    Ok(Json(
        state.engine.resources().get_tool(&by, &ns, &name).await?,
    ))
}
