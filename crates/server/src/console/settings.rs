//! `/ui/policies` (each policy with its version and rules, for whom the
//! engine's read rule lets read them) and `/ui/tokens` (admins: list,
//! issue, revoke; the engine refuses anyone else).

use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use joch_core::Policy;
use joch_core::token::{ApiToken, Role};
use joch_engine::ListParams;
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::json;

use super::Fields;
use super::layout::{Section, json_block, page, see_other, wire};
use super::viewer::Viewer;
use crate::extract::Path;
use crate::{ApiError, AppState};

/// The namespace's policies.
pub(crate) async fn policies(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Response, ApiError> {
    let params = ListParams {
        limit: Some(500),
        ..ListParams::default()
    };
    let policies = state
        .engine
        .resources()
        .read_all::<Policy>(&viewer.principal, &viewer.namespace, params)
        .await?
        .items;
    let body = html! {
        h1 { "Policies" }
        @if policies.is_empty() { p.card { "No policy: every call is allowed." } }
        @for p in &policies { (policy(p)) }
    };
    Ok(page(Some(&viewer), Section::Policies, "Policies", body))
}

fn policy(p: &Policy) -> Markup {
    let name = &p.metadata.name;
    html! {
        section.card aria-labelledby={ "policy-" (name) } {
            h2 id={ "policy-" (name) } { (name) " " span.note { "version " (p.spec.version) } }
            @if !p.spec.description.is_empty() { p { (p.spec.description) } }
            dl.facts {
                dt { "Enforcement" } dd { (wire(&p.spec.enforcement)) }
                dt { "Applies to" } dd { code { (serde_json::to_string(&p.spec.applies_to).unwrap_or_default()) } }
                dt { "Rules" } dd { (p.spec.rules.len()) @if p.spec.rego.is_some() { " and a Rego module" } }
                dt { "Stored version" } dd { (p.metadata.resource_version) }
            }
            @for rule in &p.spec.rules {
                (json_block("Rule", &serde_json::to_value(rule).unwrap_or_default()))
            }
        }
    }
}

/// The namespace's tokens, and a form to issue one.
pub(crate) async fn tokens(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Response, ApiError> {
    let tokens = state
        .engine
        .identity()
        .list_tokens(&viewer.principal, &viewer.namespace)
        .await?;
    Ok(tokens_page(&viewer, &tokens, None))
}

fn tokens_page(viewer: &Viewer, tokens: &[ApiToken], issued: Option<(&str, &str)>) -> Response {
    let ns = &viewer.namespace;
    let body = html! {
        h1 { "Tokens" }
        @if let Some((name, secret)) = issued {
            div.card role="status" {
                p { "Token " strong { (name) } " issued. Copy it now: it is not stored and cannot be shown again." }
                pre aria-label="The new token" { (secret) }
            }
        }
        table {
            thead { tr { th { "Name" } th { "Role" } th { "Tools" } th { "Revoke" } } }
            tbody {
                @for t in tokens {
                    tr {
                        td data-label="Name" { (t.metadata.name) }
                        td data-label="Role" { (t.spec.role.as_str()) }
                        td data-label="Tools" { (t.spec.tools.as_ref().map_or("every tool".to_owned(), |s| json!(s).to_string())) }
                        td data-label="Revoke" {
                            form method="post" action={ "/ui/tokens/" (t.metadata.name) "/revoke?ns=" (ns) } {
                                input type="hidden" name="csrf" value=(viewer.csrf);
                                button.danger type="submit" aria-label={ "Revoke " (t.metadata.name) } { "Revoke" }
                            }
                        }
                    }
                }
            }
        }
        form.card method="post" action={ "/ui/tokens?ns=" (ns) } {
            h2 { "Issue a token" }
            input type="hidden" name="csrf" value=(viewer.csrf);
            label for="token-name" { "Name" }
            input #token-name type="text" name="name" required;
            label for="token-role" { "Role" }
            select #token-role name="role" {
                option value="agent" { "agent" }
                option value="approver" { "approver" }
                option value="admin" { "admin" }
            }
            button.primary type="submit" { "Issue" }
        }
    };
    page(Some(viewer), Section::Tokens, "Tokens", body)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IssueForm {
    name: String,
    role: Role,
    #[serde(default)]
    #[allow(dead_code)]
    csrf: String,
}

/// Issues a token and shows its secret once.
pub(crate) async fn issue(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Fields(form): Fields<IssueForm>,
) -> Result<Response, ApiError> {
    let (engine, by, ns) = (&state.engine, &viewer.principal, viewer.namespace.as_str());
    let (_, secret) = engine
        .identity()
        .issue_token(by, ns, form.name.trim(), form.role, None)
        .await?;
    let tokens = engine.identity().list_tokens(by, ns).await?;
    Ok(tokens_page(
        &viewer,
        &tokens,
        Some((form.name.trim(), &secret)),
    ))
}

/// Revokes a token, then shows the list again.
pub(crate) async fn revoke(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    state
        .engine
        .identity()
        .revoke_token(&viewer.principal, &viewer.namespace, &name)
        .await?;
    Ok(see_other(&format!("/ui/tokens?ns={}", viewer.namespace)))
}
