//! Authentication and authorization of every request, once a root token is
//! configured or any token exists (before that, joch serves loopback only).
//!
//! A principal acts only in its namespace (others answer 404, as if they
//! did not exist); what it may do there is its role's:
//! - `agent`: call tools (REST, MCP, hook endpoints, batches) and read
//!   tools, calls, executions and approvals;
//! - `approver`: an agent's rights, reading everything but tokens, and
//!   deciding approvals;
//! - `admin`: everything in the namespace. The root token is admin everywhere.
//!
//! This middleware only establishes who is asking and which routes its role
//! reaches; the rules on calls and decisions (a principal cannot decide a
//! call it made, which tools exist for it) are the engine's (`rules.rs`),
//! so that every surface keeps them. Without authentication the principal
//! is the local one.

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use joch_core::token::Role;
use joch_engine::{EngineError, Principal};

use crate::mcp::NAMESPACE_HEADER;
use crate::{ApiError, AppState, discovery};

pub(crate) async fn authorize(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_owned();
    if matches!(
        path.as_str(),
        "/healthz" | "/readyz" | "/openapi.json"
    ) || path.starts_with("/demo/")
        // A user's browser back from an authorization server: its state is the authority.
        || path == "/oauth/callback"
        // joch's Client ID Metadata Document, fetched by authorization servers.
        || path == "/oauth/client-metadata.json"
        // The console resolves its viewer from its session cookie itself.
        || path == "/ui"
        || path.starts_with("/ui/")
        || path.starts_with(discovery::METADATA_PATH)
    {
        return next.run(request).await;
    }
    match state.engine.identity().auth_required().await {
        Ok(false) => {
            request.extensions_mut().insert(Principal::local());
            return next.run(request).await;
        }
        Ok(true) => {}
        Err(e) => return ApiError::from(e).into_response(),
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .map(str::to_owned);
    let refused = presented.is_some();
    let principal = match presented {
        Some(token) => match state.engine.identity().authenticate(&token).await {
            Ok(principal) => principal,
            Err(e) => return ApiError::from(e).into_response(),
        },
        None => None,
    };
    let Some(principal) = principal else {
        let message = if refused {
            "the bearer token is unknown, expired or issued for another resource"
        } else {
            "this joch requires a bearer token (Authorization: Bearer ...)"
        };
        let mut answer =
            ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
        answer.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            discovery::challenge(&state.config, &path, refused),
        );
        return answer;
    };
    let target = Target::of(&path, request.headers());
    if let Some(own) = &principal.namespace {
        if target.namespace.as_deref() != Some(own.as_str()) {
            return ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such resource")
                .into_response();
        }
    }
    if *request.method() == Method::GET {
        if let Err(e) = reads(&principal, &target) {
            return ApiError::from(e).into_response();
        }
    } else if !allowed(principal.role, request.method(), &target) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "a token with role {} may not {} {path}",
                principal.role.as_str(),
                request.method()
            ),
        )
        .into_response();
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// What a request touches: its namespace and the path below it.
struct Target {
    namespace: Option<String>,
    /// Segments after `/v1/namespaces/{ns}/`, or `["mcp"]`, `["hooks", ...]`.
    rest: Vec<String>,
}

impl Target {
    fn of(path: &str, headers: &axum::http::HeaderMap) -> Target {
        let segments: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let from_header = || {
            Some(
                headers
                    .get(NAMESPACE_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("default")
                    .to_owned(),
            )
        };
        match segments.as_slice() {
            [v1, namespaces, ns, rest @ ..] if v1 == "v1" && namespaces == "namespaces" => Target {
                namespace: Some(ns.clone()),
                rest: rest.to_vec(),
            },
            [mcp] if mcp == "mcp" => Target {
                namespace: from_header(),
                rest: segments.clone(),
            },
            [v1, hooks, ..] if v1 == "v1" && hooks == "hooks" => Target {
                namespace: from_header(),
                rest: segments[1..].to_vec(),
            },
            _ => Target {
                namespace: None,
                rest: segments,
            },
        }
    }
}

/// Whether `principal` may read what a GET reaches: the engine's rule
/// ([`joch_engine::may_read`], which the console asks too). The MCP stream
/// is a calling surface, open to every role.
fn reads(principal: &Principal, target: &Target) -> Result<(), EngineError> {
    match target.rest.first().map(String::as_str) {
        Some("mcp") => Ok(()),
        first => joch_engine::may_read(principal, first.unwrap_or("")),
    }
}

/// Whether `role` reaches a route that writes.
fn allowed(role: Role, method: &Method, target: &Target) -> bool {
    if role == Role::Admin {
        return true;
    }
    let rest: Vec<&str> = target.rest.iter().map(String::as_str).collect();
    let agent = match rest.as_slice() {
        ["toolcalls"] => *method == Method::POST,
        // The engine decides whose call a principal may cancel (its own).
        ["toolcalls", _, "cancel"] => *method == Method::POST,
        ["executions", _, "batches" | "complete"] => *method == Method::POST,
        ["executions", _, "artifacttools", _] => *method == Method::POST,
        ["mcp"] => true,
        ["hooks", ..] => *method == Method::POST,
        _ => false,
    };
    match role {
        Role::Agent => agent,
        Role::Approver => {
            agent
                || (*method == Method::POST
                    && matches!(
                        rest.as_slice(),
                        ["approvals", _, "approve" | "deny" | "edit"]
                    ))
        }
        Role::Admin => true,
    }
}
