//! `GET /v1/namespaces/{ns}/costs` and `GET /v1/costs`: what calls cost,
//! grouped by tool, agent, execution or namespace, since a time.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use joch_core::Time;
use joch_core::cost::from_micros;
use joch_core::limits::COST_WINDOW_SECONDS;
use joch_engine::CostGroup;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::extract::{Caller, Path, Query};
use crate::{ApiError, ApiWord, AppState};

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CostParams {
    /// `tool`, `agent`, `execution`, `namespace`, or none for one total.
    group_by: Option<String>,
    /// An RFC 3339 time, or a duration back from now such as `24h`, `30m`.
    since: Option<String>,
}

pub(crate) async fn in_namespace(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
    Query(params): Query<CostParams>,
) -> Result<Json<Value>, ApiError> {
    report(&state, &by, &ns, params).await
}

pub(crate) async fn everywhere(
    State(state): State<AppState>,
    Caller(by): Caller,
    Query(params): Query<CostParams>,
) -> Result<Json<Value>, ApiError> {
    report(&state, &by, "", params).await
}

async fn report(
    state: &AppState,
    by: &joch_engine::Principal,
    ns: &str,
    params: CostParams,
) -> Result<Json<Value>, ApiError> {
    let group_by = match params.group_by.as_deref() {
        None => CostGroup::All,
        Some("tool") => CostGroup::Tool,
        Some("agent") => CostGroup::Agent,
        Some("execution") => CostGroup::Execution,
        Some("namespace") => CostGroup::Namespace,
        Some(other) => {
            return Err(bad(
                "groupBy",
                format!("groupBy must be tool, agent, execution or namespace, got {other:?}"),
            ));
        }
    };
    let since = params.since.as_deref().map(since).transpose()?;
    let totals = state.engine.calls().costs(by, ns, group_by, since).await?;
    let items: Vec<Value> = totals
        .iter()
        .map(|t| json!({"key": t.key, "currency": t.currency, "amount": from_micros(t.micros), "calls": t.calls}))
        .collect();
    Ok(Json(json!({
        "apiVersion": joch_core::API_VERSION,
        "kind": "CostReport",
        "groupBy": params.group_by,
        "since": since,
        "items": items,
    })))
}

fn since(text: &str) -> Result<Time, ApiError> {
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(Time(at.with_timezone(&chrono::Utc)));
    }
    let back = joch_core::meta::parse_duration(text).map_err(|_| {
        bad(
            "since",
            format!("since must be an RFC 3339 time or a duration such as 24h, got {text:?}"),
        )
    })?;
    if let Some(e) = COST_WINDOW_SECONDS.check_duration("since", back, text) {
        return Err(bad("since", format!("since {}", e.message)));
    }
    Time(chrono::Utc::now())
        .checked_sub(back)
        .ok_or_else(|| bad("since", format!("since {text:?} reaches before the year 0")))
}

fn bad(parameter: &str, message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, ApiWord::BadRequest, message)
        .with_details(json!({"parameter": parameter}))
}
