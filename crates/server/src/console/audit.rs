//! A call's audit on its page: the entries naming the call and its
//! approval, each with what the engine checked of it (`Audit::of_call`),
//! or why the viewer's role does not read the audit.

use joch_engine::{CheckedEntry, Engine, EngineError, RecordAudit};
use maud::{Markup, html};

use super::viewer::Viewer;
use crate::ApiError;

/// The audit section of call `name`'s page.
pub(crate) async fn section(
    engine: &Engine,
    viewer: &Viewer,
    name: &str,
) -> Result<Markup, ApiError> {
    let audit = match engine
        .audit()
        .of_call(&viewer.principal, &viewer.namespace, name)
        .await
    {
        Ok(audit) => audit,
        Err(EngineError::Forbidden(why)) => {
            return Ok(html! { h2 { "Audit" } p.note { (why) } });
        }
        Err(e) => return Err(e.into()),
    };
    Ok(shown(&audit))
}

fn shown(audit: &RecordAudit) -> Markup {
    let verdict = if audit.intact() {
        "Verified: each entry hashes to its content and links to the entry before it, and the records as stored match their latest entries."
    } else {
        "Not verified: see the checks below. Run `joch audit verify` for the whole chain."
    };
    html! {
        h2 { "Audit" }
        @if audit.entries.is_empty() {
            p.note { "No audit entry yet: a call's entry is written when it settles." }
        } @else {
            p.card data-audit=(if audit.intact() { "intact" } else { "broken" }) role="status" { (verdict) }
            table {
                thead { tr { th { "Entry" } th { "Record" } th { "Phase" } th { "Hash" } th { "Checks" } } }
                tbody { @for e in &audit.entries { (row(e)) } }
            }
            @for (kind, matches) in &audit.records {
                p.note { (kind) " as stored " @if *matches { "matches its latest entry." } @else { strong { "differs from its latest entry." } } }
            }
        }
    }
}

fn row(e: &CheckedEntry) -> Markup {
    let text = |key: &str| {
        e.line
            .entry
            .get(key)
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_owned()
    };
    let ok = |good: bool| if good { "yes" } else { "NO" };
    html! {
        tr {
            td data-label="Entry" { "#" (e.line.seq) }
            td data-label="Record" { (text("kind")) }
            td data-label="Phase" { (text("phase")) }
            td data-label="Hash" { code { (e.line.hash.get(..16).unwrap_or(&e.line.hash)) "…" } }
            td data-label="Checks" { "hashes: " (ok(e.hashes)) ", links: " (ok(e.linked)) }
        }
    }
}
