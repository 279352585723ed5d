//! Who looks at the console, and the CSRF check on everything it posts.
//!
//! Without authentication the viewer is the local principal, as on the API.
//! With it, the viewer is the principal of the session whose id the
//! `joch_session` cookie holds (see `joch_engine::sessions`). Every request
//! other than a read carries the CSRF token, as the `x-csrf-token` header
//! (htmx actions) or the `csrf` form field (plain forms): the session's own
//! token, or before a session (sign-in, and the local console) the random
//! value of the `joch_csrf` cookie. Both cookies are HttpOnly and
//! SameSite=Strict, so another site can neither read the token nor make
//! the browser send them; Secure when joch's public URL is https.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use joch_core::Principal;

use crate::{ApiError, ApiWord, AppState};

/// The cookie holding the session id.
pub(crate) const SESSION_COOKIE: &str = "joch_session";
/// The cookie holding the CSRF token before a session exists.
const CSRF_COOKIE: &str = "joch_csrf";
/// Largest console form accepted (the edit form carries arguments).
const MAX_FORM_BYTES: usize = 1024 * 1024;

/// The signed-in (or local) principal, its namespace and CSRF token.
#[derive(Clone, Debug)]
pub(crate) struct Viewer {
    pub(crate) principal: Principal,
    /// The namespace the pages show.
    pub(crate) namespace: String,
    /// The namespaces it may switch to, for a principal of several (empty
    /// for one of a single namespace).
    pub(crate) offered: Vec<String>,
    /// The token every form and action carries.
    pub(crate) csrf: String,
    /// Signed in with a session (and so may sign out).
    pub(crate) signed_in: bool,
}

/// The CSRF token of a visitor not signed in (the sign-in form).
#[derive(Clone, Debug)]
pub(crate) struct Visitor {
    pub(crate) csrf: String,
}

pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Strict, scoped to `/ui`.
pub(crate) fn set_cookie(
    state: &AppState,
    name: &str,
    value: &str,
    max_age: Option<u64>,
) -> String {
    let secure = if state.config.public_url.starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    let age = max_age
        .map(|s| format!("; Max-Age={s}"))
        .unwrap_or_default();
    format!("{name}={value}; Path=/ui; HttpOnly; SameSite=Strict{age}{secure}")
}

/// Resolves the viewer of every `/ui` request, sends strangers to sign in,
/// and refuses a non-read without its CSRF token (403 `csrf_refused`).
pub(crate) async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match guarded(state, request, next).await {
        Ok(response) | Err(response) => response,
    }
}

async fn guarded(state: AppState, request: Request, next: Next) -> Result<Response, Response> {
    let path = request.uri().path().to_owned();
    if path.starts_with("/ui/assets/") {
        return Ok(next.run(request).await);
    }
    let headers = request.headers().clone();
    let fresh_csrf = cookie(&headers, CSRF_COOKIE).is_none();
    let visitor_csrf = cookie(&headers, CSRF_COOKIE)
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let viewer = viewer(&state, &headers, request.uri().query(), &visitor_csrf)
        .await
        .map_err(IntoResponse::into_response)?;
    let public = path == "/ui/signin" || path.starts_with("/ui/signin/");
    let expected = match &viewer {
        Some(viewer) => viewer.csrf.clone(),
        None if public => visitor_csrf.clone(),
        None if request.method() == Method::GET => {
            return Err(Redirect::to("/ui/signin").into_response());
        }
        None => return Err(unauthorized().into_response()),
    };
    // A page refused by the engine's gate is shown as a page of its own
    // (htmx's requests keep the JSON, which `console.js` shows as an alert).
    let page_request = request.method() == Method::GET && !headers.contains_key("hx-request");
    let shown_to = viewer.clone().filter(|_| page_request);
    let mut request = request;
    if request.method() != Method::GET && request.method() != Method::HEAD {
        request = checked(request, &expected).await?;
    }
    match viewer {
        Some(viewer) => drop(request.extensions_mut().insert(viewer)),
        None => drop(request.extensions_mut().insert(Visitor {
            csrf: visitor_csrf.clone(),
        })),
    }
    let mut response = next.run(request).await;
    if let Some(viewer) = &shown_to {
        response = super::layout::refusal_as_page(viewer, &path, response).await;
    }
    if fresh_csrf {
        if let Ok(value) = set_cookie(&state, CSRF_COOKIE, &visitor_csrf, None).parse() {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    Ok(response)
}

async fn viewer(
    state: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
    visitor_csrf: &str,
) -> Result<Option<Viewer>, ApiError> {
    let (principal, csrf, signed_in) = if state.engine.identity().auth_required().await? {
        let Some(id) = cookie(headers, SESSION_COOKIE) else {
            return Ok(None);
        };
        match state.engine.identity().session(id).await? {
            Some(session) => (session.principal, session.csrf, true),
            None => return Ok(None),
        }
    } else {
        (Principal::local(), visitor_csrf.to_owned(), false)
    };
    let asked = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == "ns")
        .map(|(_, v)| v.to_owned());
    // The namespace asked for, if the principal acts in it; else its first.
    let home = principal
        .namespaces
        .listed()
        .and_then(|list| list.first())
        .map_or("default", String::as_str);
    let namespace = asked
        .filter(|ns| joch_core::names::validate_namespace(ns).is_ok())
        .filter(|ns| principal.namespaces.contains(ns))
        .unwrap_or_else(|| home.to_owned());
    let offered = match joch_engine::acts_in_several(&principal) {
        true => {
            state
                .engine
                .resources()
                .offered_namespaces(&principal)
                .await?
        }
        false => Vec::new(),
    };
    Ok(Some(Viewer {
        principal,
        namespace,
        offered,
        csrf,
        signed_in,
    }))
}

fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        ApiWord::Unauthorized,
        "sign in to the console first (/ui/signin)",
    )
}

fn csrf_refused() -> Response {
    ApiError::new(
        StatusCode::FORBIDDEN,
        ApiWord::CsrfRefused,
        "this form or action lacks its CSRF token; reload the page and try again",
    )
    .into_response()
}

/// Passes the request on when it carries `expected` as the `x-csrf-token`
/// header or the `csrf` field of its form body.
async fn checked(request: Request, expected: &str) -> Result<Request, Response> {
    let header = request
        .headers()
        .get("x-csrf-token")
        .and_then(|v| v.to_str().ok());
    if let Some(given) = header {
        return if given == expected {
            Ok(request)
        } else {
            Err(csrf_refused())
        };
    }
    let (parts, body) = request.into_parts();
    let bytes: Bytes = axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ApiWord::PayloadTooLarge,
                "the form is larger than the console accepts",
            )
            .into_response()
        })?;
    let given = form_field(&bytes, "csrf");
    if given.as_deref() != Some(expected) {
        return Err(csrf_refused());
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

fn form_field(body: &[u8], name: &str) -> Option<String> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(body)
        .ok()?
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn cookies_and_form_fields_are_read_exactly() {
        let mut headers = HeaderMap::new();
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; joch_csrf=xyz"),
        );
        headers.append(header::COOKIE, HeaderValue::from_static("joch_session=s=2"));
        assert_eq!(cookie(&headers, "joch_csrf"), Some("xyz"));
        assert_eq!(cookie(&headers, "joch_session"), Some("s=2"));
        assert_eq!(cookie(&headers, "csrf"), None);
        assert_eq!(
            form_field(b"verb=approve&csrf=a%20b", "csrf").as_deref(),
            Some("a b")
        );
        assert_eq!(form_field(b"verb=approve", "csrf"), None);
        assert_eq!(form_field(b"\xff=\xfe", "csrf"), None);
    }
}
