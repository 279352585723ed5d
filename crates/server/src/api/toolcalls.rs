//! `/v1/namespaces/{ns}/toolcalls[/{name}]`. A POST executes the call; there
//! is no DELETE: the ledger keeps every call.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use joch_core::{Phase, ToolCall};
use joch_engine::{Replay, Resolve};
use serde::Deserialize;
use serde_json::Value;

use super::{List, ListQueryParams};
use crate::extract::{Body, Caller, Manifest, Path, Query};
use crate::{ApiError, ApiWord, AppState};

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateParams {
    /// `false`: answer 202 once the call is recorded, and run it in the background.
    #[serde(default = "yes")]
    wait: bool,
}

fn yes() -> bool {
    true
}

/// Marks an answer that was served from the record of an earlier call
/// with the same idempotency key: as a header, and as an annotation on the
/// returned resource (not stored).
const REPLAYED_HEADER: &str = "idempotent-replayed";
const REPLAYED_ANNOTATION: &str = "joch.dev/idempotent-replayed";

/// Runs the call: 201 with the settled record, or with `?wait=false` 202
/// with the `Pending` record. A repeat of an idempotency key answers 200
/// with the original call.
pub(crate) async fn create(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    Query(params): Query<CreateParams>,
    headers: HeaderMap,
    Caller(by): Caller,
    Manifest(mut call): Manifest<ToolCall>,
) -> Result<Response, ApiError> {
    take_idempotency_header(&headers, &mut call)?;
    take_traceparent_header(&headers, &mut call);
    refuse_runs_on_retry(&call)?;
    let outcome = if params.wait {
        state.engine.calls().call(&by, &ns, call).await?
    } else {
        state.engine.calls().submit(&by, &ns, call).await?
    };
    let limited = outcome
        .record
        .status
        .error
        .as_ref()
        .filter(|e| e.is(joch_core::ErrorCode::RateLimited))
        .and_then(|e| e.details.as_ref())
        .and_then(|d| d["retryAfterSeconds"].as_u64());
    let status = match (outcome.replayed, params.wait, limited) {
        (_, _, Some(_)) => StatusCode::TOO_MANY_REQUESTS,
        (true, _, _) => StatusCode::OK,
        (false, true, _) => StatusCode::CREATED,
        (false, false, _) => StatusCode::ACCEPTED,
    };
    let replayed = outcome.replayed;
    let timings = outcome.timings.map(|t| t.server_timing());
    let mut call = outcome.into_response();
    let location = format!("/v1/namespaces/{ns}/toolcalls/{}", call.metadata.name);
    let mut response_headers = HeaderMap::new();
    if let Ok(location) = HeaderValue::from_str(&location) {
        response_headers.insert(header::LOCATION, location);
    }
    if let Some(seconds) = limited {
        response_headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    // Where the call's time went (docs/operations.md), for a caller's own
    // measurements and the bench's attribution of a tail.
    if let Some(value) = timings.and_then(|t| HeaderValue::from_str(&t).ok()) {
        response_headers.insert("server-timing", value);
    }
    if replayed {
        response_headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
        call.metadata
            .annotations
            .insert(REPLAYED_ANNOTATION.to_owned(), "true".to_owned());
    }
    Ok((status, response_headers, Json(call)).into_response())
}

/// The W3C `traceparent` header links the record to the caller's trace
/// unless the body names one. An invalid header is ignored, as W3C Trace
/// Context asks of receivers.
fn take_traceparent_header(headers: &HeaderMap, call: &mut ToolCall) {
    if call.spec.traceparent.is_some() {
        return;
    }
    call.spec.traceparent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .filter(|v| joch_core::traceparent::is_traceparent(v))
        .map(str::to_owned);
}

/// REST has no retry of a call (a later GET only reads it): a call that
/// would run only on its caller's retry would never run once approved.
fn refuse_runs_on_retry(call: &ToolCall) -> Result<(), ApiError> {
    if call.spec.runs_on == joch_core::RunsOn::Retry {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            ApiWord::BadRequest,
            "spec.runsOn: retry is for callers that retry a deferred call (MCP 2026-07-28, the library's Calls::resume); over REST an approved call runs on its approval",
        ));
    }
    Ok(())
}

/// The `Idempotency-Key` header, if any, becomes the call's key; a body
/// that names a different key is refused rather than silently overridden.
fn take_idempotency_header(headers: &HeaderMap, call: &mut ToolCall) -> Result<(), ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(());
    };
    let key = value.to_str().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ApiWord::InvalidIdempotencyKey,
            "Idempotency-Key must be visible ASCII",
        )
    })?;
    let effects = call.spec.side_effects.get_or_insert_with(Default::default);
    match &effects.idempotency_key {
        Some(body_key) if body_key != key => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            ApiWord::InvalidIdempotencyKey,
            "the Idempotency-Key header and spec.sideEffects.idempotencyKey differ",
        )),
        _ => {
            effects.idempotency_key = Some(key.to_owned());
            Ok(())
        }
    }
}

pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<ToolCall>, ApiError> {
    Ok(Json(state.engine.calls().get(&by, &ns, &name).await?))
}

/// A page of the calls that exist for the caller: it may be short, even
/// empty, while `continue` leads on (the engine filters the store's page).
pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
    Query(q): Query<ListQueryParams>,
) -> Result<Json<List<ToolCall>>, ApiError> {
    Ok(Json(
        state.engine.calls().list(&by, &ns, q.into()).await?.into(),
    ))
}

/// Changes labels and annotations only.
pub(crate) async fn relabel(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
    Manifest(call): Manifest<ToolCall>,
) -> Result<Json<ToolCall>, ApiError> {
    Ok(Json(
        state.engine.calls().relabel(&by, &ns, &name, call).await?,
    ))
}

/// Cancels the call on whichever replica runs it (or withdraws it while it
/// waits for a person), and answers it as it then stands.
pub(crate) async fn cancel(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<ToolCall>, ApiError> {
    Ok(Json(state.engine.calls().cancel(&by, &ns, &name).await?))
}

/// Replays a settled call as a new one (201), linked by `spec.replayOf`.
pub(crate) async fn replay(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
    Body(replay): Body<Replay>,
) -> Result<(StatusCode, Json<ToolCall>), ApiError> {
    let outcome = state.engine.calls().replay(&by, &ns, &name, replay).await?;
    Ok((StatusCode::CREATED, Json(outcome.into_response())))
}

/// `{"phase": "Succeeded" | "Failed", "reason": "...", "output": ...}`
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveBody {
    /// The phase to settle in, e.g. `Succeeded` or `Failed`.
    #[schema(value_type = String)]
    phase: Phase,
    reason: String,
    #[serde(default)]
    output: Option<Value>,
}

/// Settles an `Unknown` call as an operator decided.
pub(crate) async fn resolve(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
    Body(body): Body<ResolveBody>,
) -> Result<Json<ToolCall>, ApiError> {
    let resolve = Resolve {
        phase: body.phase,
        output: body.output,
        reason: body.reason,
    };
    Ok(Json(
        state
            .engine
            .calls()
            .resolve(&by, &ns, &name, resolve)
            .await?,
    ))
}
