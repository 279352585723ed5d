//! `/ui/executions`: agent runs, and one run's timeline with its batches
//! drawn as lanes (each call a chip: ran, failed, waiting for approval,
//! denied), live over Server-Sent Events as the engine appends events.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{Stream, StreamExt};
use joch_core::{EventKind, Execution};
use joch_engine::{Engine, EngineError, Event, ListParams};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::layout::{Section, json_block, page};
use super::viewer::Viewer;
use crate::extract::{Path, Query};
use crate::{ApiError, AppState};

/// Most events a timeline shows.
const MAX_EVENTS: usize = 2_000;

/// The namespace's executions, newest first.
pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Response, ApiError> {
    let params = ListParams {
        limit: Some(200),
        ..ListParams::default()
    };
    let runs = state
        .engine
        .resources()
        .read_all::<Execution>(&viewer.principal, &viewer.namespace, params)
        .await?
        .items;
    let body = html! {
        h1 { "Executions" }
        @if runs.is_empty() { p.card { "No execution yet." } }
        ul {
            @for run in &runs {
                li { a href={ "/ui/executions/" (run.metadata.name) "?ns=" (viewer.namespace) } { (run.metadata.name) } }
            }
        }
    };
    Ok(page(Some(&viewer), Section::Executions, "Executions", body))
}

/// One execution's timeline, live.
pub(crate) async fn show(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let events = state
        .engine
        .calls()
        .events(&viewer.principal, &viewer.namespace, &name, 0, MAX_EVENTS)
        .await?;
    let stream = format!(
        "/ui/executions/{name}/stream?ns={}&seen={}",
        viewer.namespace,
        events.len()
    );
    let context = call_context(&state, &viewer, &name).await?;
    let title = format!("Execution {name}");
    let body = html! {
        h1 { (title) }
        p.note { "Each batch is a lane; the page follows new events as they are written." }
        div hx-ext="sse" sse-connect=(stream) {
            div #timeline sse-swap="timeline" aria-live="polite" { (timeline(&viewer, &events)) }
        }
        h2 { "Call context" }
        (context)
    };
    Ok(page(Some(&viewer), Section::Executions, &title, body))
}

/// The execution's call context (the state its declarative tools share).
async fn call_context(state: &AppState, viewer: &Viewer, name: &str) -> Result<Markup, ApiError> {
    let (by, ns) = (&viewer.principal, viewer.namespace.as_str());
    match state.engine.resources().call_context(by, ns, name).await {
        Ok(context) => Ok(json_block("Call context", &Value::Object(context.data))),
        Err(EngineError::NotFound { .. }) => Ok(
            html! { p.note { "No call context: no declarative tool of this execution has written one." } },
        ),
        Err(e) => Err(e.into()),
    }
}

/// The timeline again whenever the execution has new events.
pub(crate) async fn stream(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
    Query(seen): Query<Seen>,
) -> Result<Response, ApiError> {
    let cap = state.config.max_streams_per_principal;
    let held = state.streams.open(Some(&viewer.principal), cap)?;
    let events = live(state.engine.clone(), viewer, name, seen.seen).map(move |event| {
        let _counted = &held;
        event
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// How many events the page already shows.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Seen {
    #[serde(default)]
    #[allow(dead_code)]
    ns: String,
    #[serde(default)]
    seen: Option<usize>,
}

/// The timeline, sent again whenever the count of its events changes.
fn live(
    engine: Engine,
    viewer: Viewer,
    name: String,
    shown: Option<usize>,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let changes = engine.calls().event_notifications();
    let render = move || {
        let (engine, viewer, name) = (engine.clone(), viewer.clone(), name.clone());
        async move {
            let events = engine
                .calls()
                .events(&viewer.principal, &viewer.namespace, &name, 0, MAX_EVENTS)
                .await?;
            let html = timeline(&viewer, &events).into_string();
            Ok((events.len().to_string(), html))
        }
    };
    let shown = shown.map(|n| n.to_string());
    super::live::refreshed(
        "timeline",
        changes,
        Duration::from_millis(500),
        shown,
        render,
    )
}

/// What became of one call, as its events tell.
#[derive(Default)]
struct Chip {
    tool: String,
    outcome: &'static str,
}

/// The batches as lanes of call chips, in event order.
fn lanes(events: &[Event]) -> Vec<(u64, Vec<(String, Chip)>)> {
    let mut lanes: Vec<(u64, Vec<(String, Chip)>)> = Vec::new();
    let mut index: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for e in events {
        if e.kind == EventKind::ToolBatchStarted {
            lanes.push((e.data["batch"].as_u64().unwrap_or_default(), Vec::new()));
            continue;
        }
        let Some(call) = e.data.get("tool_call_id").and_then(Value::as_str) else {
            continue;
        };
        if lanes.is_empty() {
            lanes.push((0, Vec::new()));
        }
        let at = *index.entry(call.to_owned()).or_insert_with(|| {
            let lane = lanes.len() - 1;
            let tool = e.data["tool_name"].as_str().unwrap_or("?").to_owned();
            lanes[lane].1.push((
                call.to_owned(),
                Chip {
                    tool,
                    outcome: "admitted",
                },
            ));
            (lane, lanes[lane].1.len() - 1)
        });
        let chip = &mut lanes[at.0].1[at.1].1;
        chip.outcome = match (e.kind, &e.data) {
            (EventKind::RunPaused, _) => "waiting for approval",
            (EventKind::PolicyDecision, d) if d["action"] == "deny" => "denied",
            (EventKind::ToolCompleted, d) if d["success"] == true => "ran",
            (EventKind::ToolCompleted, _) if chip.outcome == "denied" => "denied",
            (EventKind::ToolCompleted, d)
                if d["error"].as_str().is_some_and(|m| m.contains("skipped")) =>
            {
                "skipped"
            }
            (EventKind::ToolCompleted, _) => "failed",
            _ => chip.outcome,
        };
    }
    lanes
}

fn timeline(viewer: &Viewer, events: &[Event]) -> Markup {
    let ns = &viewer.namespace;
    html! {
        h2 { "Batches" }
        @for (batch, chips) in lanes(events) {
            section.lane aria-label={ "Batch " (batch) } {
                h3 { "Batch " (batch) }
                ul.chips {
                    @for (call, chip) in &chips {
                        li class={ "chip chip-" (chip.outcome.replace(' ', "-")) } data-call=(call) {
                            a href={ "/ui/calls/" (call) "?ns=" (ns) } { (chip.tool) } " · " (chip.outcome)
                        }
                    }
                }
            }
        }
        h2 { "Events" }
        table {
            thead { tr { th { "#" } th { "Time" } th { "Type" } th { "Call" } th { "Data" } } }
            tbody {
                @for e in events {
                    tr {
                        td data-label="#" { (e.sequence) }
                        td data-label="Time" { (e.time.0.format("%H:%M:%S%.3f")) }
                        td data-label="Type" { (e.kind.as_str()) }
                        td data-label="Call" { (e.data.get("tool_call_id").and_then(Value::as_str).unwrap_or("")) }
                        td data-label="Data" { code { (summary(&e.data)) } }
                    }
                }
            }
        }
    }
}

/// The event's data without the fields its row already shows, shortened.
fn summary(data: &Value) -> String {
    let mut data = data.clone();
    if let Some(map) = data.as_object_mut() {
        map.remove("tool_call_id");
    }
    let text = data.to_string();
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(kind: &str, data: Value) -> Event {
        Event {
            sequence: 0,
            kind: EventKind::parse(kind).unwrap(),
            time: joch_core::Time(chrono::Utc::now()),
            data,
        }
    }

    fn call(kind: &str, id: &str, extra: Value) -> Event {
        let mut data = json!({"tool_call_id": id, "tool_name": "t"});
        data.as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap_or_default());
        event(kind, data)
    }

    #[test]
    fn batches_become_lanes_and_each_call_keeps_its_last_outcome() {
        let events = [
            event("tool_batch_started", json!({"batch": 1})),
            call("policy_decision", "a", json!({"action": "allow"})),
            call("tool_completed", "a", json!({"success": true})),
            call("policy_decision", "b", json!({"action": "deny"})),
            call("tool_completed", "b", json!({"success": false})),
            event("tool_batch_started", json!({"batch": 2})),
            call("run_paused", "c", json!({})),
            call(
                "tool_completed",
                "d",
                json!({"success": false, "error": "skipped: the batch stopped"}),
            ),
            call(
                "tool_completed",
                "e",
                json!({"success": false, "error": "timeout"}),
            ),
        ];
        let shape: Vec<(u64, Vec<(String, &str)>)> = lanes(&events)
            .into_iter()
            .map(|(n, chips)| {
                (
                    n,
                    chips.into_iter().map(|(id, c)| (id, c.outcome)).collect(),
                )
            })
            .collect();
        let own = |pairs: &[(&str, &'static str)]| -> Vec<(String, &'static str)> {
            pairs.iter().map(|(id, o)| ((*id).to_owned(), *o)).collect()
        };
        assert_eq!(
            shape,
            vec![
                (1, own(&[("a", "ran"), ("b", "denied")])),
                (
                    2,
                    own(&[
                        ("c", "waiting for approval"),
                        ("d", "skipped"),
                        ("e", "failed")
                    ])
                ),
            ]
        );
    }
}
