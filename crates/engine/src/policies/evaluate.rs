//! The standard policy engine: ordered rules whose `when` keys are matched
//! directly and whose `expr` is CEL, and Rego modules evaluated by regorus.
//! Each policy's evaluation is bounded ([`PolicyBudget`]): CEL in steps and
//! time (`joch_core::expr`), Rego in time (regorus's execution timer).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use joch_core::expr::Budget;
use joch_core::policy::{Action, ApprovalRouting, Patch, RegoPolicy, Rule, UserInput};
use joch_core::{Hook, Policy};
use serde_json::Value;

use super::{Effect, PolicyEngine, Verdict};
use crate::glob::glob_matches;

/// Most prepared Rego engines kept.
const MAX_REGO_ENGINES: usize = 1024;

/// What one policy's evaluation for one call may spend before it fails
/// (and so denies the call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyBudget {
    /// Wall-clock time, CEL and Rego alike (default 100 ms).
    pub time: Duration,
    /// CEL steps: items ranged over by comprehensions, and sizes built by
    /// `+` (default [`joch_core::expr::DEFAULT_STEPS`]).
    pub cel_steps: u64,
}

impl Default for PolicyBudget {
    fn default() -> Self {
        PolicyBudget {
            time: Duration::from_millis(100),
            cel_steps: joch_core::expr::DEFAULT_STEPS,
        }
    }
}

/// Rules (with CEL) and Rego. Prepared Rego engines, and whether a
/// policy is linear, are cached per policy version.
#[derive(Default)]
pub struct StandardPolicyEngine {
    rego: Mutex<HashMap<String, regorus::Engine>>,
    linear: Mutex<HashMap<String, bool>>,
    budget: PolicyBudget,
}

impl StandardPolicyEngine {
    /// An engine whose every evaluation stays within `budget`.
    pub fn with_budget(budget: PolicyBudget) -> Self {
        StandardPolicyEngine {
            budget,
            ..Self::default()
        }
    }
}

impl PolicyEngine for StandardPolicyEngine {
    fn is_linear(&self, policy: &Policy) -> bool {
        let key = version_key(policy);
        let mut cache = self.linear.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(linear) = cache.get(&key) {
            return *linear;
        }
        let linear = policy.spec.rego.is_none()
            && (policy.spec.rules.iter())
                .filter_map(|rule| rule.when.expr.as_deref())
                .all(joch_core::expr::is_linear);
        if cache.len() >= MAX_REGO_ENGINES {
            cache.clear();
        }
        cache.insert(key, linear);
        linear
    }

    fn evaluate(
        &self,
        policy: &Policy,
        hook: Hook,
        facts: &Value,
    ) -> Result<Option<Verdict>, String> {
        let deadline = Instant::now() + self.budget.time;
        let budget = Budget {
            steps: self.budget.cel_steps,
            expired: Arc::new(move || Instant::now() > deadline),
        };
        for rule in policy.spec.rules.iter().filter(|r| r.hook == hook) {
            if rule_matches(rule, facts, &budget)? {
                return Ok(Some(verdict_of(rule)));
            }
        }
        match &policy.spec.rego {
            Some(rego) => self.evaluate_rego(policy, rego, facts),
            None => Ok(None),
        }
    }
}

fn verdict_of(rule: &Rule) -> Verdict {
    let effect = match (&rule.action, &rule.require) {
        (Some(Action::Allow), _) => Effect::Allow,
        (Some(Action::Deny { .. }), _) => Effect::Deny,
        (Some(Action::Modify(patch)), _) => Effect::Modify(patch.clone()),
        (None, Some(require)) => match &require.user_input {
            Some(input) => Effect::RequestUserInput(input.clone()),
            None => Effect::Defer(require.approval_routing.clone().unwrap_or_default()),
        },
        // Validation refuses a rule with neither; deny rather than guess.
        (None, None) => Effect::Deny,
    };
    let reason = match &rule.action {
        Some(Action::Deny {
            reason: Some(reason),
        }) => Some(reason.clone()),
        _ => rule.reason.clone(),
    };
    Verdict {
        effect,
        rule: rule.name.clone(),
        reason,
        approver_reason: rule.approver_reason.clone(),
    }
}

fn rule_matches(rule: &Rule, facts: &Value, budget: &Budget) -> Result<bool, String> {
    for (key, expected) in &rule.when.keys {
        if !value_matches(lookup(facts, key), expected)? {
            return Ok(false);
        }
    }
    match &rule.when.expr {
        Some(expr) => joch_core::expr::evaluate_bool_within(expr, facts, budget),
        None => Ok(true),
    }
}

fn lookup<'a>(facts: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.')
        .try_fold(facts, |at, segment| at.get(segment))
}

/// A string matches as a glob, a list as any of its items, `{gt|gte|lt|lte|eq|ne: x}`
/// by comparison; anything else by equality.
fn value_matches(actual: Option<&Value>, expected: &Value) -> Result<bool, String> {
    match expected {
        Value::Array(options) => {
            for option in options {
                if value_matches(actual, option)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Value::String(pattern) => Ok(actual
            .and_then(Value::as_str)
            .is_some_and(|a| glob_matches(pattern, a))),
        Value::Object(ops) => {
            for (op, bound) in ops {
                if !compare(actual, op, bound)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        other => Ok(actual == Some(other)),
    }
}

fn compare(actual: Option<&Value>, op: &str, bound: &Value) -> Result<bool, String> {
    if matches!(op, "eq" | "ne") {
        let equal = actual == Some(bound);
        return Ok(if op == "eq" { equal } else { !equal });
    }
    let bound = bound
        .as_f64()
        .ok_or_else(|| format!("{op} needs a number, got {bound}"))?;
    let Some(actual) = actual.and_then(Value::as_f64) else {
        return Ok(false);
    };
    match op {
        "gt" => Ok(actual > bound),
        "gte" => Ok(actual >= bound),
        "lt" => Ok(actual < bound),
        "lte" => Ok(actual <= bound),
        other => Err(format!(
            "unknown comparison {other:?}; use gt, gte, lt, lte, eq or ne"
        )),
    }
}

pub(crate) fn compile_rego(name: &str, module: &str) -> Result<regorus::Engine, String> {
    let mut engine = regorus::Engine::new();
    engine
        .add_policy(format!("{name}.rego"), module.to_owned())
        .map_err(|e| format!("invalid Rego module: {e}"))?;
    Ok(engine)
}

impl StandardPolicyEngine {
    fn evaluate_rego(
        &self,
        policy: &Policy,
        rego: &RegoPolicy,
        facts: &Value,
    ) -> Result<Option<Verdict>, String> {
        let key = version_key(policy);
        let mut engine = {
            let mut cache = self.rego.lock().unwrap_or_else(|p| p.into_inner());
            match cache.get(&key) {
                Some(engine) => engine.clone(),
                None => {
                    let engine = compile_rego(&policy.metadata.name, &rego.module)?;
                    // One entry per policy version ever evaluated: emptied
                    // past a bound, as the schema cache is.
                    if cache.len() >= MAX_REGO_ENGINES {
                        cache.clear();
                    }
                    cache.insert(key, engine.clone());
                    engine
                }
            }
        };
        let input = regorus::Value::from_json_str(&facts.to_string()).map_err(|e| e.to_string())?;
        engine.set_input(input);
        engine.set_execution_timer_config(regorus::utils::limits::ExecutionTimerConfig {
            limit: self.budget.time,
            check_interval: NonZeroU32::MIN,
        });
        let result = engine
            .eval_rule(rego.query.clone())
            .map_err(|e| format!("Rego evaluation failed: {e}"))?;
        if result == regorus::Value::Undefined {
            return Ok(None);
        }
        let json = result.to_json_str().map_err(|e| e.to_string())?;
        rego_verdict(&serde_json::from_str(&json).map_err(|e| e.to_string())?).map(Some)
    }
}

/// One policy version's key in the caches.
fn version_key(policy: &Policy) -> String {
    format!(
        "{}@{}",
        policy.metadata.uid, policy.metadata.resource_version
    )
}

/// `{"decision": "allow"|"deny"|"modify"|"defer"|"request_user_input",
///   "reason", "approverReason", "patch", "routing", "userInput"}`.
fn rego_verdict(value: &Value) -> Result<Verdict, String> {
    let text = |k: &str| value.get(k).and_then(Value::as_str).map(str::to_owned);
    let field = |k: &str| value.get(k).cloned().unwrap_or(Value::Null);
    let effect = match text("decision").as_deref() {
        Some("allow") => Effect::Allow,
        Some("deny") => Effect::Deny,
        Some("modify") => Effect::Modify(
            serde_json::from_value::<Patch>(field("patch"))
                .map_err(|e| format!("Rego patch: {e}"))?,
        ),
        Some("defer") => Effect::Defer(if value.get("routing").is_some() {
            serde_json::from_value::<ApprovalRouting>(field("routing"))
                .map_err(|e| format!("Rego routing: {e}"))?
        } else {
            ApprovalRouting::default()
        }),
        Some("request_user_input") => Effect::RequestUserInput(
            serde_json::from_value::<UserInput>(field("userInput"))
                .map_err(|e| format!("Rego userInput: {e}"))?,
        ),
        other => {
            return Err(format!(
                "Rego decision must be allow, deny, modify, defer or request_user_input, got {other:?}"
            ));
        }
    };
    Ok(Verdict {
        effect,
        rule: None,
        reason: text("reason"),
        approver_reason: text("approverReason"),
    })
}

#[cfg(test)]
mod tests;
