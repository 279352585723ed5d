//! Spend: cost reports, budgets on the call path, and the spend policies see.

use chrono::{Datelike, TimeZone, Utc};

use joch_core::cost::{Standing, Window, from_micros, standing};
use joch_core::{Budget, DecisionKind, Hook, HookDecision, Principal, Time, Tool, ToolCall};
use joch_store::{CostGroup, CostQuery, CostTotal};
use serde_json::{Value, json};

use crate::Calls;
use crate::EngineError;
use crate::rules::{Action, Collection, may_in};

/// What the namespace's budgets say about a call about to run.
#[derive(Debug, Default)]
pub(in crate::calls) struct BudgetCheck {
    /// The decision to record and the reason, when a hard limit denies it.
    pub(in crate::calls) denial: Option<(HookDecision, String)>,
    /// `warning` event data for soft limits crossed (and hard ones that only alert).
    pub(in crate::calls) warnings: Vec<Value>,
}

impl Calls {
    /// Checks the call against every Budget of its namespace whose scope
    /// it falls in: its tool's per-call price is what it would add.
    pub(in crate::calls) async fn budget_check(
        &self,
        call: &ToolCall,
        tool: &Tool,
    ) -> Result<BudgetCheck, EngineError> {
        let namespace = &call.metadata.namespace;
        let budgets = self.inner.catalog.budgets(namespace).await?;
        let mut check = BudgetCheck::default();
        let agent = call.spec.agent_ref.as_ref().map(|a| a.name.as_str());
        for budget in budgets.iter() {
            let scope = &budget.spec.scope;
            let in_scope = scope.agent.as_deref().is_none_or(|a| Some(a) == agent)
                && scope.tool.as_deref().is_none_or(|t| t == call.tool_name());
            if !in_scope {
                continue;
            }
            let next = tool
                .spec
                .cost
                .as_ref()
                .filter(|c| c.currency == budget.spec.currency)
                .map_or(0.0, |c| c.per_call);
            for (window, limit) in budget.spec.limits.set() {
                let Some(spent) = self.spent(call, budget, window).await? else {
                    continue;
                };
                let enforcement = &budget.spec.enforcement;
                let at = standing(spent, next, limit, enforcement.soft_limit_pct);
                let message = format!(
                    "budget {} {}: {spent:.6} {} spent, this call adds {next:.6}, limit {limit}",
                    budget.metadata.name,
                    window.field(),
                    budget.spec.currency
                );
                match at {
                    Standing::Over if enforcement.on_hard_limit == "deny" => {
                        if check.denial.is_none() {
                            let decision = HookDecision {
                                hook: Hook::Request.step().to_owned(),
                                decision: DecisionKind::Deny,
                                policy_id: Some(format!("budget/{}", budget.metadata.name)),
                                policy_version: Some(budget.metadata.resource_version.clone()),
                                reason: Some(message.clone()),
                                shadow: false,
                            };
                            check.denial = Some((decision, message));
                        }
                    }
                    Standing::Over | Standing::Soft => check.warnings.push(json!({
                        "code": if at == Standing::Over { "budget_exceeded" } else { "budget_soft_limit" },
                        "message": message,
                        "budget": budget.metadata.name,
                        "limit": window.field(),
                        "spent": spent,
                    })),
                    Standing::Fine => {}
                }
            }
        }
        Ok(check)
    }

    /// Spend in the budget's scope and currency over the window; `None`
    /// for the per-run window of a call outside any execution.
    async fn spent(
        &self,
        call: &ToolCall,
        budget: &Budget,
        window: Window,
    ) -> Result<Option<f64>, EngineError> {
        let mut query = CostQuery {
            namespace: call.metadata.namespace.clone(),
            tool: budget.spec.scope.tool.clone(),
            agent: budget.spec.scope.agent.clone(),
            currency: Some(budget.spec.currency.clone()),
            ..CostQuery::default()
        };
        match window {
            Window::Run => match &call.spec.execution_ref {
                Some(execution) => query.execution = Some(execution.name.clone()),
                None => return Ok(None),
            },
            Window::Day => query.since_ms = Some(start_of(Window::Day)),
            Window::Month => query.since_ms = Some(start_of(Window::Month)),
        }
        let totals = self.inner.store.cost_totals(query).await?;
        Ok(Some(from_micros(totals.iter().map(|t| t.micros).sum())))
    }

    /// `cost` for policies: USD spent in the call's run, today and this
    /// month in its namespace, and the call's own per-call price.
    pub(in crate::calls) async fn spend_facts(
        &self,
        call: &ToolCall,
        tool: &Tool,
    ) -> Result<Value, EngineError> {
        let base = CostQuery {
            namespace: call.metadata.namespace.clone(),
            currency: Some(joch_core::cost::DEFAULT_CURRENCY.to_owned()),
            ..CostQuery::default()
        };
        let sum = |query: CostQuery| async move {
            let totals = self.inner.store.cost_totals(query).await?;
            Ok::<f64, EngineError>(from_micros(totals.iter().map(|t| t.micros).sum()))
        };
        let run = match &call.spec.execution_ref {
            Some(execution) => {
                sum(CostQuery {
                    execution: Some(execution.name.clone()),
                    ..base.clone()
                })
                .await?
            }
            None => 0.0,
        };
        let daily = sum(CostQuery {
            since_ms: Some(start_of(Window::Day)),
            ..base.clone()
        })
        .await?;
        let monthly = sum(CostQuery {
            since_ms: Some(start_of(Window::Month)),
            ..base
        })
        .await?;
        let call_usd = tool
            .spec
            .cost
            .as_ref()
            .filter(|c| c.currency == joch_core::cost::DEFAULT_CURRENCY)
            .map_or(0.0, |c| c.per_call);
        Ok(json!({"runUsd": run, "dailyUsd": daily, "monthlyUsd": monthly, "callUsd": call_usd}))
    }
}

impl Calls {
    /// Cost totals of `namespace` (every namespace when empty: the
    /// operator's alone) since `since`, if `by` may read costs. The totals
    /// of a principal with a tool selector count the tools it sees only.
    pub async fn costs(
        &self,
        by: &Principal,
        namespace: &str,
        group_by: CostGroup,
        since: Option<Time>,
    ) -> Result<Vec<CostTotal>, EngineError> {
        may_in(by, namespace, &Action::Read(Collection::Costs))?;
        if !namespace.is_empty() {
            crate::resources::valid_namespace(namespace)?;
        }
        if by.tools.is_some() {
            return self.seen_costs(by, namespace, group_by, since).await;
        }
        let query = CostQuery {
            namespace: namespace.to_owned(),
            since_ms: since.map(|t| t.0.timestamp_millis()),
            group_by,
            ..CostQuery::default()
        };
        Ok(self.inner.store.cost_totals(query).await?)
    }
    /// [`costs`](Self::costs) counting only the tools `by` sees: the
    /// totals of each such tool, grouped as asked and summed.
    async fn seen_costs(
        &self,
        by: &Principal,
        namespace: &str,
        group_by: CostGroup,
        since: Option<Time>,
    ) -> Result<Vec<CostTotal>, EngineError> {
        let query = |group_by, tool: Option<String>| CostQuery {
            namespace: namespace.to_owned(),
            since_ms: since.map(|t| t.0.timestamp_millis()),
            group_by,
            tool,
            ..CostQuery::default()
        };
        let store = &self.inner.store;
        let mut tools: Vec<String> = Vec::new();
        for total in store.cost_totals(query(CostGroup::Tool, None)).await? {
            if !tools.contains(&total.key)
                && self
                    .inner
                    .visibility
                    .sees_tool(by, namespace, &total.key)
                    .await?
            {
                tools.push(total.key);
            }
        }
        let mut sums: Vec<CostTotal> = Vec::new();
        for tool in tools {
            for total in store.cost_totals(query(group_by, Some(tool))).await? {
                match sums
                    .iter_mut()
                    .find(|s| s.key == total.key && s.currency == total.currency)
                {
                    Some(sum) => {
                        sum.micros += total.micros;
                        sum.calls += total.calls;
                    }
                    None => sums.push(total),
                }
            }
        }
        Ok(sums)
    }
}

/// The start of the current UTC day or month, in unix milliseconds.
fn start_of(window: Window) -> i64 {
    let now = crate::clock::now().0;
    let day = if window == Window::Month {
        1
    } else {
        now.day()
    };
    Utc.with_ymd_and_hms(now.year(), now.month(), day, 0, 0, 0)
        .single()
        .map_or(0, |t| t.timestamp_millis())
}
