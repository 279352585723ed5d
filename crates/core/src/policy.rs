//! The `Policy` resource: ordered rules deciding what happens around a call,
//! before it runs (`toolCallRequest`) and after (`toolCallResult`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::limits;
use crate::names::validate_name;
use crate::object::{Object, check_type};
use crate::{FieldError, ObjectMeta, ValidationError};

/// A versioned set of rules, scoped to a namespace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// Always `joch.dev/v1alpha1`; may be omitted in requests.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `Policy`; may be omitted in requests.
    #[serde(default = "policy_kind")]
    pub kind: String,
    /// Name (the `policyId` recorded on decisions), namespace, labels.
    pub metadata: ObjectMeta,
    /// The rules.
    pub spec: PolicySpec,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn policy_kind() -> String {
    Policy::KIND.to_owned()
}

/// `Policy.spec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicySpec {
    /// For people.
    #[serde(default)]
    pub description: String,
    /// Recorded as `policyVersion` on every decision this policy makes.
    pub version: String,
    /// `enforce` (the default): its decisions apply. `shadow`: it is
    /// evaluated on every call it applies to and its decisions are recorded
    /// (marked `shadow`) and counted, but change nothing.
    #[serde(default, skip_serializing_if = "Enforcement::is_enforce")]
    pub enforcement: Enforcement,
    /// Which calls the policy looks at; all when empty.
    #[serde(default)]
    pub applies_to: AppliesTo,
    /// Evaluated in declared order; the first matching rule of a hook decides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    /// Instead of (or besides) rules: a Rego module evaluated by an
    /// OPA-compatible engine, whose query returns a structured decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rego: Option<RegoPolicy>,
}

/// `spec.enforcement`: whether a policy's decisions apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    /// Its decisions apply.
    #[default]
    Enforce,
    /// Its decisions are recorded and counted only: a policy on trial.
    Shadow,
}

impl Enforcement {
    /// True for `enforce`.
    pub fn is_enforce(&self) -> bool {
        *self == Enforcement::Enforce
    }
}

/// `spec.appliesTo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppliesTo {
    /// Only calls whose agent carries these labels (the labels on the
    /// ToolCall, set by the agent's integration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<AgentScope>,
    /// Only tools whose name matches one of these globs (`zendesk.*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

/// `appliesTo.agents`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentScope {
    /// `{matchLabels: {...}}`.
    pub selector: MatchLabels,
}

/// `selector.matchLabels`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MatchLabels {
    /// Every pair must be present.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// Which side of the call a rule looks at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Hook {
    /// `steps/toolCallRequest`: before the tool runs. Written
    /// `toolCallRequest` or, as records show it (seed 000),
    /// `steps/toolCallRequest`: the same hook.
    #[default]
    #[serde(rename = "toolCallRequest", alias = "steps/toolCallRequest")]
    Request,
    /// `steps/toolCallResult`: after it ran, before the caller sees the
    /// output. Also written `steps/toolCallResult`.
    #[serde(rename = "toolCallResult", alias = "steps/toolCallResult")]
    Result,
}

impl Hook {
    /// The AOS step name recorded in `hookDecisions`.
    pub fn step(self) -> &'static str {
        match self {
            Hook::Request => "steps/toolCallRequest",
            Hook::Result => "steps/toolCallResult",
        }
    }
}

/// One rule: when it matches, its action (or requirement) is the decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    /// Optional name, recorded with the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The hook the rule belongs to (default `toolCallRequest`).
    #[serde(default)]
    pub hook: Hook,
    /// Conditions that must all hold; an empty `when` always matches.
    #[serde(default)]
    pub when: When,
    /// What to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    /// Or: what to require before the call may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require: Option<Require>,
    /// Shown to the model (in a denial, or while the call waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Shown to the approver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver_reason: Option<String>,
}

/// The first segment of every key a `when` may test: the facts the engine
/// gives policies (see `engine/policies/facts.rs`).
pub const FACT_ROOTS: &[&str] = &[
    "hook",
    "tool",
    "agent",
    "execution",
    "caller",
    "input",
    "output",
    "toolCallCount",
    "replay",
    "override",
    "cost",
    "labels",
    "detected",
];

/// `rule.when`: dotted keys of the call, each matched against a value, plus
/// an optional CEL expression.
///
/// A string matches as a glob (`zendesk.*`); a list matches any of its
/// items; `{gt|gte|lt|lte: n}` compares numbers; anything else must be equal.
/// Keys: `tool.name`, `tool.sideEffects.level`, `tool.sideEffects.idempotent`,
/// `agent.name`, `execution`, `caller`, `input.<field>`, `output.<field>`
/// (result hook), `toolCallCount`, `replay`, `cost.runUsd`,
/// `input.detected.<kind>`, `output.detected.<kind>`, `detected.input.<kind>`
/// (detector counts, see `detect.rs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct When {
    /// A CEL expression over the same variables; must be true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expr: Option<String>,
    /// Dotted key → expected value.
    #[serde(flatten)]
    pub keys: BTreeMap<String, Value>,
}

/// `rule.action`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    /// Let the call run (or its output through).
    Allow,
    /// Refuse it.
    Deny {
        /// Why, for the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Change its input (request hook) or output (result hook).
    Modify(Patch),
}

/// `modify`: dotted paths to set, remove or redact.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Patch {
    /// Path → new value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, Value>,
    /// Paths to delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
    /// Paths whose value becomes `[REDACTED]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact: Vec<String>,
    /// Request hook only: sets the call's `spec.inline` (`false`: the
    /// caller gets a handle to an artifact instead of the result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<bool>,
    /// Detector kinds (`card`, `aws_access_key`, a custom name; `*` for
    /// all) whose matched spans become `[REDACTED:<kind>]` in the input
    /// (request hook) or output (result hook): only the span, not the field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact_detected: Vec<String>,
}

/// `rule.require`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Require {
    /// `human`: a person must approve the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// Who may approve, and what happens if nobody does in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_routing: Option<ApprovalRouting>,
    /// A value to ask the user for and inject into the arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_input: Option<UserInput>,
}

/// Approval routing: approvers, deadline, fallback.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalRouting {
    /// Who may decide (informational until authentication lands).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// Deadline in seconds (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// What the deadline decides: `deny` (default) or `approve`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<OnTimeout>,
    /// Also ask the user of the MCP client that made the call, through MCP
    /// elicitation, when that client supports it (default false). Off by
    /// default because it lets the agent's own user approve the agent's
    /// call: only the policy's author may decide that this is enough.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ask_user: bool,
}

/// The fallback when an approval times out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTimeout {
    /// The call ends `TimedOut` without running.
    #[default]
    Deny,
    /// The call runs as if approved.
    Approve,
}

/// `require.userInput`: ask for a value and inject it at `targetArg`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserInput {
    /// Argument (dotted path) that receives the value.
    pub target_arg: String,
    /// What to ask.
    #[serde(default)]
    pub prompt: String,
}

/// `spec.rego`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegoPolicy {
    /// The Rego source.
    pub module: String,
    /// Rule whose value is the decision (default `data.joch.decision`):
    /// `{"decision": "allow"|"deny"|"modify"|"defer", "reason", ...}`.
    #[serde(default = "default_query")]
    pub query: String,
}

fn default_query() -> String {
    "data.joch.decision".to_owned()
}

impl Object for Policy {
    const KIND: &'static str = "Policy";
    const PLURAL: &'static str = "policies";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<Policy>(&self.api_version, &self.kind)?;
        validate_name("metadata.name", &self.metadata.name)?;
        let mut errors = Vec::new();
        if self.spec.version.trim().is_empty() {
            errors.push(field("spec.version", "must not be empty"));
        }
        if self.spec.rules.is_empty() && self.spec.rego.is_none() {
            errors.push(field("spec.rules", "a policy needs rules or a rego module"));
        }
        for (i, rule) in self.spec.rules.iter().enumerate() {
            let at = format!("spec.rules[{i}]");
            for key in rule.when.keys.keys() {
                let root = key.split('.').next().unwrap_or_default();
                if !FACT_ROOTS.contains(&root) {
                    // A typo would otherwise never match, silently.
                    errors.push(field(
                        &format!("{at}.when.{key}"),
                        &format!("no fact {root:?}; the facts are {}", FACT_ROOTS.join(", ")),
                    ));
                }
            }
            match (&rule.action, &rule.require) {
                (None, None) => errors.push(field(&at, "needs an action or a require")),
                (Some(_), Some(_)) => {
                    errors.push(field(&at, "has both an action and a require; give one"))
                }
                (None, Some(r)) => {
                    if rule.hook == Hook::Result {
                        errors.push(field(
                            &at,
                            "require applies before a call runs; use hook toolCallRequest",
                        ));
                    }
                    match (&r.approval, &r.user_input) {
                        (Some(a), None) if a == "human" => {}
                        (Some(a), None) => errors.push(field(
                            &format!("{at}.require.approval"),
                            &format!("must be \"human\", got {a:?}"),
                        )),
                        (None, Some(_)) => {
                            // A value is always asked of the user; the flag
                            // would read as a switch that does nothing.
                            if r.approval_routing.as_ref().is_some_and(|a| a.ask_user) {
                                errors.push(field(
                                    &format!("{at}.require.approvalRouting.askUser"),
                                    "applies to approval; userInput is always asked of the MCP client's user when it supports elicitation",
                                ));
                            }
                        }
                        _ => errors.push(field(
                            &format!("{at}.require"),
                            "give exactly one of approval or userInput",
                        )),
                    }
                }
                (Some(_), None) => {}
            }
            let routing = rule
                .require
                .as_ref()
                .and_then(|r| r.approval_routing.as_ref());
            errors.extend(limits::APPROVAL_TIMEOUT_SECONDS.check(
                &format!("{at}.require.approvalRouting.timeoutSeconds"),
                routing.and_then(|r| r.timeout_seconds),
            ));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationError(errors))
        }
    }
}

fn field(field: &str, message: &str) -> FieldError {
    FieldError {
        field: field.to_owned(),
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hooks_read_as_records_name_them_too() {
        for (text, hook) in [
            ("toolCallRequest", super::Hook::Request),
            ("steps/toolCallRequest", super::Hook::Request),
            ("toolCallResult", super::Hook::Result),
            ("steps/toolCallResult", super::Hook::Result),
        ] {
            let read: super::Hook = serde_json::from_value(serde_json::json!(text)).unwrap();
            assert_eq!(read, hook, "{text}");
        }
        assert!(serde_json::from_value::<super::Hook>(serde_json::json!("steps/other")).is_err());
    }

    use serde_json::json;

    use super::*;

    #[test]
    fn the_issue_shape_parses() {
        let p: Policy = serde_json::from_value(json!({
            "metadata": {"name": "external-send-requires-approval"},
            "spec": {
                "version": "v3",
                "appliesTo": {"agents": {"selector": {"matchLabels": {"team": "support"}}}, "tools": ["zendesk.*"]},
                "rules": [
                    {"when": {"tool.sideEffects.level": "external_write", "expr": "input.priority == 'high'"},
                     "require": {"approval": "human", "approvalRouting": {"approvers": ["alice@example.com"], "timeoutSeconds": 60, "onTimeout": "deny", "askUser": true}},
                     "reason": "needs a human", "approverReason": "external send"},
                    {"when": {"toolCallCount": {"gte": 3}}, "action": {"deny": {"reason": "looping"}}},
                    {"action": {"modify": {"set": {"input.priority": "low"}, "redact": ["input.email"]}}},
                    {"hook": "toolCallResult", "action": "allow"}
                ]
            }
        }))
        .unwrap();
        p.validate().unwrap();
        assert_eq!(
            p.spec.rules[0].when.expr.as_deref(),
            Some("input.priority == 'high'")
        );
        assert_eq!(
            p.spec.rules[0].when.keys["tool.sideEffects.level"],
            json!("external_write")
        );
        assert_eq!(
            p.spec.rules[1].action,
            Some(Action::Deny {
                reason: Some("looping".into())
            })
        );
        let routing = p.spec.rules[0]
            .require
            .as_ref()
            .and_then(|r| r.approval_routing.as_ref());
        assert!(routing.is_some_and(|r| r.ask_user));
        assert_eq!(p.spec.rules[3].hook, Hook::Result);
        assert_eq!(p.spec.rules[3].action, Some(Action::Allow));
        let again: Policy = serde_json::from_value(serde_json::to_value(&p).unwrap()).unwrap();
        assert_eq!(again, p);
    }

    #[test]
    fn incoherent_rules_are_refused() {
        let bad = |rules: Value| {
            let p: Policy = serde_json::from_value(
                json!({"metadata": {"name": "p"}, "spec": {"version": "1", "rules": rules}}),
            )
            .unwrap();
            p.validate().unwrap_err().0[0].field.clone()
        };
        assert_eq!(bad(json!([{}])), "spec.rules[0]");
        assert_eq!(
            bad(json!([{"action": "allow", "require": {"approval": "human"}}])),
            "spec.rules[0]"
        );
        assert_eq!(
            bad(json!([{"require": {"approval": "robot"}}])),
            "spec.rules[0].require.approval"
        );
        assert_eq!(
            bad(json!([{"hook": "toolCallResult", "require": {"approval": "human"}}])),
            "spec.rules[0]"
        );
        assert_eq!(
            bad(
                json!([{"require": {"userInput": {"targetArg": "code"}, "approvalRouting": {"askUser": true}}}])
            ),
            "spec.rules[0].require.approvalRouting.askUser"
        );
        assert_eq!(bad(json!([])), "spec.rules");
        assert_eq!(
            bad(json!([{"when": {"args.who": "x"}, "action": "allow"}])),
            "spec.rules[0].when.args.who"
        );
    }

    #[test]
    fn every_fact_root_is_accepted() {
        for root in FACT_ROOTS {
            let p: Policy = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {
                "version": "1",
                "rules": [{"when": {format!("{root}.x"): 1}, "action": "allow"}]
            }}))
            .unwrap();
            assert_eq!(p.validate(), Ok(()), "{root}");
        }
    }
}
