//! `/v1/namespaces/{ns}`: a namespace's settings.

use axum::Json;
use axum::extract::State;
use joch_core::Namespace;

use crate::extract::{Caller, Manifest, Path};
use crate::{ApiError, AppState};

/// The settings, or the defaults when none were stored.
pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
) -> Result<Json<Namespace>, ApiError> {
    Ok(Json(
        state.engine.resources().get_namespace(&by, &ns).await?,
    ))
}

/// Creates or replaces the settings.
pub(crate) async fn put(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
    Manifest(settings): Manifest<Namespace>,
) -> Result<Json<Namespace>, ApiError> {
    Ok(Json(
        state
            .engine
            .resources()
            .put_namespace(&by, &ns, settings)
            .await?,
    ))
}
