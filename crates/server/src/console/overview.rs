//! `/ui/overview`: the namespace at a glance over its most recent calls
//! (up to [`WINDOW`]): calls per second, calls over time, per tool the
//! failure and denial rates and p50/p99 latency, today's cost per tool and
//! agent, each budget's burn, and the approvals waiting; per tool over
//! time in `trends.rs`. Charts are SVG drawn here; nothing is loaded from
//! outside. The window bounds the page's cost whatever the ledger's size.

use std::collections::BTreeMap;

use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use chrono::{Datelike, TimeZone, Utc};
use joch_core::{Budget, Phase, Time, ToolCall};
use joch_engine::{CostGroup, CostTotal, ListParams, may_read};
use maud::{Markup, html};

use super::layout::{Section, page};
use super::viewer::Viewer;
use crate::{ApiError, AppState};

/// The most recent calls the overview reads.
const WINDOW: usize = 5_000;
/// Columns of the calls-over-time chart.
const BUCKETS: usize = 30;

#[derive(Default)]
struct ToolStats {
    calls: usize,
    failed: usize,
    denied: usize,
    latencies: Vec<u64>,
}

impl ToolStats {
    fn percentile(&mut self, p: f64) -> Option<u64> {
        if self.latencies.is_empty() {
            return None;
        }
        self.latencies.sort_unstable();
        let rank =
            ((p * self.latencies.len() as f64).ceil() as usize).clamp(1, self.latencies.len());
        Some(self.latencies[rank - 1])
    }
}

fn per_tool(calls: &[ToolCall]) -> BTreeMap<String, ToolStats> {
    let mut tools: BTreeMap<String, ToolStats> = BTreeMap::new();
    for c in calls {
        let s = tools.entry(c.tool_name().to_owned()).or_default();
        s.calls += 1;
        match c.status.phase {
            Phase::Failed | Phase::Unknown => s.failed += 1,
            Phase::Denied => s.denied += 1,
            _ => {}
        }
        s.latencies.extend(c.status.latency_ms);
    }
    tools
}

/// The overview page.
pub(crate) async fn show(
    State(state): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Response, ApiError> {
    let (engine, ns) = (&state.engine, viewer.namespace.as_str());
    let params = ListParams {
        limit: Some(WINDOW),
        ..ListParams::default()
    };
    let calls = engine.calls().list(ns, params).await?.items;
    let waiting = engine.approvals().inbox(&viewer.principal, ns).await?.len();
    let times: Vec<i64> = calls
        .iter()
        .filter_map(|c| {
            c.metadata
                .creation_timestamp
                .map(|t| t.0.timestamp_millis())
        })
        .collect();
    let spending = spending(&state, &viewer).await?;
    let body = html! {
        h1 { "Overview" }
        (summary(ns, &times, waiting))
        h2 { "Calls over time" }
        (over_time(&times))
        h2 { "Per tool" }
        (tool_table(per_tool(&calls)))
        h2 { "Per tool over time" }
        (super::trends::section(&calls))
        (spending)
    };
    Ok(page(Some(&viewer), Section::Overview, "Overview", body))
}

/// Today's cost per tool and agent and each budget's burn, when the
/// engine's read rule lets the viewer read costs and budgets.
async fn spending(state: &AppState, viewer: &Viewer) -> Result<Markup, ApiError> {
    let (engine, ns) = (&state.engine, viewer.namespace.as_str());
    let by = &viewer.principal;
    if may_read(by, "costs").is_err() || may_read(by, "budgets").is_err() {
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
        .costs(ns, CostGroup::Tool, Some(Time(today)))
        .await?;
    let by_agent = engine
        .calls()
        .costs(ns, CostGroup::Agent, Some(Time(today)))
        .await?;
    let this_month = engine
        .calls()
        .costs(ns, CostGroup::Tool, Some(Time(month)))
        .await?;
    let month_by_agent = engine
        .calls()
        .costs(ns, CostGroup::Agent, Some(Time(month)))
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

fn summary(ns: &str, times: &[i64], waiting: usize) -> Markup {
    let span = match (times.iter().min(), times.iter().max()) {
        (Some(a), Some(b)) if b > a => (b - a) as f64 / 1000.0,
        _ => 0.0,
    };
    let rate = if span > 0.0 {
        times.len() as f64 / span
    } else {
        0.0
    };
    html! {
        dl.facts.card {
            dt { "Calls read" } dd { (times.len()) " (the most recent, at most " (WINDOW) ")" }
            dt { "Calls per second" } dd { (format!("{rate:.2}")) " over " (format!("{span:.0}")) " s" }
            dt { "Approvals waiting" } dd { a href={ "/ui/inbox?ns=" (ns) } { (waiting) } }
        }
    }
}

/// A column chart of calls per time bucket, oldest left.
fn over_time(times: &[i64]) -> Markup {
    let (Some(&first), Some(&last)) = (times.iter().min(), times.iter().max()) else {
        return html! { p.note { "No call yet." } };
    };
    let width = ((last - first) / BUCKETS as i64).max(1);
    let mut counts = [0usize; BUCKETS];
    for t in times {
        counts[(((t - first) / width) as usize).min(BUCKETS - 1)] += 1;
    }
    let top = counts.iter().copied().max().unwrap_or(1).max(1);
    let label = format!(
        "Calls per {} s, {} buckets, at most {top} in one",
        width / 1000,
        BUCKETS
    );
    html! {
        svg viewBox="0 0 300 80" width="100%" height="120" role="img" aria-label=(label) preserveAspectRatio="none" {
            @for (i, n) in counts.iter().enumerate() {
                @let h = 76.0 * *n as f64 / top as f64;
                rect x=(i * 10 + 1) y=(format!("{:.1}", 78.0 - h)) width="8" height=(format!("{h:.1}")) fill="#0b57d0" { title { (n) " calls" } }
            }
            line x1="0" y1="78.5" x2="300" y2="78.5" stroke="#6e7781" {}
        }
    }
}

fn pct(part: usize, whole: usize) -> String {
    if whole == 0 {
        "—".to_owned()
    } else {
        format!("{:.1} %", 100.0 * part as f64 / whole as f64)
    }
}

fn tool_table(tools: BTreeMap<String, ToolStats>) -> Markup {
    let top = tools.values().map(|s| s.calls).max().unwrap_or(1).max(1);
    html! {
        table {
            thead { tr { th { "Tool" } th { "Calls" } th { "Failed" } th { "Denied" } th { "p50" } th { "p99" } th { "Share" } } }
            tbody {
                @for (name, mut s) in tools {
                    @let (p50, p99) = (s.percentile(0.5), s.percentile(0.99));
                    tr {
                        td data-label="Tool" { (name) }
                        td data-label="Calls" { (s.calls) }
                        td data-label="Failed" { (pct(s.failed, s.calls)) }
                        td data-label="Denied" { (pct(s.denied, s.calls)) }
                        td data-label="p50" { @if let Some(v) = p50 { (v) " ms" } @else { "—" } }
                        td data-label="p99" { @if let Some(v) = p99 { (v) " ms" } @else { "—" } }
                        td data-label="Share" { (bars(s.calls, s.failed, s.denied, top)) }
                    }
                }
            }
        }
    }
}

/// One stacked bar: ran, failed, denied.
fn bars(calls: usize, failed: usize, denied: usize, top: usize) -> Markup {
    let w = |n: usize| format!("{:.1}", 120.0 * n as f64 / top as f64);
    let ok = calls - failed - denied;
    let label = format!("{ok} ran, {failed} failed, {denied} denied");
    html! {
        svg viewBox="0 0 120 12" width="120" height="12" role="img" aria-label=(label) {
            rect x="0" y="0" width=(w(ok)) height="12" fill="#0f6d31" {}
            rect x=(w(ok)) y="0" width=(w(failed)) height="12" fill="#b42318" {}
            rect x=(w(ok + failed)) y="0" width=(w(denied)) height="12" fill="#8a4b00" {}
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
    fn percentiles_are_nearest_rank() {
        let mut s = ToolStats {
            latencies: (1..=100).rev().collect(),
            ..ToolStats::default()
        };
        assert_eq!(
            (s.percentile(0.5), s.percentile(0.99), s.percentile(1.0)),
            (Some(50), Some(99), Some(100))
        );
        assert_eq!(ToolStats::default().percentile(0.5), None);
    }

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
