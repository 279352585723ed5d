//! `/ui/signin` and `/ui/signout`: a token in, a session cookie out (or
//! the identity provider's sign-in, `oidc.rs`).

use axum::Extension;
use axum::extract::{Form, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::layout::{Section, page};
use super::viewer::{SESSION_COOKIE, Viewer, Visitor, cookie, set_cookie};
use crate::{ApiError, AppState};

/// The sign-in form.
pub(crate) async fn form(
    State(state): State<AppState>,
    visitor: Option<Extension<Visitor>>,
) -> Result<Response, ApiError> {
    match visitor {
        Some(Extension(visitor)) if state.engine.identity().auth_required().await? => {
            Ok(signin_page(&state, &visitor.csrf, None, StatusCode::OK))
        }
        _ => Ok(Redirect::to("/ui/inbox").into_response()),
    }
}

/// The sign-in page: a token form, and "Sign in with" the identity
/// provider when the console is its client.
pub(crate) fn signin_page(
    state: &AppState,
    csrf: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let issuer = state
        .config
        .console_oidc
        .as_ref()
        .map(|o| o.issuer.as_str());
    let body = html! {
        h1 { "Sign in to joch" }
        @if let Some(error) = error {
            p.alert role="alert" { (error) }
        }
        @if let Some(issuer) = issuer {
            p.card { a.button.primary href="/ui/signin/oidc" { "Sign in with " (issuer) } }
        }
        form method="post" action="/ui/signin" class="card" {
            input type="hidden" name="csrf" value=(csrf);
            label for="token" { "API token" }
            input #token type="password" name="token" autocomplete="off" required;
            p.note { "A joch API token (or the root token). The console keeps a session; the token itself is not stored." }
            button.primary type="submit" { "Sign in" }
        }
    };
    (status, page(None, Section::SignIn, "Sign in", body)).into_response()
}

#[derive(Deserialize)]
pub(crate) struct SignIn {
    token: String,
}

/// Opens a session: 303 to the inbox with the session cookie, or the form
/// again (401) when the token is not one joch knows.
pub(crate) async fn sign_in(
    State(state): State<AppState>,
    visitor: Option<Extension<Visitor>>,
    Form(form): Form<SignIn>,
) -> Result<Response, ApiError> {
    let ttl = state.config.console_session_ttl;
    let Some(opened) = state
        .engine
        .identity()
        .open_session(form.token.trim(), ttl)
        .await?
    else {
        let csrf = visitor.map(|v| v.0.csrf).unwrap_or_default();
        return Ok(signin_page(
            &state,
            &csrf,
            Some("That token is unknown, expired or revoked."),
            StatusCode::UNAUTHORIZED,
        ));
    };
    let cookie = set_cookie(&state, SESSION_COOKIE, &opened.id, Some(ttl.as_secs()));
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to("/ui/inbox")).into_response())
}

/// Ends the session and clears its cookie.
pub(crate) async fn sign_out(
    State(state): State<AppState>,
    Extension(_viewer): Extension<Viewer>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(id) = cookie(&headers, SESSION_COOKIE) {
        state.engine.identity().close_session(id).await?;
    }
    let cleared = set_cookie(&state, SESSION_COOKIE, "", Some(0));
    Ok(([(header::SET_COOKIE, cleared)], Redirect::to("/ui/signin")).into_response())
}
