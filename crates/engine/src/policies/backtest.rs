//! Back-testing a candidate policy on the ledger: what would the policies
//! in force, with the candidate added or replacing one, have decided on
//! every call of a window, from the facts each record keeps (tool, input as
//! recorded, agent, labels, caller, `toolCallCount` as it was, spend)?
//! Calls are judged in ledger order (creation time, then id), so that the
//! counters a policy reads are those of the time. Request hook only: the
//! result hook would need outputs the record may not keep.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use joch_core::backtest::{Judged, PolicyTest, PolicyTestReport, Unjudged, Verdict, window};
use joch_core::policy::Enforcement;
use joch_core::redact::REDACTED;
use joch_core::{Hook, Object, Policy, Principal, Tool, ToolCall, ValidationError};
use joch_store::{ListQuery, StoreError};
use serde_json::{Value, json};

use crate::EngineError;
use crate::policies::{self, Facts, Policies, PolicyEngine, REPLAY_OVERRIDE_ANNOTATION};
use crate::rules;

/// Calls read from the store per page.
const PAGE: usize = 1000;

/// What a back-test reports while it runs: calls read so far.
pub type Progress<'a> = &'a mut (dyn FnMut(u64) + Send);

impl Policies {
    /// The policies in force, with the candidate (as enforced) added or
    /// replacing `test.replace` or its namesake, in name order.
    async fn candidate_set(
        &self,
        namespace: &str,
        test: PolicyTest,
    ) -> Result<Vec<Policy>, EngineError> {
        let mut candidate = test.policy;
        candidate.metadata.namespace = namespace.to_owned();
        candidate.validate()?;
        policies::check(&candidate)?;
        candidate.spec.enforcement = Enforcement::Enforce;
        let in_force = self.catalog.policies(namespace).await?;
        let replaced = test
            .replace
            .unwrap_or_else(|| candidate.metadata.name.clone());
        if !in_force.iter().any(|p| p.metadata.name == replaced)
            && replaced != candidate.metadata.name
        {
            return Err(EngineError::NotFound {
                kind: crate::NotFoundKind::Policy,
                name: replaced,
            });
        }
        let mut set: Vec<Policy> = in_force
            .iter()
            .filter(|p| p.metadata.name != replaced && p.metadata.name != candidate.metadata.name)
            .cloned()
            .collect();
        set.push(candidate);
        set.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(set)
    }

    /// The namespace's calls created at or after `start`, in ledger order,
    /// without their outputs (a back-test reads only what decided them).
    async fn calls_since(
        &self,
        namespace: &str,
        start: chrono::DateTime<chrono::Utc>,
        progress: Progress<'_>,
    ) -> Result<Vec<ToolCall>, EngineError> {
        let mut calls = Vec::new();
        let mut query = ListQuery {
            namespace: namespace.to_owned(),
            limit: PAGE,
            ..ListQuery::default()
        };
        let mut read = 0;
        loop {
            let page = self.store.list_objects::<ToolCall>(query.clone()).await?;
            read += page.items.len() as u64;
            calls.extend(page.items.into_iter().filter_map(|mut call| {
                let created = call.metadata.creation_timestamp?;
                call.status.output = None;
                (created.0 >= start).then_some(call)
            }));
            progress(read);
            match page.continue_token {
                Some(token) => query.continue_from = Some(token),
                None => break,
            }
        }
        calls.sort_by(|a, b| {
            (a.metadata.creation_timestamp, &a.metadata.name)
                .cmp(&(b.metadata.creation_timestamp, &b.metadata.name))
        });
        Ok(calls)
    }

    /// Each tool the calls name, as it is now, or as the record describes
    /// it when it no longer exists.
    async fn tools_of(
        &self,
        namespace: &str,
        calls: &[ToolCall],
    ) -> Result<HashMap<String, Arc<Tool>>, EngineError> {
        let mut tools = HashMap::new();
        for call in calls {
            let name = call.tool_name();
            if tools.contains_key(name) {
                continue;
            }
            let tool = match self.store.get_object::<Tool>(namespace, name).await {
                Ok(tool) => tool,
                Err(StoreError::NotFound { .. }) => {
                    let mut tool = Tool::unregistered(namespace, name);
                    if let Some(effects) = &call.spec.side_effects {
                        tool.spec.side_effects.level = effects.level;
                        tool.spec.side_effects.idempotent = effects.idempotent;
                    }
                    tool
                }
                Err(e) => return Err(e.into()),
            };
            tools.insert(name.to_owned(), Arc::new(tool));
        }
        Ok(tools)
    }

    /// Back-tests `test.policy` on the namespace's calls of the window
    /// (default 7 days). Reads only; changes nothing. `progress` hears the
    /// number of calls read after each page.
    pub async fn test(
        &self,
        by: &Principal,
        namespace: &str,
        test: PolicyTest,
        progress: Progress<'_>,
    ) -> Result<PolicyTestReport, EngineError> {
        rules::may_in(by, namespace, &rules::Action::BackTest)?;
        let since = window(test.since.as_deref().unwrap_or("7d"))
            .map_err(|e| ValidationError::field("since", e))?;
        let start = crate::clock::now()
            .checked_sub(since)
            .ok_or_else(|| ValidationError::field("since", "reaches before the year 0"))?
            .0;
        let set = self.candidate_set(namespace, test).await?;
        let calls = self.calls_since(namespace, start, progress).await?;
        let tools = self.tools_of(namespace, &calls).await?;
        // CPU-bound for seconds on a large window: off the async workers,
        // and stopped when this future is dropped (its client went).
        let engine = Arc::clone(&self.engine);
        let abandoned = Abandoned::default();
        let stop = abandoned.0.clone();
        tokio::task::spawn_blocking(move || judge_all(&*engine, &set, &calls, &tools, &stop))
            .await
            .map_err(EngineError::task("the back-test"))
    }
}

/// Set when the back-test's future is dropped: its client went, so the
/// threads judging for it stop.
#[derive(Default)]
struct Abandoned(Arc<AtomicBool>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Judges every call: the counters policies read are kept in ledger
/// order, then the calls are decided on every core, then counted in order.
/// Once `stop` is set, no more calls are judged.
pub(crate) fn judge_all(
    engine: &dyn PolicyEngine,
    set: &[Policy],
    calls: &[ToolCall],
    tools: &HashMap<String, Arc<Tool>>,
    stop: &AtomicBool,
) -> PolicyTestReport {
    let texts: Vec<String> = set
        .iter()
        .map(|p| serde_json::to_string(&p.spec).unwrap_or_default())
        .collect();
    let reads_spend = texts.iter().any(|t| t.contains("cost."));
    let mut counters = Counters::default();
    let at_the_time: Vec<(usize, Option<Value>)> = calls
        .iter()
        .map(|call| (counters.count(call), counters.spend(call, reads_spend)))
        .collect();
    let judge = |(call, (count, spend)): (&ToolCall, &(usize, Option<Value>))| match (
        &call.spec.input,
        tools.get(call.tool_name()),
    ) {
        (Value::Object(args), Some(tool)) => match redacted_read(&call.spec.input, &texts) {
            true => Err(Unjudged::RedactedField),
            false => Ok(decide(engine, set, call, tool, args, *count, spend.clone())),
        },
        _ => Err(Unjudged::InputWithheld),
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = calls.len().div_ceil(cores).max(1);
    let verdicts: Vec<Result<Verdict, Unjudged>> = std::thread::scope(|scope| {
        let workers: Vec<_> = calls
            .chunks(chunk)
            .zip(at_the_time.chunks(chunk))
            .map(|(calls, facts)| {
                scope.spawn(move || {
                    (calls.iter().zip(facts))
                        .take_while(|_| !stop.load(Ordering::Relaxed))
                        .map(judge)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut report = PolicyTestReport::default();
    for (call, would) in calls.iter().zip(verdicts) {
        report.add(Judged {
            call: &call.metadata.name,
            tool: call.tool_name(),
            agent: call.spec.agent_ref.as_ref().map(|a| a.name.as_str()),
            happened: happened(call),
            would,
        });
    }
    report
}

fn decide(
    engine: &dyn PolicyEngine,
    set: &[Policy],
    call: &ToolCall,
    tool: &Tool,
    args: &serde_json::Map<String, Value>,
    count: usize,
    spend: Option<Value>,
) -> Verdict {
    let overridden = call
        .metadata
        .annotations
        .get(REPLAY_OVERRIDE_ANNOTATION)
        .is_some_and(|v| v == "true");
    let mut facts = Facts::request(call, tool, args, count, overridden);
    if let Some(spend) = spend {
        facts.value["cost"] = spend;
    }
    policies::decide(engine, set, Hook::Request, &facts)
        .winner()
        .and_then(|w| Verdict::of(w.verdict.effect.kind().as_str()))
        .unwrap_or(Verdict::Allow)
}

/// What the policies in force decided when the call was made: the
/// strongest enforced request-hook decision of a Policy on the record.
/// Rate limits, budgets and quarantines (`ratelimit/…`, `budget/…`) are
/// not policies and are not compared.
fn happened(call: &ToolCall) -> Verdict {
    call.status
        .hook_decisions
        .iter()
        .filter(|d| d.hook == Hook::Request.step() && !d.shadow)
        .filter(|d| d.policy_id.as_deref().is_none_or(|p| !p.contains('/')))
        .filter_map(|d| Verdict::of(d.decision.as_str()))
        .max_by_key(|v| v.rank())
        .unwrap_or(Verdict::Allow)
}

/// True when a policy of the set names an input field the record keeps
/// only as `[REDACTED]`: its decision on the call cannot be known.
fn redacted_read(input: &Value, texts: &[String]) -> bool {
    let mut paths = Vec::new();
    redacted_paths(input, "input", &mut paths);
    paths
        .iter()
        .any(|path| texts.iter().any(|text| text.contains(path.as_str())))
}

fn redacted_paths(value: &Value, at: &str, found: &mut Vec<String>) {
    match value {
        Value::String(text) if text == REDACTED => found.push(at.to_owned()),
        Value::Object(fields) => {
            for (key, child) in fields {
                redacted_paths(child, &format!("{at}.{key}"), found);
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|item| redacted_paths(item, at, found)),
        _ => {}
    }
}

/// `toolCallCount` and spend as they were when each call was made, kept
/// while the calls are judged in ledger order.
#[derive(Default)]
struct Counters {
    /// (execution, checksum) → calls so far.
    repeats: HashMap<(String, String), usize>,
    /// execution → USD so far.
    runs: HashMap<String, f64>,
    /// `YYYY-MM-DD` → USD so far.
    days: HashMap<String, f64>,
    /// `YYYY-MM` → USD so far.
    months: HashMap<String, f64>,
}

impl Counters {
    /// This call's `toolCallCount`: 1 without an execution, else 1 + the
    /// earlier calls of the window with its checksum in its execution.
    fn count(&mut self, call: &ToolCall) -> usize {
        let Some(execution) = &call.spec.execution_ref else {
            return 1;
        };
        let seen = self
            .repeats
            .entry((execution.name.clone(), call.status.checksum.clone()))
            .or_default();
        *seen += 1;
        *seen
    }

    /// The `cost` facts before this call, then counts its own cost.
    fn spend(&mut self, call: &ToolCall, wanted: bool) -> Option<Value> {
        if !wanted {
            return None;
        }
        let usd = call
            .status
            .cost
            .as_ref()
            .filter(|c| c.currency == joch_core::cost::DEFAULT_CURRENCY)
            .map_or(0.0, |c| c.amount);
        let created = call.metadata.creation_timestamp.map(|t| t.0);
        let day = created
            .map(|t| t.format("%Y-%m-%d").to_string())
            .unwrap_or_default();
        let month = day.get(..7).unwrap_or_default().to_owned();
        let run = call.spec.execution_ref.as_ref().map(|e| e.name.clone());
        let facts = json!({
            "runUsd": run.as_ref().map_or(0.0, |r| self.runs.get(r).copied().unwrap_or(0.0)),
            "dailyUsd": self.days.get(&day).copied().unwrap_or(0.0),
            "monthlyUsd": self.months.get(&month).copied().unwrap_or(0.0),
            "callUsd": usd,
        });
        if let Some(run) = run {
            *self.runs.entry(run).or_default() += usd;
        }
        *self.days.entry(day).or_default() += usd;
        *self.months.entry(month).or_default() += usd;
        Some(facts)
    }
}

#[cfg(test)]
mod tests {
    use joch_core::{CallCost, HookDecision, ObjectRef, Time};

    use super::*;

    fn call(execution: Option<&str>, checksum: &str, usd: f64) -> ToolCall {
        let mut call = ToolCall::of("c", "t", json!({}));
        call.spec.execution_ref = execution.map(ObjectRef::new);
        call.status.checksum = checksum.to_owned();
        call.metadata.creation_timestamp = Some(Time(chrono::Utc::now()));
        call.status.cost = Some(CallCost {
            amount: usd,
            currency: joch_core::cost::DEFAULT_CURRENCY.to_owned(),
            units: None,
            unit: None,
        });
        call
    }

    #[test]
    fn an_abandoned_back_test_judges_no_more_calls() {
        let engine = crate::policies::StandardPolicyEngine::default();
        let calls = vec![call(None, "a", 0.0), call(None, "b", 0.0)];
        let tool = Arc::new(Tool::unregistered("ns", "t"));
        let tools = HashMap::from([("t".to_owned(), tool)]);
        let judged = |stop: bool| {
            let report = judge_all(&engine, &[], &calls, &tools, &AtomicBool::new(stop));
            report.total.allow + report.total.deny + report.total.defer + report.total.modify
        };
        assert_eq!(judged(false), 2);
        let abandoned = Abandoned::default();
        let stop = abandoned.0.clone();
        drop(abandoned);
        assert!(
            stop.load(Ordering::Relaxed),
            "dropping the test sets the flag"
        );
        assert_eq!(judged(true), 0);
    }

    #[test]
    fn counters_are_those_of_the_time() {
        let mut counters = Counters::default();
        let calls = [
            call(Some("r1"), "a", 1.0),
            call(Some("r1"), "a", 2.0),
            call(Some("r2"), "a", 4.0),
            call(None, "a", 8.0),
            call(Some("r1"), "a", 0.5),
        ];
        let seen: Vec<(usize, f64, f64)> = calls
            .iter()
            .map(|c| {
                let count = counters.count(c);
                let spend = counters.spend(c, true).unwrap_or_default();
                (
                    count,
                    spend["runUsd"].as_f64().unwrap_or(-1.0),
                    spend["dailyUsd"].as_f64().unwrap_or(-1.0),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (1, 0.0, 0.0),
                (2, 1.0, 1.0),
                (1, 0.0, 3.0),
                (1, 0.0, 7.0),
                (3, 3.0, 15.0)
            ]
        );
        assert_eq!(
            counters.spend(&calls[0], false),
            None,
            "not summed unless read"
        );
    }

    #[test]
    fn what_happened_is_the_strongest_enforced_policy_decision() {
        let decision = |decision: &str, policy: &str, shadow: bool| HookDecision {
            hook: Hook::Request.step().to_owned(),
            decision: joch_core::DecisionKind::parse(decision).unwrap(),
            policy_id: Some(policy.to_owned()),
            policy_version: None,
            reason: None,
            shadow,
        };
        let mut c = call(None, "a", 0.0);
        assert_eq!(happened(&c), Verdict::Allow, "no decision is an allow");
        c.status.hook_decisions = vec![
            decision("modify", "calm", false),
            decision("deny", "trial", true),
            decision("deny", "ratelimit/burst", false),
            decision("request_user_input", "ask", false),
        ];
        assert_eq!(happened(&c), Verdict::Defer);
    }

    #[test]
    fn a_policy_reading_a_redacted_field_cannot_judge() {
        let input = json!({"card": REDACTED, "items": [{"secret": REDACTED}], "n": 1});
        let reads = |text: &str| redacted_read(&input, &[text.to_owned()]);
        assert!(reads(r#"{"when":{"input.card":"4*"}}"#));
        assert!(reads(r#"{"expr":"input.items.secret == 'x'"}"#));
        assert!(!reads(r#"{"when":{"input.n":{"gt":0}}}"#));
    }
}
