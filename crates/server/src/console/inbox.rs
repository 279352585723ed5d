//! `/ui/inbox`: the pending approvals the viewer may see, nearest deadline
//! first, live over Server-Sent Events, and the decisions on them. Every
//! decision is one call of the engine's approve / edit / reject entry
//! points with the viewer's principal, so the rulebook is the API's.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use futures_util::stream::{Stream, StreamExt};
use joch_core::ApprovalActionKind;
use joch_engine::{ApprovalDecision, Engine, EngineError, InboxItem};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::Fields;
use super::layout::{Section, json_block, page, wire};
use super::viewer::Viewer;
use crate::extract::{Path, Query};
use crate::{ApiError, ApiWord, AppState};

/// The inbox page.
pub(crate) async fn show(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Response, ApiError> {
    let items = state
        .engine
        .approvals()
        .inbox(&viewer.principal, &viewer.namespace)
        .await?;
    let shown = rendered(&state.engine, &viewer, &items).await?;
    // Where else calls wait, for a principal that may go there.
    let waiting = match joch_engine::acts_in_several(&viewer.principal) {
        true => Some(
            state
                .engine
                .approvals()
                .waiting(&viewer.principal, &viewer.namespace)
                .await?,
        ),
        false => None,
    };
    let stream = format!(
        "/ui/inbox/stream?ns={}&seen={}",
        viewer.namespace,
        fingerprint(&shown.0)
    );
    let body = html! {
        h1 { "Approvals waiting" }
        p.note { "Nearest deadline first. The list updates by itself when a call starts waiting or someone decides." }
        @if let Some(waiting) = &waiting {
            (by_namespace(&viewer.namespace, waiting))
        }
        div hx-ext="sse" sse-connect=(stream) {
            div #inbox sse-swap="inbox" aria-live="polite" { (shown) }
        }
    };
    Ok(page(Some(&viewer), Section::Inbox, "Approvals", body))
}

/// How many calls wait in each namespace, each a link to its approvals.
fn by_namespace(shown: &str, waiting: &BTreeMap<String, usize>) -> Markup {
    html! {
        nav.namespaces aria-labelledby="by-namespace" {
            h2 #by-namespace { "Waiting by namespace" }
            ul {
                @for (namespace, count) in waiting {
                    li {
                        a href={ "/ui/inbox?ns=" (namespace) }
                            aria-current=[(namespace == shown).then_some("page")] { (namespace) }
                        " · " (count) " waiting"
                    }
                }
            }
        }
    }
}

/// What the page already shows, so the stream does not send it again.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Seen {
    #[serde(default)]
    #[allow(dead_code)]
    ns: String,
    #[serde(default)]
    seen: Option<String>,
}

/// A stable fingerprint of rendered HTML (the same on every replica).
pub(crate) fn fingerprint(html: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    html.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// The list as a live stream: sent at once if it changed since the page
/// was rendered, then again whenever an approval opens or is decided
/// (here, or on another replica).
pub(crate) async fn stream(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Query(seen): Query<Seen>,
) -> Result<Response, ApiError> {
    let cap = state.config.max_streams_per_principal;
    let held = state.streams.open(Some(&viewer.principal), cap)?;
    let events = live(state.engine.clone(), viewer, seen.seen).map(move |event| {
        let _counted = &held;
        event
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

fn live(
    engine: Engine,
    viewer: Viewer,
    seen: Option<String>,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let changes = engine.approvals().changes();
    let render = move || {
        let (engine, viewer) = (engine.clone(), viewer.clone());
        async move {
            let items = engine
                .approvals()
                .inbox(&viewer.principal, &viewer.namespace)
                .await?;
            let html = rendered(&engine, &viewer, &items).await?.into_string();
            Ok((fingerprint(&html), html))
        }
    };
    // A store shared with other processes that do not notify (SQLite) is
    // re-read every few seconds.
    super::live::refreshed("inbox", changes, Duration::from_secs(3), seen, render)
}

/// The list, with each tool's input schema for its edit form.
async fn rendered(
    engine: &Engine,
    viewer: &Viewer,
    items: &[InboxItem],
) -> Result<Markup, EngineError> {
    let mut schemas: HashMap<String, Value> = HashMap::new();
    for item in items {
        let tool = tool_of(item);
        if schemas.contains_key(tool) {
            continue;
        }
        let schema = match engine
            .resources()
            .get_tool(&viewer.principal, &viewer.namespace, tool)
            .await
        {
            Ok(t) => t.spec.input_schema,
            Err(EngineError::NotFound { .. }) => Value::Null,
            Err(e) => return Err(e),
        };
        schemas.insert(tool.to_owned(), schema);
    }
    Ok(html! {
        @if items.is_empty() {
            p.card { "No call is waiting for approval." }
        }
        @for item in items { (card(viewer, item, schemas.get(tool_of(item)).unwrap_or(&Value::Null))) }
    })
}

fn tool_of(item: &InboxItem) -> &str {
    item.approval
        .spec
        .payload
        .get("tool")
        .and_then(Value::as_str)
        .unwrap_or("?")
}

fn card(viewer: &Viewer, item: &InboxItem, schema: &Value) -> Markup {
    let a = &item.approval;
    let name = &a.metadata.name;
    let tool = tool_of(item);
    let call = item.call.as_ref();
    let agent = call
        .and_then(|c| c.spec.agent_ref.as_ref())
        .map(|r| r.name.as_str());
    let execution = call
        .and_then(|c| c.spec.execution_ref.as_ref())
        .map(|r| r.name.as_str());
    let caller = call
        .and_then(|c| c.status.principal.as_ref())
        .map(|p| p.name.as_str());
    let input = call.map_or(&Value::Null, |c| &c.spec.input);
    let heading = format!("approval-{name}");
    html! {
        article.card aria-labelledby=(heading) data-approval=(name) {
            h2 id=(heading) { (tool) " " span.note { "· " a href={ "/ui/calls/" (name) "?ns=" (viewer.namespace) } { (name) } } }
            dl.facts {
                dt { "Side effects" } dd { (wire(&a.spec.risk.level)) }
                dt { "Agent" } dd { (agent.unwrap_or("—")) }
                dt { "Made by" } dd { (caller.unwrap_or("—")) }
                dt { "Execution" } dd {
                    @match execution { Some(e) => a href={ "/ui/calls?ns=" (viewer.namespace) "&execution=" (e) } { (e) }, None => "—" }
                }
                dt { "Policy" } dd {
                    @match &a.spec.policy_ref {
                        Some(p) => { (p.name) " version " (p.version) },
                        None => "the tool requires approval",
                    }
                }
                dt { "Why" } dd { (a.spec.risk.summary) }
                @if let Some(prompt) = a.spec.payload.pointer("/userInput/prompt").and_then(Value::as_str) {
                    dt { "Asks for" } dd { (prompt) }
                }
                dt { "Time left" } dd {
                    @if let Some(deadline) = a.status.deadline {
                        time datetime=(deadline.0.to_rfc3339()) data-deadline=(deadline.0.to_rfc3339()) {
                            "until " (deadline.0.format("%H:%M:%S UTC"))
                        }
                    }
                }
            }
            h3.note { "Arguments as recorded" }
            (json_block("Arguments", input))
            @match &item.may_decide {
                Ok(()) => (actions(viewer, item, schema)),
                Err(why) => p.note { "You cannot decide this one: " (why) },
            }
        }
    }
}

fn actions(viewer: &Viewer, item: &InboxItem, schema: &Value) -> Markup {
    let a = &item.approval;
    let name = &a.metadata.name;
    let url = format!("/ui/approvals/{name}/decide?ns={}", viewer.namespace);
    let id = |field: &str| format!("{field}-{name}");
    let user_input = a.spec.action.kind == ApprovalActionKind::UserInput;
    // A consent is the user's to give, at the upstream's authorization
    // server: the engine refuses to approve it (`consent_not_approvable`).
    let consent = a.spec.action.kind == ApprovalActionKind::Consent;
    let input = item
        .call
        .as_ref()
        .map_or(Value::Null, |c| c.spec.input.clone());
    let pretty = serde_json::to_string_pretty(&input).unwrap_or_default();
    let fields = super::argsform::fields(name, schema, &input);
    html! {
        // The browser's validation runs for an edit only (console.js), not
        // for an approval or denial that leaves the fields alone.
        form hx-post=(url) hx-target="#inbox" hx-swap="innerHTML" novalidate {
            div.actions {
                @if consent {
                    p.note {
                        "This call waits for its user's consent at the upstream's authorization \
                         server: only the user can give it. You may deny the call."
                    }
                } @else {
                    fieldset {
                        legend { "Approve" }
                        label for=(id("rationale")) { "Rationale (for the record)" }
                        input id=(id("rationale")) type="text" name="rationale";
                        @if user_input {
                            label for=(id("value")) { "Value to provide (text)" }
                            input id=(id("value")) type="text" name="value";
                            button.primary type="submit" name="verb" value="provide" { "Provide value" }
                        } @else {
                            button.primary type="submit" name="verb" value="approve" { "Approve" }
                            button type="submit" name="verb" value="always" { "Approve always" }
                        }
                    }
                }
                @if !user_input && !consent {
                    fieldset {
                        legend { "Edit the arguments" }
                        @for f in &fields { (f) }
                        @if fields.is_empty() {
                            label for=(id("input")) { "Arguments (JSON, checked against the tool's input schema)" }
                            textarea id=(id("input")) name="input" rows="6" { (pretty) }
                        } @else {
                            details {
                                summary { "All arguments as JSON" }
                                label for=(id("input")) { "Arguments (JSON; the fields above replace their keys)" }
                                textarea id=(id("input")) name="input" rows="6" { (pretty) }
                            }
                        }
                        button type="submit" name="verb" value="edit" { "Approve with these arguments" }
                    }
                }
                fieldset {
                    legend { "Deny" }
                    label for=(id("message")) { "Message for the model" }
                    input id=(id("message")) type="text" name="message";
                    button.danger type="submit" name="verb" value="deny" { "Deny" }
                }
            }
        }
    }
}

/// What an inbox form posts.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecisionForm {
    verb: Verb,
    #[serde(default)]
    rationale: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    input: String,
    #[serde(default)]
    value: String,
    /// Checked by the guard; part of every form.
    #[serde(default)]
    #[allow(dead_code)]
    csrf: String,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Verb {
    Approve,
    Always,
    Edit,
    Provide,
    Deny,
}

fn some(text: &str) -> Option<String> {
    Some(text.trim().to_owned()).filter(|t| !t.is_empty())
}

impl DecisionForm {
    fn decision(&self) -> Result<ApprovalDecision, ApiError> {
        let parse = |field: &str, text: &str| {
            serde_json::from_str::<Value>(text).map_err(|e| {
                ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ApiWord::InvalidResource,
                    format!("{field}: not valid JSON: {e}"),
                )
            })
        };
        Ok(ApprovalDecision {
            // Recorded only for the local console; a signed-in decision is
            // recorded under the principal's name.
            by: "console".to_owned(),
            rationale: some(&self.rationale),
            message: some(&self.message),
            edited_input: match self.verb {
                Verb::Edit => Some(parse("input", &self.input)?),
                _ => None,
            },
            value: match self.verb {
                Verb::Provide => Some(Value::String(self.value.clone())),
                _ => None,
            },
            always: matches!(self.verb, Verb::Always),
            for_user: false,
        })
    }
}

/// Decides, then answers the refreshed list.
pub(crate) async fn decide(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
    Fields(form): Fields<DecisionForm>,
) -> Result<Response, ApiError> {
    let (engine, by, ns) = (&state.engine, &viewer.principal, viewer.namespace.as_str());
    let decision = form.decision()?;
    match form.verb {
        Verb::Approve | Verb::Always | Verb::Provide | Verb::Edit => {
            engine.approvals().approve(by, ns, &name, decision).await?
        }
        Verb::Deny => engine.approvals().reject(by, ns, &name, decision).await?,
    };
    let items = engine.approvals().inbox(by, ns).await?;
    Ok(Html(rendered(engine, &viewer, &items).await?.into_string()).into_response())
}

#[cfg(test)]
mod tests {
    use joch_core::{Approval, Principal};
    use serde_json::json;

    use super::*;

    fn item(kind: &str) -> InboxItem {
        let approval: Approval = serde_json::from_value(json!({
            "metadata": {"name": "call-1", "namespace": "ns"},
            "spec": {
                "action": {"type": kind, "toolCallRef": {"name": "call-1"}},
                "risk": {"level": "external_write", "summary": "test"},
                "options": ["approve", "reject"],
                "payload": {}
            }
        }))
        .expect("an approval");
        InboxItem {
            approval,
            call: None,
            may_decide: Ok(()),
        }
    }

    fn viewer() -> Viewer {
        Viewer {
            principal: Principal::local(),
            namespace: "ns".to_owned(),
            offered: Vec::new(),
            csrf: "t".to_owned(),
            signed_in: false,
        }
    }

    /// A consent offers no approval or edit (the engine would refuse
    /// them), only a denial; a call's approval offers all three.
    #[test]
    fn a_consent_can_only_be_denied() {
        let consent = actions(&viewer(), &item("consent"), &json!({})).into_string();
        assert!(!consent.contains(r#"value="approve""#), "{consent}");
        assert!(!consent.contains(r#"value="edit""#), "{consent}");
        assert!(consent.contains(r#"value="deny""#), "{consent}");
        assert!(consent.contains("only the user can give it"), "{consent}");
        let call = actions(&viewer(), &item("tool_call"), &json!({})).into_string();
        assert!(call.contains(r#"value="approve""#), "{call}");
        assert!(call.contains(r#"value="edit""#), "{call}");
    }
}
