//! The page shell every console page shares: skip link, navigation shaped
//! by the viewer's role, who is signed in, the alert region, and the CSRF
//! token htmx sends with every action.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use joch_engine::{Action, Collection};
use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

use super::viewer::Viewer;

/// The console's pages, for the navigation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Overview,
    Inbox,
    Ledger,
    Executions,
    Upstreams,
    Policies,
    Tokens,
    Credentials,
    SignIn,
}

impl Section {
    fn title(self) -> &'static str {
        match self {
            Section::Overview => "Overview",
            Section::Inbox => "Approvals",
            Section::Ledger => "Ledger",
            Section::Executions => "Executions",
            Section::Upstreams => "Upstreams",
            Section::Policies => "Policies",
            Section::Tokens => "Tokens",
            Section::Credentials => "Credentials",
            Section::SignIn => "Sign in",
        }
    }

    fn href(self) -> &'static str {
        match self {
            Section::Overview => "/ui/overview",
            Section::Inbox => "/ui/inbox",
            Section::Ledger => "/ui/calls",
            Section::Executions => "/ui/executions",
            Section::Upstreams => "/ui/upstreams",
            Section::Policies => "/ui/policies",
            Section::Tokens => "/ui/tokens",
            Section::Credentials => "/ui/credentials",
            Section::SignIn => "/ui/signin",
        }
    }

    /// The section a console path belongs to (the overview for any other).
    fn of_path(path: &str) -> Self {
        [
            Section::Inbox,
            Section::Ledger,
            Section::Executions,
            Section::Upstreams,
            Section::Policies,
            Section::Tokens,
            Section::Credentials,
        ]
        .into_iter()
        .find(|s| path.starts_with(s.href()))
        .unwrap_or(Section::Overview)
    }
}

/// Most bytes of a refusal read back to show it as a page.
const MAX_REFUSAL_BYTES: usize = 64 * 1024;

/// A page a handler refused as the API does (`403`, the engine's gate's
/// JSON), shown instead as a console page saying why, still `403`; any
/// other answer as it is.
pub(crate) async fn refusal_as_page(viewer: &Viewer, path: &str, response: Response) -> Response {
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    if response.status() != StatusCode::FORBIDDEN || !json {
        return response;
    }
    let body = axum::body::to_bytes(response.into_body(), MAX_REFUSAL_BYTES)
        .await
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .unwrap_or_default();
    let code = body["code"].as_str().unwrap_or("forbidden");
    let message = body["message"].as_str().unwrap_or("not allowed");
    let shown = html! {
        h1 { "Not allowed" }
        p.card role="alert" data-code=(code) { (message) }
    };
    let mut page = page(Some(viewer), Section::of_path(path), "Not allowed", shown);
    *page.status_mut() = StatusCode::FORBIDDEN;
    page
}

/// A whole page.
pub(crate) fn page(
    viewer: Option<&Viewer>,
    section: Section,
    title: &str,
    body: Markup,
) -> Response {
    let csrf = viewer.map(|v| v.csrf.as_str()).unwrap_or_default();
    let headers = serde_json::json!({"x-csrf-token": csrf}).to_string();
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="csrf-token" content=(csrf);
                title { (title) " · joch" }
                link rel="stylesheet" href="/ui/assets/console.css";
                script src="/ui/assets/htmx.js" defer {}
                script src="/ui/assets/sse.js" defer {}
                script src="/ui/assets/console.js" defer {}
            }
            body hx-headers=(headers) {
                a.skip href="#main" { "Skip to content" }
                header {
                    a.brand href="/ui" { "joch" }
                    @if let Some(viewer) = viewer {
                        (navigation(viewer, section))
                        (who(viewer, section))
                    }
                }
                main id="main" {
                    div id="alert" class="alert" role="alert" {}
                    (body)
                }
            }
        }
    };
    Html(markup.into_string()).into_response()
}

fn navigation(viewer: &Viewer, current: Section) -> Markup {
    let mut sections = vec![
        Section::Overview,
        Section::Inbox,
        Section::Ledger,
        Section::Executions,
    ];
    // A page shows in the menu when the engine's gate lets its
    // resources be read (the page itself reaches the same gate).
    let reads = |c| joch_engine::may(&viewer.principal, &Action::Read(c)).is_ok();
    for (section, collection) in [
        (Section::Upstreams, Collection::McpServers),
        (Section::Policies, Collection::Policies),
        (Section::Tokens, Collection::Tokens),
        (Section::Credentials, Collection::Credentials),
    ] {
        if reads(collection) {
            sections.push(section);
        }
    }
    let ns = &viewer.namespace;
    html! {
        nav aria-label="Console" {
            ul {
                @for s in sections {
                    li {
                        a href={ (s.href()) "?ns=" (ns) }
                            aria-current=[(s == current).then_some("page")] { (s.title()) }
                    }
                }
            }
        }
    }
}

fn who(viewer: &Viewer, section: Section) -> Markup {
    let p = &viewer.principal;
    html! {
        div.who {
            span { (p.name) " · " (p.role.as_str()) " · namespace " strong { (viewer.namespace) } }
            // A principal of several namespaces opens this page's section
            // in another (the approvals page lists where calls wait).
            @if !viewer.offered.is_empty() {
                form.switch method="get" action=(section.href()) {
                    label for="switch-ns" { "Namespace" }
                    input #switch-ns name="ns" value=(viewer.namespace) list="namespaces" required;
                    datalist #namespaces {
                        @for ns in &viewer.offered { option value=(ns) {} }
                    }
                    button type="submit" { "Switch" }
                }
            }
            @if viewer.signed_in {
                form method="post" action="/ui/signout" {
                    input type="hidden" name="csrf" value=(viewer.csrf);
                    button type="submit" { "Sign out" }
                }
            }
        }
    }
}

/// A JSON value, pretty, with redacted fields marked for the eye and for
/// screen readers (the text itself says `[REDACTED]`).
pub(crate) fn json_block(label: &str, value: &Value) -> Markup {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    let redacted = text.contains(joch_core::redact::REDACTED);
    html! {
        pre aria-label=(label) class=[redacted.then_some("redacted")] { (text) }
        @if redacted {
            p.note { "Fields shown as " code { (joch_core::redact::REDACTED) } " were redacted before they were recorded." }
        }
    }
}

/// A value as the wire spells it (`external_write`).
pub(crate) fn wire<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(text)) => text,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// 303 to `to`: where a form's action sends the browser next (a path that
/// is not a header value sends it nowhere, rather than failing).
pub(crate) fn see_other(to: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(to) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, to);
    }
    response
}
