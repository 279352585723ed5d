//! `/ui/upstreams`: the namespace's MCP servers with their status and, for
//! each tool whose definition changed upstream, the accepted definition
//! (the Tool as it stands) beside the pending one, with an accept button
//! (the engine lets only an admin accept).

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use joch_core::{McpServer, Tool};
use joch_engine::{EngineError, ListParams};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Fields;
use super::layout::{Section, json_block, page};
use super::viewer::Viewer;
use crate::extract::Path;
use crate::{ApiError, AppState};

/// One drifted tool: the definition in force and the one held back.
struct Drift {
    upstream: String,
    accepted: Value,
    pending: Value,
}

/// The upstreams page.
pub(crate) async fn show(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Response, ApiError> {
    let ns = &viewer.namespace;
    let params = ListParams {
        limit: Some(500),
        ..ListParams::default()
    };
    let servers = state
        .engine
        .resources()
        .read_all::<McpServer>(&viewer.principal, ns, params)
        .await?
        .items;
    let mut sections = Vec::new();
    for server in &servers {
        let mut drifts = Vec::new();
        for (upstream, tool) in &server.status.tools {
            let Some(pending) = &tool.pending_definition else {
                continue;
            };
            let accepted = match state
                .engine
                .resources()
                .read::<Tool>(&viewer.principal, ns, &server.tool_name(upstream))
                .await
            {
                Ok(t) => {
                    json!({"description": t.spec.description, "inputSchema": t.spec.input_schema})
                }
                Err(EngineError::NotFound { .. }) => Value::Null,
                Err(e) => return Err(e.into()),
            };
            drifts.push(Drift {
                upstream: upstream.clone(),
                accepted,
                pending: pending.clone(),
            });
        }
        sections.push(server_section(&viewer, server, &drifts));
    }
    let body = html! {
        h1 { "Upstream MCP servers" }
        @if servers.is_empty() { p.card { "No MCP server is configured in this namespace." } }
        @for s in sections { (s) }
    };
    Ok(page(Some(&viewer), Section::Upstreams, "Upstreams", body))
}

fn server_section(viewer: &Viewer, server: &McpServer, drifts: &[Drift]) -> Markup {
    let s = &server.status;
    let name = &server.metadata.name;
    html! {
        section.card aria-labelledby={ "server-" (name) } {
            h2 id={ "server-" (name) } { (name) }
            dl.facts {
                dt { "Status" } dd { (s.phase.as_deref().unwrap_or("not listed yet")) }
                @if let Some(message) = &s.message { dt { "Last error" } dd { (message) } }
                dt { "Tools" } dd { (s.tools.len()) }
                dt { "Held back" } dd { (drifts.len()) }
            }
            @for d in drifts {
                div.card data-drift=(d.upstream) {
                    h3 { (server.tool_name(&d.upstream)) ": its definition changed upstream" }
                    div.actions {
                        div { h4 { "Accepted (in force)" } (json_block("Accepted definition", &d.accepted)) }
                        div { h4 { "Pending" } (json_block("Pending definition", &d.pending)) }
                    }
                    form hx-post={ "/ui/upstreams/" (name) "/accept?ns=" (viewer.namespace) } {
                        input type="hidden" name="tool" value=(d.upstream);
                        button.primary type="submit" { "Accept the pending definition" }
                    }
                }
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AcceptForm {
    tool: String,
    #[serde(default)]
    #[allow(dead_code)]
    csrf: String,
}

/// Accepts one tool's pending definition, then reloads the page.
pub(crate) async fn accept(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
    Fields(form): Fields<AcceptForm>,
) -> Result<Response, ApiError> {
    state
        .engine
        .mcp()
        .accept_tools(
            &viewer.principal,
            &viewer.namespace,
            &name,
            Some(&form.tool),
        )
        .await?;
    let mut response = StatusCode::NO_CONTENT.into_response();
    response
        .headers_mut()
        .insert("hx-refresh", HeaderValue::from_static("true"));
    Ok(response)
}
