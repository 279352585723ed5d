//! `/ui/credentials` (admins): the token vault's credentials, whose and
//! for which upstream, obtained and expiring when; never the token (the
//! page is built from what REST lists, without `spec.sealed`). **Revoke**
//! deletes one: the next call that needs it obtains a new token. Listing
//! and revoking are the engine's (`engine.vault().list` and `revoke`:
//! admin only), as for the REST API.

use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use joch_core::Time;
use joch_core::credential::Credential;
use maud::html;

use super::layout::{Section, page, see_other, wire};
use super::viewer::Viewer;
use crate::extract::Path;
use crate::{ApiError, AppState};

fn time(t: Option<Time>) -> String {
    t.map_or_else(
        || "—".to_owned(),
        |t| t.0.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

/// The namespace's credentials.
pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Response, ApiError> {
    let credentials = state
        .engine
        .vault()
        .list(&viewer.principal, &viewer.namespace)
        .await?;
    let body = html! {
        h1 { "Credentials" }
        p.note { "Tokens joch obtained for upstreams (Endpoints and MCP servers with " code { "spec.auth" } "), kept sealed in the vault. The tokens themselves are never shown." }
        @if credentials.is_empty() { p.card { "No credential in this namespace." } }
        @else { (table(&viewer, &credentials)) }
    };
    Ok(page(
        Some(&viewer),
        Section::Credentials,
        "Credentials",
        body,
    ))
}

fn table(viewer: &Viewer, credentials: &[Credential]) -> maud::Markup {
    html! {
        table {
            thead { tr { th { "Name" } th { "Upstream" } th { "For" } th { "Grant" } th { "Scope" } th { "Obtained" } th { "Expires" } th { "Revoke" } } }
            tbody {
                @for c in credentials {
                    @let (name, spec) = (&c.metadata.name, &c.spec);
                    tr {
                        td data-label="Name" { (name) }
                        td data-label="Upstream" { (spec.upstream.kind) "/" (spec.upstream.name) }
                        td data-label="For" { (spec.user.as_deref().unwrap_or("joch (service)")) }
                        td data-label="Grant" { (wire(&spec.grant)) }
                        td data-label="Scope" { (spec.scope.as_deref().unwrap_or("—")) }
                        td data-label="Obtained" { (time(Some(spec.obtained_at))) }
                        td data-label="Expires" { (time(spec.expires_at)) }
                        td data-label="Revoke" {
                            form method="post" action={ "/ui/credentials/" (name) "/revoke?ns=" (viewer.namespace) } {
                                input type="hidden" name="csrf" value=(viewer.csrf);
                                button.danger type="submit" aria-label={ "Revoke " (name) } { "Revoke" }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Revokes a credential, then shows the list again.
pub(crate) async fn revoke(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    state
        .engine
        .vault()
        .revoke(&viewer.principal, &viewer.namespace, &name)
        .await?;
    Ok(see_other(&format!(
        "/ui/credentials?ns={}",
        viewer.namespace
    )))
}
