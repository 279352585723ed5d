//! `/v1/namespaces/{ns}/artifacts/{id}[/content]` (an artifact's metadata
//! and bytes, with range reads) and
//! `/v1/namespaces/{ns}/executions/{name}/artifacttools[/{tool}]` (the
//! forged artifact tools of an execution: their definitions, and a call).

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use joch_core::artifact::{Artifact, parse_range};
use joch_core::{ObjectRef, ToolCall};
use serde_json::{Map, Value, json};

use crate::extract::{Body, Caller, Path};
use crate::{ApiError, ApiWord, AppState};

/// An artifact's metadata.
pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, id)): Path<(String, String)>,
) -> Result<Json<Artifact>, ApiError> {
    Ok(Json(state.engine.artifacts().get(&by, &ns, &id).await?))
}

/// An artifact's bytes: 200 with all of them, or 206 with the one range a
/// `Range: bytes=a-b` header asks for; 416 when it cannot be satisfied.
pub(crate) async fn content(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    content_of(&state, &by, &ns, &id, &headers).await
}

/// The answer of [`content`], for the console too.
pub(crate) async fn content_of(
    state: &AppState,
    by: &joch_core::Principal,
    ns: &str,
    id: &str,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let (ns, id) = (ns.to_owned(), id.to_owned());
    let range = match headers.get(header::RANGE) {
        Some(value) => {
            let text = value.to_str().unwrap_or_default();
            let size = state.engine.artifacts().get(by, &ns, &id).await?.spec.size;
            Some(parse_range(text, size).map_err(|reason| {
                ApiError::new(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    ApiWord::RangeNotSatisfiable,
                    reason,
                )
                .with_details(json!({"range": text, "size": size}))
            })?)
        }
        None => None,
    };
    let (artifact, bytes) = state.engine.artifacts().read(by, &ns, &id, range).await?;
    let spec = &artifact.spec;
    let mut response = bytes.into_response();
    let out = response.headers_mut();
    if let Ok(media_type) = HeaderValue::from_str(&spec.media_type) {
        out.insert(header::CONTENT_TYPE, media_type);
    }
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", spec.sha256)) {
        out.insert(header::ETAG, etag);
    }
    if let Some(r) = range {
        let value = format!("bytes {}-{}/{}", r.start, r.end, spec.size);
        if let Ok(value) = HeaderValue::from_str(&value) {
            out.insert(header::CONTENT_RANGE, value);
        }
        *response.status_mut() = StatusCode::PARTIAL_CONTENT;
    }
    Ok(response)
}

/// The artifact tools this execution offers (MCP tool definitions, each
/// `callId` an enum of its calls with handles); empty when it has none.
pub(crate) async fn tools(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, execution)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let tools = state
        .engine
        .artifacts()
        .tool_definitions(&by, &ns, &execution)
        .await?;
    Ok(Json(json!({"tools": tools})))
}

/// Calls an artifact tool; the body is its arguments. Answers the settled,
/// recorded ToolCall (`spec.fromArtifactTool: true`) with 201.
pub(crate) async fn call(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, execution, tool)): Path<(String, String, String)>,
    Body(args): Body<Map<String, Value>>,
) -> Result<Response, ApiError> {
    let mut call = ToolCall::of("", tool, Value::Object(args));
    call.spec.execution_ref = Some(ObjectRef::new(execution));
    let outcome = state
        .engine
        .calls()
        .call_artifact_tool(&by, &ns, call)
        .await?;
    Ok((StatusCode::CREATED, Json(outcome.into_response())).into_response())
}
