//! `/v1/namespaces/{ns}/audit`: the namespace's tamper-evident audit chain,
//! and its verification.

use axum::Json;
use axum::extract::State;
use joch_core::audit::Checkpoint;
use joch_engine::{AuditLine, AuditReport};
use serde::Deserialize;

use crate::extract::{Caller, Path, Query};
use crate::{ApiError, AppState};

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Page {
    /// Entries numbered above this one.
    #[serde(default)]
    after: u64,
    /// At most this many (default 1000, at most 10 000).
    limit: Option<usize>,
}

pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
    Query(page): Query<Page>,
) -> Result<Json<Vec<AuditLine>>, ApiError> {
    let limit = page.limit.unwrap_or(1000).clamp(1, 10_000);
    Ok(Json(
        state
            .engine
            .audit()
            .entries(&by, &ns, page.after, limit)
            .await?,
    ))
}

pub(crate) async fn verify(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
) -> Result<Json<AuditReport>, ApiError> {
    Ok(Json(state.engine.audit().verify(&by, &ns).await?))
}

pub(crate) async fn checkpoints(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
) -> Result<Json<Vec<Checkpoint>>, ApiError> {
    Ok(Json(state.engine.audit().checkpoints(&by, &ns).await?))
}
