//! Policy hooks: which policies apply to a call, what each decides, and
//! how their decisions combine.
//!
//! Precedence when several policies decide: deny beats defer (approval or
//! user input), defer beats modify, modify beats allow; modifications of
//! several policies all apply, in policy-name order. With no matching rule,
//! the call is allowed. A policy that fails to evaluate denies (fails
//! closed), and the error is the recorded reason.
//!
//! A policy in `enforcement: shadow` is evaluated like any other, but its
//! decisions are kept apart ([`Outcome::shadow`]): recorded and counted,
//! marked `shadow`, never combined into what happens.

mod backtest;
mod detections;
mod envelopes;
pub(crate) mod evaluate;
mod facts;

use std::sync::Arc;

use joch_core::policy::{ApprovalRouting, Enforcement, Patch, UserInput};
use joch_core::{DecisionKind, HookDecision, LabelSelector, Policy};
use joch_store::Store;
use serde_json::Value;

use crate::catalog::Catalog;

pub use backtest::Progress;
pub(crate) use detections::{apply_patches, redact_detected};
pub(crate) use envelopes::rewrap;
pub use evaluate::{PolicyBudget, StandardPolicyEngine};
pub(crate) use facts::{Facts, REPLAY_OVERRIDE_ANNOTATION};

use joch_core::Hook;

/// The policies part: evaluation on the call path (the [`PolicyEngine`],
/// detectors, envelopes) and back-testing a candidate on the ledger.
pub struct Policies {
    store: Arc<dyn Store>,
    catalog: Arc<Catalog>,
    engine: Arc<dyn PolicyEngine>,
}

impl Policies {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        catalog: Arc<Catalog>,
        engine: Arc<dyn PolicyEngine>,
    ) -> Self {
        Self {
            store,
            catalog,
            engine,
        }
    }

    /// The engine that evaluates each policy.
    pub(crate) fn engine(&self) -> &Arc<dyn PolicyEngine> {
        &self.engine
    }
}

/// Evaluates one policy. Implementations: rules with CEL expressions and
/// Rego modules ([`StandardPolicyEngine`]); a test or an embedder may plug
/// in another.
pub trait PolicyEngine: Send + Sync {
    /// The verdict of `policy` for `hook` on the call described by `facts`,
    /// or `None` when none of its rules matched. `Err` is an evaluation
    /// failure, which the caller turns into a denial.
    fn evaluate(
        &self,
        policy: &Policy,
        hook: Hook,
        facts: &Value,
    ) -> Result<Option<Verdict>, String>;

    /// Whether evaluating `policy` costs no more than reading the call once
    /// (no loop), so that it may run on the thread serving the request
    /// rather than be handed to the blocking pool. Default: no.
    fn is_linear(&self, _policy: &Policy) -> bool {
        false
    }
}

/// What one policy decided, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The decision.
    pub effect: Effect,
    /// The rule that decided, when named.
    pub rule: Option<String>,
    /// Shown to the model.
    pub reason: Option<String>,
    /// Shown to the approver.
    pub approver_reason: Option<String>,
}

/// The decision of a verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Run, or pass the output through.
    Allow,
    /// Refuse.
    Deny,
    /// Change the input (request hook) or the output (result hook).
    Modify(Patch),
    /// Wait for a person's approval.
    Defer(ApprovalRouting),
    /// Ask the user for a value to inject.
    RequestUserInput(UserInput),
}

impl Effect {
    /// The decision it makes, as `hookDecisions` and events name it.
    pub fn kind(&self) -> DecisionKind {
        match self {
            Effect::Allow => DecisionKind::Allow,
            Effect::Deny => DecisionKind::Deny,
            Effect::Modify(_) => DecisionKind::Modify,
            Effect::Defer(_) => DecisionKind::Defer,
            Effect::RequestUserInput(_) => DecisionKind::RequestUserInput,
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Effect::Deny => 3,
            Effect::Defer(_) | Effect::RequestUserInput(_) => 2,
            Effect::Modify(_) => 1,
            Effect::Allow => 0,
        }
    }
}

/// A verdict with the policy that gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Policy name.
    pub policy_id: String,
    /// Its `spec.version`.
    pub policy_version: String,
    /// What it decided.
    pub verdict: Verdict,
}

impl Decision {
    /// The entry recorded in `status.hookDecisions`.
    pub fn record(&self, hook: Hook) -> HookDecision {
        HookDecision {
            hook: hook.step().to_owned(),
            decision: self.verdict.effect.kind(),
            policy_id: Some(self.policy_id.clone()),
            policy_version: Some(self.policy_version.clone()),
            reason: self.verdict.reason.clone(),
            shadow: false,
        }
    }
}

/// The combined outcome of every applicable policy for one hook.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    /// What each policy decided, in policy-name order.
    pub decisions: Vec<Decision>,
    /// Whether any enforced policy applied at all.
    pub applied: bool,
    /// What each shadow policy that applied would have decided (`allow`
    /// when none of its rules matched), in policy-name order. Never part
    /// of the winner or the patches.
    pub shadow: Vec<Decision>,
}

impl Outcome {
    /// The deciding decision: the highest-ranked, the first among equals.
    pub fn winner(&self) -> Option<&Decision> {
        self.decisions
            .iter()
            .fold(None, |best: Option<&Decision>, d| match best {
                Some(b) if b.verdict.effect.rank() >= d.verdict.effect.rank() => Some(b),
                _ => Some(d),
            })
    }

    /// Every patch to apply, unless a policy denies: a call deferred to a
    /// person is modified before the person sees it, so that what they
    /// approve is what runs.
    pub fn patches(&self) -> Vec<&Patch> {
        if self.winner().is_some_and(|w| w.verdict.effect.rank() > 2) {
            return Vec::new();
        }
        self.decisions
            .iter()
            .filter_map(|d| match &d.verdict.effect {
                Effect::Modify(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    /// The entries for `status.hookDecisions`: each decision, or a default
    /// allow when policies applied but none matched; then each shadow
    /// decision, marked `shadow`.
    pub fn records(&self, hook: Hook) -> Vec<HookDecision> {
        let mut records: Vec<HookDecision> = if self.decisions.is_empty() && self.applied {
            vec![HookDecision {
                hook: hook.step().to_owned(),
                decision: DecisionKind::Allow,
                policy_id: None,
                policy_version: None,
                reason: Some(NO_RULE_MATCHED.to_owned()),
                shadow: false,
            }]
        } else {
            self.decisions.iter().map(|d| d.record(hook)).collect()
        };
        records.extend(self.shadow.iter().map(|d| HookDecision {
            shadow: true,
            ..d.record(hook)
        }));
        records
    }
}

/// [`decide`] on the blocking pool, off the threads that serve requests,
/// within `span`: a costly policy (each bounded by its budget) holds up
/// only its own call. An evaluation that panics denies the call. When
/// every applicable policy is linear (rules whose CEL has no comprehension,
/// no Rego), it runs in place: its cost is that of reading the call.
pub(crate) async fn decide_apart(
    engine: &Arc<dyn PolicyEngine>,
    policies: &Arc<Vec<Policy>>,
    hook: Hook,
    facts: &Arc<Facts>,
    span: tracing::Span,
) -> Outcome {
    if policies
        .iter()
        .filter(|p| applies(p, facts))
        .all(|p| engine.is_linear(p))
    {
        // No loop to run: a hand-off would cost more than the evaluation.
        return span.in_scope(|| decide(&**engine, policies, hook, facts));
    }
    let (engine, policies, facts) = (engine.clone(), policies.clone(), facts.clone());
    let evaluated = tokio::task::spawn_blocking(move || {
        span.in_scope(|| decide(&*engine, &policies, hook, &facts))
    })
    .await;
    evaluated.unwrap_or_else(|e| Outcome {
        decisions: vec![Decision {
            policy_id: String::new(),
            policy_version: String::new(),
            verdict: Verdict {
                effect: Effect::Deny,
                rule: None,
                reason: Some(format!("policy evaluation failed: {e}")),
                approver_reason: None,
            },
        }],
        applied: true,
        shadow: Vec::new(),
    })
}

/// Evaluates every policy that applies to the call, failing closed.
pub(crate) fn decide(
    engine: &dyn PolicyEngine,
    policies: &[Policy],
    hook: Hook,
    facts: &Facts,
) -> Outcome {
    let mut outcome = Outcome::default();
    for policy in policies.iter().filter(|p| applies(p, facts)) {
        let shadow = policy.spec.enforcement == Enforcement::Shadow;
        outcome.applied |= !shadow;
        let verdict = match engine.evaluate(policy, hook, &facts.value) {
            Ok(Some(verdict)) => verdict,
            // A shadow policy's silence is a decision too: what it would
            // have let through is what a back-test or a dashboard compares.
            Ok(None) if shadow => Verdict {
                effect: Effect::Allow,
                rule: None,
                reason: Some(NO_RULE_MATCHED.to_owned()),
                approver_reason: None,
            },
            Ok(None) => continue,
            Err(error) => Verdict {
                effect: Effect::Deny,
                rule: None,
                reason: Some(format!(
                    "policy {:?} failed to evaluate: {error}",
                    policy.metadata.name
                )),
                approver_reason: None,
            },
        };
        let decision = Decision {
            policy_id: policy.metadata.name.clone(),
            policy_version: policy.spec.version.clone(),
            verdict,
        };
        match shadow {
            true => outcome.shadow.push(decision),
            false => outcome.decisions.push(decision),
        }
    }
    outcome
}

/// The reason recorded for an allow no rule made.
const NO_RULE_MATCHED: &str = "no policy rule matched";

fn applies(policy: &Policy, facts: &Facts) -> bool {
    applies_to(policy, &facts.tool_name, &facts.labels)
}

/// The enforced policies of `policies` that apply to a call of `tool` by
/// an agent labelled `labels`, at their versions: what an Approval
/// records it was asked and decided under.
pub(crate) fn in_force(
    policies: &[Policy],
    tool: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> Vec<joch_core::approval::PolicyRef> {
    policies
        .iter()
        .filter(|p| p.spec.enforcement.is_enforce() && applies_to(p, tool, labels))
        .map(|p| joch_core::approval::PolicyRef {
            name: p.metadata.name.clone(),
            version: p.spec.version.clone(),
        })
        .collect()
}

fn applies_to(
    policy: &Policy,
    tool: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    let scope = &policy.spec.applies_to;
    let tool_ok = scope.tools.is_empty()
        || scope
            .tools
            .iter()
            .any(|g| crate::glob::glob_matches(g, tool));
    let agent_ok = scope.agents.as_ref().is_none_or(|a| {
        let selector = a
            .selector
            .match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        LabelSelector::parse(&selector).is_ok_and(|s| s.matches(labels))
    });
    tool_ok && agent_ok
}

/// Checks that a policy's CEL expressions parse and its Rego module compiles,
/// so a broken policy is refused when written rather than denying every call.
pub(crate) fn check(policy: &Policy) -> Result<(), joch_core::ValidationError> {
    for (i, rule) in policy.spec.rules.iter().enumerate() {
        if let Some(expr) = &rule.when.expr {
            joch_core::expr::compile(expr).map_err(|e| {
                joch_core::ValidationError::field(format!("spec.rules[{i}].when.expr"), e)
            })?;
        }
    }
    if let Some(rego) = &policy.spec.rego {
        evaluate::compile_rego(&policy.metadata.name, &rego.module)
            .map_err(|e| joch_core::ValidationError::field("spec.rego.module", e))?;
    }
    Ok(())
}
