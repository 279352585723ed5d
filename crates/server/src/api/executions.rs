//! `/v1/namespaces/{ns}/executions/{name}/batches|events|complete`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use futures_util::stream::{self, Stream};
use joch_core::{API_VERSION, Execution, ToolCall};
use joch_engine::{Engine, Event, Principal};
use serde::Deserialize;
use serde_json::json;

use crate::extract::{Body, Caller, Path, Query};
use crate::{ApiError, AppState};

/// `{"calls": [ToolCall, ...]}`: one LLM turn.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchBody {
    /// ToolCall manifests.
    #[schema(value_type = Vec<Object>)]
    calls: Vec<ToolCall>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchParams {
    #[serde(default = "yes")]
    wait: bool,
}

fn yes() -> bool {
    true
}

/// Runs a batch: 200 with every call settled, or 202 as admitted with `wait=false`.
pub(crate) async fn batch(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
    Query(params): Query<BatchParams>,
    Body(body): Body<BatchBody>,
) -> Result<Response, ApiError> {
    let batch = state
        .engine
        .calls()
        .run_batch(&by, &ns, &name, body.calls, params.wait)
        .await?;
    let status = if params.wait {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    let calls: Vec<ToolCall> = batch.calls.into_iter().map(|c| c.into_response()).collect();
    let answer = json!({
        "apiVersion": API_VERSION,
        "kind": "ToolBatch",
        "execution": batch.execution,
        "batch": batch.number,
        "calls": calls,
    });
    Ok((status, Json(answer)).into_response())
}

/// Marks the execution completed.
pub(crate) async fn complete(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<Execution>, ApiError> {
    Ok(Json(
        state
            .engine
            .calls()
            .complete_execution(&by, &ns, &name)
            .await?,
    ))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventParams {
    /// Only events numbered above this.
    #[serde(default)]
    after: u64,
    /// Stream them as Server-Sent Events, live.
    #[serde(default)]
    follow: bool,
}

/// The execution's timeline, oldest first; `?follow=true` streams it.
pub(crate) async fn events(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
    Query(params): Query<EventParams>,
) -> Result<Response, ApiError> {
    if params.follow {
        // Refused as an answer, before the stream starts.
        state
            .engine
            .calls()
            .events(&by, &ns, &name, u64::MAX, 1)
            .await?;
        let cap = state.config.max_streams_per_principal;
        let held = state.streams.open(Some(&by), cap)?;
        let stream = follow(state.engine.clone(), by, ns, name, params.after).map(move |event| {
            let _counted = &held;
            event
        });
        return Ok(Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let events = state
        .engine
        .calls()
        .events(&by, &ns, &name, params.after, 10_000)
        .await?;
    Ok(
        Json(json!({"apiVersion": API_VERSION, "kind": "EventList", "items": events}))
            .into_response(),
    )
}

/// Events as they are written: each is sent once, in order, with its
/// sequence number as the SSE id; the stream ends when the client leaves.
fn follow(
    engine: Engine,
    by: Principal,
    ns: String,
    execution: String,
    after: u64,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let notifications = engine.calls().event_notifications();
    let state = (
        (engine, by),
        ns,
        execution,
        after,
        notifications,
        VecDeque::<Event>::new(),
    );
    stream::unfold(
        state,
        |((engine, by), ns, execution, mut cursor, mut seen, mut buffer)| async move {
            loop {
                if let Some(event) = buffer.pop_front() {
                    cursor = event.sequence;
                    let sse = SseEvent::default()
                        .id(event.sequence.to_string())
                        .event(event.kind.as_str())
                        .data(serde_json::to_string(&event).unwrap_or_default());
                    let state = ((engine, by), ns, execution, cursor, seen, buffer);
                    return Some((Ok(sse), state));
                }
                match engine
                    .calls()
                    .events(&by, &ns, &execution, cursor, 500)
                    .await
                {
                    Ok(events) if !events.is_empty() => buffer.extend(events),
                    Ok(_) => {
                        engine
                            .calls()
                            .wait_for_events(&mut seen, Duration::from_millis(250))
                            .await
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "event stream stopped");
                        return None;
                    }
                }
            }
        },
    )
}
