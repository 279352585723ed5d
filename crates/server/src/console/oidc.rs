//! "Sign in with <issuer>": OpenID Connect, authorization code with PKCE
//! (RFC 6749 §4.1, RFC 7636), against the issuer's discovery document.
//!
//! `/ui/signin/oidc` has the engine start a sign-in (state, nonce, PKCE
//! verifier, stored and bound to this browser by the `joch_oidc` cookie)
//! and sends the browser to the provider's authorization endpoint. Anyone
//! may start one, so the engine caps them by the connection's address
//! (`ConnectInfo`, which joch's listener sets): beyond the cap it answers
//! 429 `too_many_sign_ins` as JSON, with `Retry-After`. The
//! provider sends it back to `/ui/signin/oidc/callback` with a code; the
//! engine takes the sign-in back (once, this browser's only), the code is
//! exchanged at the token endpoint with the verifier, and the engine opens
//! a session for the ID token's principal. The binding cookie is
//! SameSite=Lax, as the provider's redirect is a cross-site navigation
//! that a Strict cookie would not follow; for the same reason the callback
//! answers a page that moves on to the inbox itself, so that the Strict
//! session cookie goes with that same-site navigation.
//!
//! The discovery document is kept for [`DISCOVERY_TTL`] ([`Discoveries`]),
//! so that sign-ins do not each fetch it (twice: to start and to exchange).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{AppendHeaders, IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::layout::{Section, page};
use super::signin::signin_page;
use super::viewer::{SESSION_COOKIE, Visitor, cookie, set_cookie};
use crate::extract::Query;
use crate::{ApiError, AppState, OidcClient};

/// The cookie binding a started sign-in to the browser.
const BINDING_COOKIE: &str = "joch_oidc";
/// The callback's path, below the public URL.
const CALLBACK: &str = "/ui/signin/oidc/callback";

/// How long a fetched discovery document is used before it is fetched
/// again (a provider that moves its endpoints is followed within this).
pub(crate) const DISCOVERY_TTL: Duration = Duration::from_secs(10 * 60);

/// The issuer's discovery document, as last fetched. One sign-in at a time
/// fetches it (others wait for that fetch); a failed fetch is not kept.
#[derive(Default)]
pub(crate) struct Discoveries {
    fetched: tokio::sync::Mutex<Option<(Instant, Arc<Discovery>)>>,
}

/// What the discovery document names (OpenID Connect Discovery §3).
#[derive(Deserialize)]
struct Discovery {
    authorization_endpoint: String,
    token_endpoint: String,
}

#[derive(Deserialize)]
struct Tokens {
    id_token: Option<String>,
}

/// Why a sign-in through the provider failed, as the sign-in page says.
#[derive(Debug)]
enum Failure {
    NotConfigured,
    Provider(String),
    Refused(String),
    Unknown,
    IdToken,
    /// Refused beyond a cap: answered as the API's errors are.
    Throttled(ApiError),
}

impl Failure {
    fn message(&self) -> String {
        match self {
            Failure::NotConfigured => "sign-in through an identity provider is not configured".to_owned(),
            Failure::Provider(why) => format!("the identity provider could not be reached: {why}"),
            Failure::Refused(why) => format!("the identity provider refused the sign-in: {why}"),
            Failure::Unknown => "this sign-in is unknown, expired or was started in another browser; start again".to_owned(),
            Failure::IdToken => "the identity provider's ID token was not accepted (signature, issuer, audience, nonce or the namespace and role claims)".to_owned(),
            Failure::Throttled(refusal) => refusal.message.clone(),
        }
    }
}

fn client(state: &AppState) -> Result<&OidcClient, Failure> {
    state
        .config
        .console_oidc
        .as_ref()
        .ok_or(Failure::NotConfigured)
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .unwrap_or_default()
}

/// The discovery document: the one kept, while younger than the TTL.
async fn discover(state: &AppState, oidc: &OidcClient) -> Result<Arc<Discovery>, Failure> {
    let mut kept = state.discoveries.fetched.lock().await;
    if let Some((at, discovery)) = kept.as_ref() {
        if at.elapsed() < DISCOVERY_TTL {
            return Ok(Arc::clone(discovery));
        }
    }
    let discovery = Arc::new(fetch_discovery(oidc).await?);
    *kept = Some((Instant::now(), Arc::clone(&discovery)));
    Ok(discovery)
}

async fn fetch_discovery(oidc: &OidcClient) -> Result<Discovery, Failure> {
    let url = format!(
        "{}/.well-known/openid-configuration",
        oidc.issuer.trim_end_matches('/')
    );
    let answer = http()
        .get(&url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| Failure::Provider(format!("{url}: {e}")))?;
    answer
        .json()
        .await
        .map_err(|e| Failure::Provider(format!("{url}: {e}")))
}

fn redirect_uri(state: &AppState) -> String {
    format!(
        "{}{CALLBACK}",
        state.config.public_url.trim_end_matches('/')
    )
}

/// Starts a sign-in for the client at `peer` and sends the browser to the
/// provider.
pub(crate) async fn start(
    State(state): State<AppState>,
    visitor: Option<Extension<Visitor>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
) -> Response {
    let address = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
    match started(&state, address).await {
        Ok(response) => response,
        Err(Failure::Throttled(refusal)) => refusal.into_response(),
        Err(failure) => failed(&state, visitor, &failure),
    }
}

async fn started(state: &AppState, address: Option<std::net::IpAddr>) -> Result<Response, Failure> {
    let oidc = client(state)?;
    let endpoints = discover(state, oidc).await?;
    let sign_in = state
        .engine
        .identity()
        .begin_sign_in(address)
        .await
        .map_err(|e| match e {
            joch_engine::EngineError::Throttled { .. } => Failure::Throttled(e.into()),
            e => Failure::Provider(e.to_string()),
        })?;
    let query = serde_urlencoded::to_string([
        ("response_type", "code"),
        ("client_id", oidc.client_id.as_str()),
        ("redirect_uri", redirect_uri(state).as_str()),
        ("scope", "openid"),
        ("state", sign_in.state.as_str()),
        ("nonce", sign_in.nonce.as_str()),
        ("code_challenge", sign_in.challenge.as_str()),
        ("code_challenge_method", "S256"),
    ])
    .unwrap_or_default();
    let separator = if endpoints.authorization_endpoint.contains('?') {
        '&'
    } else {
        '?'
    };
    let to = format!("{}{separator}{query}", endpoints.authorization_endpoint);
    let ttl = state.engine.identity().sign_in_limits().ttl.as_secs();
    let binding = set_cookie(state, BINDING_COOKIE, &sign_in.binding, Some(ttl))
        .replace("SameSite=Strict", "SameSite=Lax");
    Ok(([(header::SET_COOKIE, binding)], Redirect::to(&to)).into_response())
}

#[derive(Deserialize)]
pub(crate) struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// The provider's redirect back: the code exchanged, a session opened.
pub(crate) async fn callback(
    State(state): State<AppState>,
    visitor: Option<Extension<Visitor>>,
    headers: HeaderMap,
    Query(back): Query<Callback>,
) -> Response {
    match finished(&state, &headers, back).await {
        Ok(response) => response,
        Err(failure) => failed(&state, visitor, &failure),
    }
}

async fn finished(
    state: &AppState,
    headers: &HeaderMap,
    back: Callback,
) -> Result<Response, Failure> {
    let oidc = client(state)?;
    if let Some(error) = back.error {
        let detail = back
            .error_description
            .map(|d| format!(" ({d})"))
            .unwrap_or_default();
        return Err(Failure::Refused(format!("{error}{detail}")));
    }
    let (Some(code), Some(sign_in)) = (back.code, back.state) else {
        return Err(Failure::Unknown);
    };
    let binding = cookie(headers, BINDING_COOKIE).unwrap_or_default();
    let engine = &state.engine;
    let pending = engine
        .identity()
        .take_sign_in(&sign_in, binding)
        .await
        .map_err(|e| Failure::Provider(e.to_string()))?
        .ok_or(Failure::Unknown)?;
    let id_token = exchange(state, oidc, &code, &pending.verifier).await?;
    let ttl = state.config.console_session_ttl;
    let opened = engine
        .identity()
        .open_id_session(&id_token, &oidc.client_id, &pending.nonce, ttl)
        .await
        .map_err(|e| Failure::Provider(e.to_string()))?
        .ok_or(Failure::IdToken)?;
    let session = set_cookie(state, SESSION_COOKIE, &opened.id, Some(ttl.as_secs()));
    let cleared = set_cookie(state, BINDING_COOKIE, "", Some(0));
    let body = html! {
        h1 { "Signed in" }
        p { a href="/ui/inbox" { "Go to the inbox" } }
    };
    let shown = page(None, Section::SignIn, "Signed in", body);
    // Appended: an array of headers would insert, keeping only the last.
    let cookies = AppendHeaders([(header::SET_COOKIE, session), (header::SET_COOKIE, cleared)]);
    let refresh = [(header::REFRESH, "0; url=/ui/inbox")];
    Ok((cookies, refresh, shown).into_response())
}

/// The code and verifier exchanged at the token endpoint for an ID token.
async fn exchange(
    state: &AppState,
    oidc: &OidcClient,
    code: &str,
    verifier: &str,
) -> Result<String, Failure> {
    let endpoints = discover(state, oidc).await?;
    let redirect = redirect_uri(state);
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect.as_str()),
        ("code_verifier", verifier),
    ];
    let mut request = http().post(&endpoints.token_endpoint);
    match &oidc.client_secret {
        Some(secret) => request = request.basic_auth(&oidc.client_id, Some(secret)),
        None => form.push(("client_id", oidc.client_id.as_str())),
    }
    let body = serde_urlencoded::to_string(&form).unwrap_or_default();
    let answer = request
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .map_err(|e| Failure::Provider(e.to_string()))?;
    if !answer.status().is_success() {
        let status = answer.status();
        let text = answer.text().await.unwrap_or_default();
        return Err(Failure::Refused(format!(
            "token endpoint answered {status}: {text}"
        )));
    }
    let tokens: Tokens = answer
        .json()
        .await
        .map_err(|e| Failure::Provider(format!("token endpoint: {e}")))?;
    tokens.id_token.ok_or(Failure::IdToken)
}

/// The sign-in form again, saying why (502 when the provider could not be
/// reached, 404 without a provider, else 401).
fn failed(state: &AppState, visitor: Option<Extension<Visitor>>, failure: &Failure) -> Response {
    let status = match failure {
        Failure::Provider(_) => StatusCode::BAD_GATEWAY,
        Failure::NotConfigured => StatusCode::NOT_FOUND,
        Failure::Throttled(refusal) => refusal.status,
        _ => StatusCode::UNAUTHORIZED,
    };
    let csrf = visitor.map(|v| v.0.csrf).unwrap_or_default();
    signin_page(state, &csrf, Some(&failure.message()), status)
}
