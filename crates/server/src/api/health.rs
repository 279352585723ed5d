//! Liveness and readiness.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::extract::Caller;
use crate::{ApiError, ApiWord, AppState};

/// The process is up.
pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The store can serve: the process may take traffic.
pub(crate) async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state.engine.store().ping().await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ApiWord::StoreUnavailable,
            e.to_string(),
        )
    })?;
    Ok(Json(json!({"status": "ready"})))
}

/// The process's metrics, in Prometheus text: the operator's only, as
/// their series name every namespace and tool.
pub(crate) async fn metrics(
    State(state): State<AppState>,
    Caller(by): Caller,
) -> Result<Response, ApiError> {
    joch_engine::may(&by, &joch_engine::Action::ReadMetrics)?;
    let Some(metrics) = &state.config.metrics else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            ApiWord::NotFound,
            "no such resource",
        ));
    };
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        (metrics.0)(),
    )
        .into_response())
}
