//! OAuth 2.0 protected-resource metadata (RFC 9728), as the MCP
//! authorization spec asks: a client that meets joch's 401 follows the
//! challenge's `resource_metadata` to a document naming the resource it
//! wants a token for and the identity provider (the JWT issuer) to get it
//! from. The documents are public; they hold no secret.
//!
//! `/.well-known/oauth-protected-resource` describes joch as a whole
//! (resource: its public base URL); the path-suffixed forms describe each MCP
//! endpoint (`/.well-known/oauth-protected-resource/mcp`,
//! `.../v1/namespaces/{ns}/mcp`, resource: that endpoint's URL).

use axum::extract::State;
use axum::http::HeaderValue;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use crate::extract::Path;
use crate::{ApiError, ApiWord, AppState, ServerConfig};

/// Where the metadata of joch's resources is served; a resource's path
/// follows it.
pub(crate) const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// The metadata routes (mounted outside authentication).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route(METADATA_PATH, get(of_joch))
        .route(&format!("{METADATA_PATH}/mcp"), get(of_mcp))
        .route(
            &format!("{METADATA_PATH}/v1/namespaces/{{ns}}/mcp"),
            get(of_namespace_mcp),
        )
}

/// The `aud` values a JWT may carry when no audience is configured: joch's
/// base URL (with or without its trailing slash, as clients render it) or
/// the URL of one of its MCP endpoints. `{namespace}` stands for the JWT's
/// namespace claim: a token for one namespace's endpoint acts nowhere else.
pub fn resource_audiences(public_url: &str) -> Vec<String> {
    let base = public_url.trim_end_matches('/');
    vec![
        base.to_owned(),
        format!("{base}/"),
        format!("{base}/mcp"),
        format!("{base}/v1/namespaces/{{namespace}}/mcp"),
    ]
}

/// The `WWW-Authenticate` of a 401 for `path`: a bearer challenge pointing
/// at the metadata of the MCP endpoint asked for, or of joch as a whole.
pub(crate) fn challenge(config: &ServerConfig, path: &str, token_refused: bool) -> HeaderValue {
    let resource = if is_mcp_endpoint(path) { path } else { "" };
    let error = if token_refused {
        r#", error="invalid_token""#
    } else {
        ""
    };
    let value = format!(
        r#"Bearer resource_metadata="{}{METADATA_PATH}{resource}"{error}"#,
        config.public_url.trim_end_matches('/')
    );
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
}

fn is_mcp_endpoint(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    matches!(
        segments.as_slice(),
        ["mcp"] | ["v1", "namespaces", _, "mcp"]
    )
}

/// RFC 9728 §2, the fields joch has something to say in.
#[derive(Debug, Serialize)]
struct ResourceMetadata {
    resource: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    authorization_servers: Vec<String>,
    bearer_methods_supported: [&'static str; 1],
    resource_name: String,
}

impl ResourceMetadata {
    fn of(config: &ServerConfig, path: &str, name: String) -> Json<ResourceMetadata> {
        Json(ResourceMetadata {
            resource: format!("{}{path}", config.public_url.trim_end_matches('/')),
            authorization_servers: config.authorization_servers.clone(),
            bearer_methods_supported: ["header"],
            resource_name: name,
        })
    }
}

async fn of_joch(State(state): State<AppState>) -> Json<ResourceMetadata> {
    ResourceMetadata::of(&state.config, "", "joch".to_owned())
}

async fn of_mcp(State(state): State<AppState>) -> Json<ResourceMetadata> {
    ResourceMetadata::of(&state.config, "/mcp", "joch MCP".to_owned())
}

async fn of_namespace_mcp(
    State(state): State<AppState>,
    Path(ns): Path<String>,
) -> Result<Json<ResourceMetadata>, ApiError> {
    joch_core::names::validate_namespace(&ns).map_err(|e| {
        ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            ApiWord::BadRequest,
            e.to_string(),
        )
    })?;
    let path = format!("/v1/namespaces/{ns}/mcp");
    Ok(ResourceMetadata::of(
        &state.config,
        &path,
        format!("joch MCP, namespace {ns}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_point_at_the_metadata_of_the_resource_asked_for() {
        let config = ServerConfig {
            public_url: "https://joch.example/".to_owned(),
            ..ServerConfig::default()
        };
        let cases = [
            ("/mcp", false, "/mcp\""),
            (
                "/v1/namespaces/support/mcp",
                false,
                "/v1/namespaces/support/mcp\"",
            ),
            ("/v1/namespaces/support/tools", false, "resource\""),
            ("/v1/namespaces/support/mcp/x", false, "resource\""),
            ("/mcp", true, "/mcp\", error=\"invalid_token\""),
        ];
        for (path, refused, ending) in cases {
            let value = challenge(&config, path, refused);
            let value = value.to_str().unwrap();
            assert!(
                value.starts_with(
                    "Bearer resource_metadata=\"https://joch.example/.well-known/oauth-protected-resource"
                ),
                "{path}: {value}"
            );
            assert!(value.ends_with(ending), "{path}: {value}");
        }
    }
}
