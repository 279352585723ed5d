//! `/v1/namespaces/{ns}/tools[/{name}]`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use joch_core::Tool;
use serde::Deserialize;

use super::{List, ListQueryParams};
use crate::extract::{Manifest, Path, Query};
use crate::{ApiError, AppState};

pub(crate) async fn create(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    Manifest(tool): Manifest<Tool>,
) -> Result<(StatusCode, Json<Tool>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(state.engine.create_tool(&ns, tool).await?),
    ))
}

pub(crate) async fn replace(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    Manifest(tool): Manifest<Tool>,
) -> Result<Json<Tool>, ApiError> {
    Ok(Json(state.engine.replace_tool(&ns, &name, tool).await?))
}

pub(crate) async fn get(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<Tool>, ApiError> {
    Ok(Json(state.engine.get_tool(&ns, &name).await?))
}

pub(crate) async fn list(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    Query(q): Query<ListQueryParams>,
) -> Result<Json<List<Tool>>, ApiError> {
    Ok(Json(state.engine.list_tools(&ns, q.into()).await?.into()))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct DeleteParams {
    resource_version: Option<String>,
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<DeleteParams>,
) -> Result<Json<Tool>, ApiError> {
    Ok(Json(
        state
            .engine
            .delete_tool(&ns, &name, q.resource_version.as_deref())
            .await?,
    ))
}
