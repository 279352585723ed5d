//! `/ui/calls`: the namespace's ToolCalls, filtered and keyset-paged by the
//! store's list (as `GET …/toolcalls` is), and a call's page with its
//! record, approval and actions (replay, resolve; the engine gates both).

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use joch_core::{Approval, Phase, Time, ToolCall};
use joch_engine::{EngineError, ListParams, Replay, ReplayMode, Resolve};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::Fields;
use super::layout::{Section, json_block, page};
use super::viewer::Viewer;
use crate::extract::{Path, Query};
use crate::{ApiError, ApiWord, AppState};

/// Calls per page.
const PAGE: usize = 50;

/// The ledger's filters, as the form sends them (empty means any).
#[derive(Deserialize, Default, Clone)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Filters {
    ns: String,
    tool: String,
    agent: String,
    execution: String,
    phase: String,
    label: String,
    /// `datetime-local` values (UTC): calls created at or after / before.
    from: String,
    to: String,
    #[serde(rename = "continue")]
    continue_token: String,
}

fn given(text: &str) -> Option<String> {
    Some(text.trim().to_owned()).filter(|t| !t.is_empty())
}

/// A `datetime-local` value (UTC) as RFC 3339, as the store's list takes it.
fn instant(text: &str) -> Result<Option<String>, ApiError> {
    let Some(text) = given(text) else {
        return Ok(None);
    };
    chrono::NaiveDateTime::parse_from_str(&text, "%Y-%m-%dT%H:%M")
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(&text, "%Y-%m-%dT%H:%M:%S"))
        .map(|t| Some(t.and_utc().to_rfc3339()))
        .map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                ApiWord::InvalidParameter,
                format!("{text:?} is not a time (YYYY-MM-DDTHH:MM, UTC)"),
            )
        })
}

impl Filters {
    fn params(&self) -> Result<ListParams, ApiError> {
        Ok(ListParams {
            label_selector: given(&self.label),
            limit: Some(PAGE),
            continue_token: given(&self.continue_token),
            tool: given(&self.tool),
            phase: given(&self.phase),
            execution: given(&self.execution),
            agent: given(&self.agent),
            created_since: instant(&self.from)?,
            created_before: instant(&self.to)?,
        })
    }

    fn query(&self, continue_token: &str) -> String {
        let pairs = [
            ("ns", self.ns.as_str()),
            ("tool", &self.tool),
            ("agent", &self.agent),
            ("execution", &self.execution),
            ("phase", &self.phase),
            ("label", &self.label),
            ("from", &self.from),
            ("to", &self.to),
            ("continue", continue_token),
        ];
        serde_urlencoded::to_string(
            pairs
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .collect::<Vec<_>>(),
        )
        .unwrap_or_default()
    }
}

/// The filtered ledger, newest first, one page.
pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Query(mut filters): Query<Filters>,
) -> Result<Response, ApiError> {
    filters.ns.clone_from(&viewer.namespace);
    let page_of = state
        .engine
        .calls()
        .list(&viewer.principal, &viewer.namespace, filters.params()?)
        .await?;
    let calls: Vec<&ToolCall> = page_of.items.iter().collect();
    let next = page_of.continue_token.as_deref().map(|t| filters.query(t));
    let body = html! {
        h1 { "Ledger" }
        (filter_form(&filters))
        @if calls.is_empty() { p.card { "No call matches." } }
        @else { (table(&viewer, &calls)) }
        @if let Some(next) = next {
            p { a href={ "/ui/calls?" (next) } rel="next" { "Next page" } }
        }
    };
    Ok(page(Some(&viewer), Section::Ledger, "Ledger", body))
}

fn filter_form(f: &Filters) -> Markup {
    let text = |name: &str, label: &str, value: &str| {
        html! { div { label for={ "f-" (name) } { (label) } input id={ "f-" (name) } type="text" name=(name) value=(value); } }
    };
    html! {
        form.filters method="get" action="/ui/calls" role="search" aria-label="Filter the ledger" {
            input type="hidden" name="ns" value=(f.ns);
            (text("tool", "Tool", &f.tool))
            (text("agent", "Agent", &f.agent))
            (text("execution", "Execution", &f.execution))
            div {
                label for="f-phase" { "Phase" }
                select id="f-phase" name="phase" {
                    option value="" { "any" }
                    @for p in Phase::ALL {
                        option value=(p.as_str()) selected[f.phase == p.as_str()] { (p.as_str()) }
                    }
                }
            }
            (text("label", "Labels (selector)", &f.label))
            div { label for="f-from" { "From (UTC)" } input id="f-from" type="datetime-local" step="1" name="from" value=(f.from); }
            div { label for="f-to" { "Before (UTC)" } input id="f-to" type="datetime-local" step="1" name="to" value=(f.to); }
            div { button.primary type="submit" { "Filter" } }
        }
    }
}

fn table(viewer: &Viewer, calls: &[&ToolCall]) -> Markup {
    html! {
        table {
            caption.note { "Newest first" }
            thead { tr { th { "Call" } th { "Tool" } th { "Phase" } th { "Agent" } th { "Execution" } th { "Created" } th { "Latency" } } }
            tbody {
                @for c in calls {
                    tr {
                        td data-label="Call" { a href={ "/ui/calls/" (c.metadata.name) "?ns=" (viewer.namespace) } { (c.metadata.name) } }
                        td data-label="Tool" { (c.tool_name()) }
                        td data-label="Phase" { span class={ "phase phase-" (c.status.phase.as_str()) } { (c.status.phase.as_str()) } }
                        td data-label="Agent" { (c.spec.agent_ref.as_ref().map_or("—", |r| r.name.as_str())) }
                        td data-label="Execution" { (c.spec.execution_ref.as_ref().map_or("—", |r| r.name.as_str())) }
                        td data-label="Created" { (time(c.metadata.creation_timestamp)) }
                        td data-label="Latency" { @if let Some(ms) = c.status.latency_ms { (ms) " ms" } }
                    }
                }
            }
        }
    }
}

fn time(t: Option<Time>) -> String {
    t.map(|t| t.0.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// A call's page.
pub(crate) async fn show(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let call = state
        .engine
        .calls()
        .get(&viewer.principal, &viewer.namespace, &name)
        .await?;
    let approval = match state
        .engine
        .approvals()
        .read(&viewer.principal, &viewer.namespace, &name)
        .await
    {
        Ok(a) => Some(a),
        Err(EngineError::NotFound { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let artifacts = super::artifacts::section(&state.engine, &viewer, &call).await?;
    let audit = super::audit::section(&state.engine, &viewer, &name).await?;
    let title = format!("Call {name}");
    let body = html! {
        h1 { (title) }
        (facts(&call))
        h2 { "Input" }
        (json_block("Input", &call.spec.input))
        @if let Some(original) = &call.status.original_input {
            h2 { "Input before an approver edited it" }
            (json_block("Original input", original))
        }
        h2 { "Output" }
        @match (&call.status.output, &call.status.error) {
            (Some(output), _) => (json_block("Output", output)),
            (None, Some(error)) => (json_block("Error", &serde_json::to_value(error).unwrap_or_default())),
            (None, None) => p.note { "No output recorded." },
        }
        (artifacts)
        h2 { "Hook decisions" }
        (decisions(&call))
        @if let Some(a) = &approval { (approval_section(a)) }
        (audit)
        (call_actions(&viewer, &call))
    };
    Ok(page(Some(&viewer), Section::Ledger, &title, body))
}

fn facts(c: &ToolCall) -> Markup {
    let s = &c.status;
    html! {
        dl.facts.card {
            dt { "Tool" } dd { (c.tool_name()) @if let Some(v) = &s.tool_version { " (version " (v) ")" } }
            dt { "Phase" } dd { span class={ "phase phase-" (s.phase.as_str()) } { (s.phase.as_str()) } }
            dt { "Agent" } dd { (c.spec.agent_ref.as_ref().map_or("—", |r| r.name.as_str())) }
            dt { "Execution" } dd { (c.spec.execution_ref.as_ref().map_or("—", |r| r.name.as_str())) }
            dt { "Made by" } dd { (s.principal.as_ref().map_or("—".to_owned(), |p| format!("{} ({}, {})", p.name, p.kind.as_str(), p.role.as_str()))) }
            dt { "Created" } dd { (time(c.metadata.creation_timestamp)) }
            dt { "Started" } dd { (time(s.started_at)) }
            dt { "Completed" } dd { (time(s.completed_at)) }
            dt { "Latency" } dd { @if let Some(ms) = s.latency_ms { (ms) " ms" } @else { "—" } }
            dt { "Attempts" } dd { (s.attempts) }
            dt { "Cost" } dd { @match &s.cost { Some(cost) => { (cost.amount) " " (cost.currency) }, None => "—" } }
            dt { "Checksum" } dd { code { (s.checksum) } }
            @if let Some(r) = &s.resolution {
                dt { "Resolved" } dd { (r.reason) " at " (time(Some(r.resolved_at))) }
            }
        }
    }
}

fn decisions(c: &ToolCall) -> Markup {
    html! {
        @if c.status.hook_decisions.is_empty() { p.note { "No policy decided on this call." } }
        @else {
            table {
                thead { tr { th { "Hook" } th { "Decision" } th { "Policy" } th { "Reason" } } }
                tbody {
                    @for d in &c.status.hook_decisions {
                        tr {
                            td data-label="Hook" { (d.hook) }
                            td data-label="Decision" { (d.decision) @if d.shadow { " (shadow)" } }
                            td data-label="Policy" { (d.policy_id.as_deref().unwrap_or("—")) @if let Some(v) = &d.policy_version { " version " (v) } }
                            td data-label="Reason" { (d.reason.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
        }
    }
}

fn approval_section(a: &Approval) -> Markup {
    let s = &a.status;
    html! {
        h2 { "Approval" }
        dl.facts.card {
            dt { "Phase" } dd { (s.phase.as_str()) }
            dt { "Asked because" } dd { (a.spec.risk.summary) }
            dt { "Decision" } dd { (s.decision.as_deref().unwrap_or("—")) }
            dt { "Decided by" } dd { (s.decided_by.as_deref().unwrap_or("—")) }
            dt { "Decided at" } dd { (time(s.decided_at)) }
            dt { "Rationale" } dd { (s.rationale.as_deref().unwrap_or("—")) }
            dt { "Message for the model" } dd { (s.message.as_deref().unwrap_or("—")) }
        }
    }
}

fn call_actions(viewer: &Viewer, c: &ToolCall) -> Markup {
    let name = &c.metadata.name;
    let ns = &viewer.namespace;
    html! {
        h2 { "Actions" }
        div.actions {
            form hx-post={ "/ui/calls/" (name) "/replay?ns=" (ns) } {
                fieldset {
                    legend { "Replay" }
                    label for="replay-mode" { "Mode" }
                    select id="replay-mode" name="mode" {
                        option value="execute" { "execute again" }
                        option value="record" { "recorded outcome only" }
                    }
                    label { input type="checkbox" name="override" value="true"; " Override (re-run a write)" }
                    button type="submit" { "Replay" }
                }
            }
            @if c.status.phase == Phase::Unknown {
                form hx-post={ "/ui/calls/" (name) "/resolve?ns=" (ns) } {
                    fieldset {
                        legend { "Resolve this Unknown call" }
                        label for="resolve-phase" { "It" }
                        select id="resolve-phase" name="phase" {
                            option value="Succeeded" { "succeeded" }
                            option value="Failed" { "failed" }
                        }
                        label for="resolve-reason" { "Reason" }
                        input id="resolve-reason" type="text" name="reason" required;
                        button type="submit" { "Resolve" }
                    }
                }
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReplayForm {
    #[serde(default)]
    mode: String,
    #[serde(default, rename = "override")]
    override_writes: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    csrf: String,
}

/// Replays through the engine; the browser goes to the new call's page.
pub(crate) async fn replay(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
    Fields(form): Fields<ReplayForm>,
) -> Result<Response, ApiError> {
    let replay = Replay {
        mode: if form.mode == "record" {
            ReplayMode::Record
        } else {
            ReplayMode::Execute
        },
        override_writes: form.override_writes.is_some(),
    };
    let outcome = state
        .engine
        .calls()
        .replay(&viewer.principal, &viewer.namespace, &name, replay)
        .await?;
    Ok(go_to(&viewer, &outcome.record.metadata.name))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveForm {
    phase: Phase,
    reason: String,
    #[serde(default)]
    #[allow(dead_code)]
    csrf: String,
}

/// Settles an `Unknown` call as the operator says.
pub(crate) async fn resolve(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
    Fields(form): Fields<ResolveForm>,
) -> Result<Response, ApiError> {
    let resolve = Resolve {
        phase: form.phase,
        output: None::<Value>,
        reason: form.reason,
    };
    let call = state
        .engine
        .calls()
        .resolve(&viewer.principal, &viewer.namespace, &name, resolve)
        .await?;
    Ok(go_to(&viewer, &call.metadata.name))
}

/// Tells htmx to load a call's page.
fn go_to(viewer: &Viewer, call: &str) -> Response {
    let url = format!("/ui/calls/{call}?ns={}", viewer.namespace);
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Ok(value) = HeaderValue::from_str(&url) {
        response.headers_mut().insert("hx-redirect", value);
    }
    response
}
