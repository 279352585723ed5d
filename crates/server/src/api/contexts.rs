//! `/v1/namespaces/{ns}/callcontexts/{execution}`: the state declarative
//! tools keep for an execution, read-only.

use axum::Json;
use axum::extract::State;
use joch_core::actions::CallContext;

use crate::extract::{Caller, Path};
use crate::{ApiError, AppState};

pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<CallContext>, ApiError> {
    Ok(Json(
        state
            .engine
            .resources()
            .call_context(&by, &ns, &name)
            .await?,
    ))
}
