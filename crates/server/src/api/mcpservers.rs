//! `/v1/namespaces/{ns}/mcpservers[/{name}]`: upstream MCP servers. Creating
//! or replacing one lists its tools at once, so its Tools exist when the
//! answer arrives (or `status` says why the server could not be reached).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use joch_core::McpServer;
use serde::Deserialize;

use super::resources::DeleteParams;
use crate::extract::{Body, Caller, Manifest, Path, Query};
use crate::{ApiError, AppState};

pub(crate) async fn create(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
    Manifest(server): Manifest<McpServer>,
) -> Result<(StatusCode, Json<McpServer>), ApiError> {
    let mcp = state.engine.mcp();
    let created = mcp.apply_server(&by, &ns, None, server).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

pub(crate) async fn replace(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
    Manifest(server): Manifest<McpServer>,
) -> Result<Json<McpServer>, ApiError> {
    Ok(Json(
        state
            .engine
            .mcp()
            .apply_server(&by, &ns, Some(&name), server)
            .await?,
    ))
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<DeleteParams>,
) -> Result<Json<McpServer>, ApiError> {
    Ok(Json(
        state
            .engine
            .mcp()
            .delete_server(&by, &ns, &name, q.resource_version.as_deref())
            .await?,
    ))
}

/// Lists the server's tools now, whatever its refresh interval.
pub(crate) async fn refresh(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<McpServer>, ApiError> {
    Ok(Json(
        state.engine.mcp().refresh_server(&by, &ns, &name).await?,
    ))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AcceptRequest {
    /// The upstream tool whose new definition to accept; every held tool when absent.
    #[serde(default)]
    tool: Option<String>,
}

/// Adopts changed tool definitions and lifts their quarantine.
pub(crate) async fn accept(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
    Body(request): Body<AcceptRequest>,
) -> Result<Json<McpServer>, ApiError> {
    Ok(Json(
        state
            .engine
            .mcp()
            .accept_tools(&by, &ns, &name, request.tool.as_deref())
            .await?,
    ))
}
