//! The console at `/ui`: server-rendered pages (maud templates, checked at
//! compile time) with htmx for the live and acting parts, every asset
//! embedded. It is another surface of the same engine: each page reads
//! through the engine as the signed-in principal, and each action is one
//! engine call with that principal, so the API's rules hold here too.
//!
//! - `viewer.rs`: who is looking (session or local) and the CSRF check;
//! - `signin.rs`: token sign-in and sign-out;
//! - `oidc.rs`: sign-in through the identity provider (OpenID Connect);
//! - `inbox.rs`: pending approvals, live, and decisions;
//! - `argsform.rs`: the edit form generated from the tool's input schema;
//! - `ledger.rs`: ToolCalls filtered and paged, a call's page, replay and resolve;
//! - `audit.rs`: a call's audit entries and their checks;
//! - `artifacts.rs`: a call's artifacts shown, previewed or offered;
//! - `executions.rs`: runs and one run's live timeline in lanes;
//! - `upstreams.rs`: MCP servers and their held-back definitions;
//! - `settings.rs`: policies (read) and tokens (admin);
//! - `credentials.rs`: the token vault's credentials, listed and revoked (admin);
//! - `overview.rs`: rates, latencies, costs and budget burn, as SVG;
//! - `trends.rs`: the overview's per-tool charts over time;
//! - `layout.rs`: the page shell, and a page the gate refused shown as a
//!   page saying why; `assets.rs`: embedded static files.

mod argsform;
mod artifacts;
mod assets;
mod audit;
mod credentials;
mod executions;
mod inbox;
mod layout;
mod ledger;
mod live;
mod oidc;
mod overview;
mod settings;
mod signin;
mod trends;
mod upstreams;
mod viewer;

use axum::extract::rejection::FormRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::Redirect;
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::de::DeserializeOwned;

use crate::{ApiError, ApiWord, AppState};
pub(crate) use oidc::Discoveries;

/// The console's routes, each behind the viewer guard.
pub(crate) fn routes(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/inbox") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/inbox") }))
        .route("/ui/assets/{file}", get(assets::serve))
        .route("/ui/signin", get(signin::form).post(signin::sign_in))
        .route("/ui/signin/oidc", get(oidc::start))
        .route("/ui/signin/oidc/callback", get(oidc::callback))
        .route("/ui/signout", post(signin::sign_out))
        .route("/ui/inbox", get(inbox::show))
        .route("/ui/inbox/stream", get(inbox::stream))
        .route("/ui/approvals/{name}/decide", post(inbox::decide))
        .route("/ui/calls", get(ledger::list))
        .route("/ui/calls/{name}", get(ledger::show))
        .route("/ui/calls/{name}/replay", post(ledger::replay))
        .route("/ui/artifacts/{id}/content", get(artifacts::content))
        .route("/ui/calls/{name}/resolve", post(ledger::resolve))
        .route("/ui/executions", get(executions::list))
        .route("/ui/executions/{name}", get(executions::show))
        .route("/ui/executions/{name}/stream", get(executions::stream))
        .route("/ui/overview", get(overview::show))
        .route("/ui/policies", get(settings::policies))
        .route("/ui/tokens", get(settings::tokens).post(settings::issue))
        .route("/ui/tokens/{name}/revoke", post(settings::revoke))
        .route("/ui/credentials", get(credentials::list))
        .route("/ui/credentials/{name}/revoke", post(credentials::revoke))
        .route("/ui/upstreams", get(upstreams::show))
        .route("/ui/upstreams/{name}/accept", post(upstreams::accept))
        .layer(axum::middleware::from_fn_with_state(state, viewer::guard))
}

/// A urlencoded form body whose rejection is a structured [`ApiError`].
pub(crate) struct Fields<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Fields<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Form::<T>::from_request(req, state).await {
            Ok(Form(value)) => Ok(Fields(value)),
            Err(rejection) => Err(rejected(&rejection)),
        }
    }
}

fn rejected(rejection: &FormRejection) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        ApiWord::InvalidResource,
        rejection.body_text(),
    )
}
