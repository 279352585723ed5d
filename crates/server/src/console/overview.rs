//! `/ui/overview`: the namespace at a glance over a fixed window, the last
//! hour (or 6 or 24, `?window=`) in 12 buckets ([`CallWindow`], read by
//! `engine.calls().over`: per bucket a count up to [`COUNT_CAP`] and at
//! most [`SAMPLE`] of its newest calls): calls per second, calls over time, per
//! tool the failure and denial rates and p50/p99 latency, today's cost per
//! tool and agent, each budget's burn, and the approvals waiting; per tool
//! over time in `trends.rs`. Charts are SVG drawn here; nothing is loaded
//! from outside. The page's cost is bounded whatever the ledger's size.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use chrono::{Datelike, TimeZone, Utc};
use joch_core::{Budget, Time};
use joch_engine::{
    Action, CallBucket, CallWindow, Collection, CostGroup, CostTotal, ListParams, may,
};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{Section, page};
use super::trends::{Stats, calls_in, weight};
use super::viewer::Viewer;
use crate::extract::Query;
use crate::{ApiError, AppState};

/// Buckets per window, whatever its length.
const BUCKETS: usize = 12;
/// At most this many calls read per bucket (its newest).
const SAMPLE: usize = 400;
/// Calls counted per bucket, at most (past it, estimated from the sample).
const COUNT_CAP: u64 = 50_000;

/// The windows the page offers (`?window=`), each ending now.
#[derive(Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub(crate) enum Span {
    #[default]
    #[serde(rename = "1h")]
    Hour,
    #[serde(rename = "6h")]
    SixHours,
    #[serde(rename = "24h")]
    Day,
}

impl Span {
    const ALL: [Span; 3] = [Span::Hour, Span::SixHours, Span::Day];

    fn as_str(self) -> &'static str {
        match self {
            Span::Hour => "1h",
            Span::SixHours => "6h",
            Span::Day => "24h",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Span::Hour => "the last hour",
            Span::SixHours => "the last 6 hours",
            Span::Day => "the last 24 hours",
        }
    }

    fn bucket(self) -> Duration {
        let hours = match self {
            Span::Hour => 1,
            Span::SixHours => 6,
            Span::Day => 24,
        };
        Duration::from_secs(hours * 3600 / BUCKETS as u64)
    }
}

/// The page's query: the namespace (read by the viewer guard) and window.
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Choice {
    #[allow(dead_code)]
    ns: String,
    window: Span,
}

fn per_tool(buckets: &[CallBucket]) -> BTreeMap<String, Stats> {
    let mut tools: BTreeMap<String, Stats> = BTreeMap::new();
    for b in buckets {
        for c in &b.sample {
            tools
                .entry(c.tool_name().to_owned())
                .or_default()
                .add(c, weight(b));
        }
    }
    tools
}

/// The overview page.
pub(crate) async fn show(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Query(choice): Query<Choice>,
) -> Result<Response, ApiError> {
    let (engine, ns) = (&state.engine, viewer.namespace.as_str());
    let span = choice.window;
    let window = CallWindow {
        until: Time(Utc::now()),
        bucket: span.bucket(),
        buckets: BUCKETS,
        sample: SAMPLE,
        count_cap: COUNT_CAP,
    };
    let buckets = engine.calls().over(&viewer.principal, ns, window).await?;
    let waiting = engine.approvals().inbox(&viewer.principal, ns).await?.len();
    let spending = spending(&state, &viewer).await?;
    let body = html! {
        h1 { "Overview" }
        (spans(ns, span))
        (summary(ns, span, &buckets, waiting))
        h2 { "Calls over time" }
        (over_time(span, &buckets))
        h2 { "Per tool" }
        (tool_table(per_tool(&buckets)))
        h2 { "Per tool over time" }
        (super::trends::section(&buckets))
        (spending)
    };
    Ok(page(Some(&viewer), Section::Overview, "Overview", body))
}

/// Today's cost per tool and agent and each budget's burn, when the
/// engine's read rule lets the viewer read costs and budgets.
async fn spending(state: &AppState, viewer: &Viewer) -> Result<Markup, ApiError> {
    let (engine, ns) = (&state.engine, viewer.namespace.as_str());
    let by = &viewer.principal;
    let reads = |c| may(by, &Action::Read(c)).is_ok();
    if !reads(Collection::Costs) || !reads(Collection::Budgets) {
        return Ok(html! {
            h2 { "Cost and budgets" }
            p.note { "A principal with role " (by.role.as_str()) " does not read costs or budgets." }
        });
    }
    let now = Utc::now();
    let today = Utc.from_utc_datetime(&now.date_naive().and_hms_opt(0, 0, 0).unwrap_or_default());
    let month = Utc
        .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(today);
    let by_tool = engine
        .calls()
        .costs(by, ns, CostGroup::Tool, Some(Time(today)))
        .await?;
    let by_agent = engine
        .calls()
        .costs(by, ns, CostGroup::Agent, Some(Time(today)))
        .await?;
    let this_month = engine
        .calls()
        .costs(by, ns, CostGroup::Tool, Some(Time(month)))
        .await?;
    let month_by_agent = engine
        .calls()
        .costs(by, ns, CostGroup::Agent, Some(Time(month)))
        .await?;
    let budgets = engine
        .resources()
        .read_all::<Budget>(by, ns, ListParams::default())
        .await?
        .items;
    Ok(html! {
        h2 { "Cost today" }
        div.actions {
            div { h3 { "Per tool" } (cost_table("Tool", &by_tool)) }
            div { h3 { "Per agent" } (cost_table("Agent", &by_agent)) }
        }
        h2 { "Budgets" }
        (budget_table(&budgets, [(&by_tool, &by_agent), (&this_month, &month_by_agent)]))
    })
}

/// Links to the other windows; the shown one marked current.
fn spans(ns: &str, shown: Span) -> Markup {
    html! {
        nav.spans aria-label="Window" {
            ul {
                @for s in Span::ALL {
                    li { a href={ "/ui/overview?ns=" (ns) "&window=" (s.as_str()) } aria-current=[(s == shown).then_some("true")] { (s.as_str()) } }
                }
            }
        }
    }
}

fn summary(ns: &str, span: Span, buckets: &[CallBucket], waiting: usize) -> Markup {
    let calls: f64 = buckets.iter().map(calls_in).sum();
    let estimated = buckets.iter().any(|b| !b.counted_all);
    let read: usize = buckets.iter().map(|b| b.sample.len()).sum();
    let seconds = (span.bucket().as_secs() as usize * buckets.len()).max(1);
    let rate = calls / seconds as f64;
    let minutes = span.bucket().as_secs() / 60;
    html! {
        dl.facts.card {
            dt { "Window" } dd { (span.title()) ", in " (buckets.len()) " buckets of " (minutes) " min" }
            dt { "Calls" } dd { @if estimated { "about " } (format!("{calls:.0}")) }
            dt { "Calls per second" } dd { (format!("{rate:.2}")) }
            @if (read as f64) < calls {
                dt { "Estimated from" } dd { (read) " calls read (the newest " (SAMPLE) " of each bucket)" }
            }
            dt { "Approvals waiting" } dd { a href={ "/ui/inbox?ns=" (ns) } { (waiting) } }
        }
    }
}

/// A column chart of calls per bucket, oldest left.
fn over_time(span: Span, buckets: &[CallBucket]) -> Markup {
    if buckets.iter().all(|b| b.count == 0) {
        return html! { p.note { "No call in this window." } };
    }
    let counts: Vec<f64> = buckets.iter().map(calls_in).collect();
    let top = counts.iter().copied().fold(1.0, f64::max);
    let step = 300.0 / buckets.len().max(1) as f64;
    let label = format!(
        "Calls per {} min, {} buckets, at most {top:.0} in one",
        span.bucket().as_secs() / 60,
        buckets.len()
    );
    html! {
        svg viewBox="0 0 300 80" width="100%" height="120" role="img" aria-label=(label) preserveAspectRatio="none" {
            @for (i, n) in counts.iter().enumerate() {
                @let h = 76.0 * n / top;
                rect x=(format!("{:.1}", i as f64 * step + 1.0)) y=(format!("{:.1}", 78.0 - h)) width=(format!("{:.1}", step - 2.0)) height=(format!("{h:.1}")) fill="#0b57d0" { title { (format!("{n:.0}")) " calls" } }
            }
            line x1="0" y1="78.5" x2="300" y2="78.5" stroke="#6e7781" {}
        }
    }
}

fn pct(part: f64, whole: f64) -> String {
    if whole <= 0.0 {
        "—".to_owned()
    } else {
        format!("{:.1} %", 100.0 * part / whole)
    }
}

fn tool_table(tools: BTreeMap<String, Stats>) -> Markup {
    if tools.is_empty() {
        return html! { p.note { "No call in this window." } };
    }
    let top = tools.values().map(|s| s.calls).fold(1.0, f64::max);
    html! {
        table {
            thead { tr { th { "Tool" } th { "Calls" } th { "Failed" } th { "Denied" } th { "p50" } th { "p99" } th { "Share" } } }
            tbody {
                @for (name, s) in tools {
                    @let (p50, p99) = (s.percentile(0.5), s.percentile(0.99));
                    tr {
                        td data-label="Tool" { (name) }
                        td data-label="Calls" { (format!("{:.0}", s.calls)) }
                        td data-label="Failed" { (pct(s.failed, s.calls)) }
                        td data-label="Denied" { (pct(s.denied, s.calls)) }
                        td data-label="p50" { @if let Some(v) = p50 { (v) " ms" } @else { "—" } }
                        td data-label="p99" { @if let Some(v) = p99 { (v) " ms" } @else { "—" } }
                        td data-label="Share" { (bars(&s, top)) }
                    }
                }
            }
        }
    }
}

/// One stacked bar: ran, failed, denied.
fn bars(s: &Stats, top: f64) -> Markup {
    let w = |n: f64| format!("{:.1}", 120.0 * n / top);
    let ok = s.calls - s.failed - s.denied;
    let label = format!(
        "{ok:.0} ran, {:.0} failed, {:.0} denied",
        s.failed, s.denied
    );
    html! {
        svg viewBox="0 0 120 12" width="120" height="12" role="img" aria-label=(label) {
            rect x="0" y="0" width=(w(ok)) height="12" fill="#0f6d31" {}
            rect x=(w(ok)) y="0" width=(w(s.failed)) height="12" fill="#b42318" {}
            rect x=(w(ok + s.failed)) y="0" width=(w(s.denied)) height="12" fill="#8a4b00" {}
        }
    }
}

fn money(micros: i64) -> String {
    format!("{:.4}", micros as f64 / 1e6)
}

fn cost_table(what: &str, totals: &[CostTotal]) -> Markup {
    html! {
        @if totals.is_empty() { p.note { "No cost recorded today." } }
        @else {
            table {
                thead { tr { th { (what) } th { "Calls" } th { "Cost" } } }
                tbody {
                    @for t in totals {
                        tr {
                            td data-label=(what) { @if t.key.is_empty() { "(none)" } @else { (t.key) } }
                            td data-label="Calls" { (t.calls) }
                            td data-label="Cost" { (money(t.micros)) " " (t.currency) }
                        }
                    }
                }
            }
        }
    }
}

/// What a budget's scope spent, from totals by tool and by agent.
fn spent(budget: &Budget, by_tool: &[CostTotal], by_agent: &[CostTotal]) -> i64 {
    let scope = &budget.spec.scope;
    let currency = |t: &&CostTotal| t.currency == budget.spec.currency;
    match (&scope.tool, &scope.agent) {
        (Some(tool), _) => by_tool
            .iter()
            .filter(currency)
            .filter(|t| &t.key == tool)
            .map(|t| t.micros)
            .sum(),
        (None, Some(agent)) => by_agent
            .iter()
            .filter(currency)
            .filter(|t| &t.key == agent)
            .map(|t| t.micros)
            .sum(),
        (None, None) => by_tool.iter().filter(currency).map(|t| t.micros).sum(),
    }
}

type Totals<'a> = (&'a [CostTotal], &'a [CostTotal]);

fn budget_table(budgets: &[Budget], [day, month]: [Totals<'_>; 2]) -> Markup {
    html! {
        @if budgets.is_empty() { p.note { "No budget in this namespace." } }
        @else {
            table {
                thead { tr { th { "Budget" } th { "Limit" } th { "Spent" } th { "Burn" } } }
                tbody {
                    @for b in budgets {
                        @let limits = &b.spec.limits;
                        @let (period, limit, totals) = match (limits.daily_usd, limits.monthly_usd) {
                            (Some(l), _) => ("today", Some(l), day),
                            (None, Some(l)) => ("this month", Some(l), month),
                            _ => ("per run", limits.per_run_usd, day),
                        };
                        @let used = spent(b, totals.0, totals.1) as f64 / 1e6;
                        tr {
                            td data-label="Budget" { (b.metadata.name) }
                            td data-label="Limit" { @if let Some(l) = limit { (l) " " (b.spec.currency) " " (period) } }
                            td data-label="Spent" { (format!("{used:.4}")) }
                            td data-label="Burn" {
                                @if let Some(l) = limit.filter(|_| period != "per run") {
                                    meter min="0" max=(l) high=(l * b.spec.enforcement.soft_limit_pct / 100.0) value=(used)
                                        aria-label={ (b.metadata.name) " burn" } { (format!("{used:.4}")) }
                                } @else { "per execution" }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_counts_its_scope_in_its_currency() {
        let total = |key: &str, currency: &str, micros| CostTotal {
            key: key.to_owned(),
            currency: currency.to_owned(),
            micros,
            calls: 1,
        };
        let tools = [
            total("a", "USD", 10),
            total("b", "USD", 20),
            total("a", "EUR", 99),
        ];
        let agents = [total("bot", "USD", 30)];
        let budget = |scope: serde_json::Value| -> Budget {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "b"}, "spec": {"scope": scope, "limits": {"dailyUsd": 1.0}}
            }))
            .unwrap()
        };
        assert_eq!(
            spent(&budget(serde_json::json!({"tool": "a"})), &tools, &agents),
            10
        );
        assert_eq!(
            spent(
                &budget(serde_json::json!({"agent": "bot"})),
                &tools,
                &agents
            ),
            30
        );
        assert_eq!(spent(&budget(serde_json::json!({})), &tools, &agents), 30);
    }
}
