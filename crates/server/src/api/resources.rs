//! `/v1/namespaces/{ns}/{plural}[/{name}]` for configured resources (tools,
//! policies): the same five verbs for every kind.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use joch_engine::Configurable;
use serde::Deserialize;

use super::{List, ListQueryParams};
use crate::extract::{Caller, Manifest, Path, Query};
use crate::{ApiError, AppState};

pub(crate) async fn create<T: Configurable>(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
    Manifest(object): Manifest<T>,
) -> Result<(StatusCode, Json<T>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(state.engine.resources().create(&by, &ns, object).await?),
    ))
}

pub(crate) async fn replace<T: Configurable>(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
    Manifest(object): Manifest<T>,
) -> Result<Json<T>, ApiError> {
    Ok(Json(
        state
            .engine
            .resources()
            .replace(&by, &ns, &name, object)
            .await?,
    ))
}

pub(crate) async fn get<T: Configurable>(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<T>, ApiError> {
    Ok(Json(state.engine.resources().read(&by, &ns, &name).await?))
}

pub(crate) async fn list<T: Configurable>(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
    Query(q): Query<ListQueryParams>,
) -> Result<Json<List<T>>, ApiError> {
    Ok(Json(
        state
            .engine
            .resources()
            .read_all(&by, &ns, q.into())
            .await?
            .into(),
    ))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct DeleteParams {
    pub(crate) resource_version: Option<String>,
}

pub(crate) async fn delete<T: Configurable>(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<DeleteParams>,
) -> Result<Json<T>, ApiError> {
    Ok(Json(
        state
            .engine
            .resources()
            .delete(&by, &ns, &name, q.resource_version.as_deref())
            .await?,
    ))
}
