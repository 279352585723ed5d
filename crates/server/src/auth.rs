//! Authentication of every request, once a root token is configured or
//! any token exists (before that, joch serves loopback only): this
//! middleware only establishes who is asking, the `Principal` it hands the
//! handlers. What that principal may do (its namespace, its role's
//! actions, the rules on calls and decisions, which tools exist for it) is
//! the engine's gate (`rules::may`, asked by every engine entry point), so
//! that REST, MCP, hooks, the console, the CLI and the library keep the
//! same rules. Without authentication the principal is the local one.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use joch_engine::Principal;

use crate::{ApiError, ApiWord, AppState, discovery};

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
            ApiError::new(StatusCode::UNAUTHORIZED, ApiWord::Unauthorized, message).into_response();
        answer.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            discovery::challenge(&state.config, &path, refused),
        );
        return answer;
    };
    request.extensions_mut().insert(principal);
    next.run(request).await
}
