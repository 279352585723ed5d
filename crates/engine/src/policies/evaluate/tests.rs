use joch_core::{DecisionKind, Hook, Policy};
use serde_json::{Value, json};

use super::*;
use crate::policies::{Effect, Facts, Outcome, decide};

fn policy(name: &str, spec: Value) -> Policy {
    serde_json::from_value(
        json!({"metadata": {"name": name, "uid": name, "resourceVersion": "1"}, "spec": spec}),
    )
    .unwrap()
}

fn facts() -> Value {
    json!({
        "tool": {"name": "zendesk.create_ticket", "sideEffects": {"level": "external_write", "idempotent": false}},
        "agent": {"name": "support-triage"},
        "input": {"priority": "high", "amount": 120},
        "toolCallCount": 3,
        "replay": false
    })
}

fn effect(p: &Policy) -> Option<Effect> {
    StandardPolicyEngine::default()
        .evaluate(p, Hook::Request, &facts())
        .unwrap()
        .map(|v| v.effect)
}

#[test]
fn when_keys_match_globs_lists_comparisons_and_values() {
    let cases = [
        (json!({"tool.name": "zendesk.*"}), true),
        (json!({"tool.name": "slack.*"}), false),
        (json!({"tool.name": "zendesk.create_ticket"}), true),
        (
            json!({"tool.sideEffects.level": ["financial", "external_write"]}),
            true,
        ),
        (json!({"tool.sideEffects.idempotent": false}), true),
        (json!({"toolCallCount": {"gte": 3}}), true),
        (json!({"toolCallCount": {"gt": 3}}), false),
        (json!({"input.amount": {"gt": 100, "lte": 120}}), true),
        (json!({"input.missing": "x"}), false),
        (
            json!({"agent.name": "support-*", "input.priority": "high"}),
            true,
        ),
        (
            json!({"expr": "input.amount > 100 && agent.name == 'support-triage'"}),
            true,
        ),
        (json!({"expr": "input.priority == 'low'"}), false),
        (json!({}), true),
    ];
    for (when, matches) in cases {
        let p = policy(
            "p",
            json!({"version": "1", "rules": [{"when": when.clone(), "action": "allow"}]}),
        );
        assert_eq!(effect(&p).is_some(), matches, "{when}");
    }
}

#[test]
fn first_matching_rule_of_the_hook_decides() {
    let p = policy(
        "p",
        json!({"version": "1", "rules": [
            {"hook": "toolCallResult", "action": {"deny": {}}},
            {"when": {"tool.name": "nope"}, "action": {"deny": {}}},
            {"when": {"tool.name": "zendesk.*"}, "require": {"approval": "human", "approvalRouting": {"timeoutSeconds": 5}}, "reason": "r"},
            {"action": "allow"}
        ]}),
    );
    let v = StandardPolicyEngine::default()
        .evaluate(&p, Hook::Request, &facts())
        .unwrap()
        .unwrap();
    assert!(matches!(v.effect, Effect::Defer(ref r) if r.timeout_seconds == Some(5)));
    assert_eq!(v.reason.as_deref(), Some("r"));
}

#[test]
fn broken_expressions_are_errors_not_matches() {
    for expr in ["input.amount >", "input.amount + 1", "nosuchvar == 1"] {
        let p = policy(
            "p",
            json!({"version": "1", "rules": [{"when": {"expr": expr}, "action": "allow"}]}),
        );
        assert!(
            StandardPolicyEngine::default()
                .evaluate(&p, Hook::Request, &facts())
                .is_err(),
            "{expr}"
        );
    }
    let p = policy(
        "p",
        json!({"version": "1", "rules": [{"when": {"toolCallCount": {"near": 3}}, "action": "allow"}]}),
    );
    assert!(
        StandardPolicyEngine::default()
            .evaluate(&p, Hook::Request, &facts())
            .is_err()
    );
}

#[test]
fn rego_modules_return_structured_decisions() {
    let module = r#"
package joch
import rego.v1

decision := {"decision": "deny", "reason": "too expensive"} if input.input.amount > 100
decision := {"decision": "allow"} if input.input.amount <= 100
"#;
    let p = policy("opa", json!({"version": "2", "rego": {"module": module}}));
    let v = StandardPolicyEngine::default()
        .evaluate(&p, Hook::Request, &facts())
        .unwrap()
        .unwrap();
    assert_eq!(
        (v.effect, v.reason.as_deref()),
        (Effect::Deny, Some("too expensive"))
    );

    let silent = policy(
        "opa",
        json!({"version": "2", "rego": {"module": "package joch\nimport rego.v1\ndecision := {\"decision\": \"deny\"} if false\n"}}),
    );
    assert_eq!(
        StandardPolicyEngine::default()
            .evaluate(&silent, Hook::Request, &facts())
            .unwrap(),
        None
    );
    let broken = policy(
        "opa",
        json!({"version": "2", "rego": {"module": "package joch\ndecision := {"}}),
    );
    assert!(
        StandardPolicyEngine::default()
            .evaluate(&broken, Hook::Request, &facts())
            .is_err()
    );
}

fn outcome(policies: &[Policy]) -> Outcome {
    let facts = Facts {
        value: facts(),
        tool_name: "zendesk.create_ticket".into(),
        labels: Default::default(),
        detectors: None,
    };
    decide(
        &StandardPolicyEngine::default(),
        policies,
        Hook::Request,
        &facts,
    )
}

#[test]
fn deny_beats_defer_beats_modify_beats_allow() {
    let allow = policy(
        "a-allow",
        json!({"version": "1", "rules": [{"action": "allow"}]}),
    );
    let modify = policy(
        "b-modify",
        json!({"version": "1", "rules": [{"action": {"modify": {"set": {"priority": "low"}}}}]}),
    );
    let defer = policy(
        "c-defer",
        json!({"version": "1", "rules": [{"require": {"approval": "human"}}]}),
    );
    let deny = policy(
        "d-deny",
        json!({"version": "7", "rules": [{"action": {"deny": {"reason": "no"}}}]}),
    );
    let winner = |ps: &[Policy]| {
        outcome(ps)
            .winner()
            .map(|d| (d.policy_id.clone(), d.verdict.effect.kind().as_str()))
    };
    assert_eq!(
        winner(std::slice::from_ref(&allow)),
        Some(("a-allow".into(), "allow"))
    );
    assert_eq!(
        winner(&[allow.clone(), modify.clone()]),
        Some(("b-modify".into(), "modify"))
    );
    assert_eq!(
        winner(&[modify.clone(), defer.clone(), allow.clone()]),
        Some(("c-defer".into(), "defer"))
    );
    assert_eq!(
        winner(&[deny.clone(), defer.clone(), modify.clone()]),
        Some(("d-deny".into(), "deny"))
    );
    assert_eq!(outcome(&[allow.clone(), modify.clone()]).patches().len(), 1);
    assert_eq!(
        outcome(&[defer, modify.clone()]).patches().len(),
        1,
        "a deferred call is modified before a person sees it"
    );
    assert!(
        outcome(&[deny.clone(), modify]).patches().is_empty(),
        "a denied call is not modified"
    );
    let records = outcome(&[deny, allow]).records(Hook::Request);
    assert_eq!(records[0].policy_version.as_deref(), Some("7"));
    assert_eq!(records.len(), 2);
}

#[test]
fn scope_and_failure() {
    let elsewhere = policy(
        "p",
        json!({"version": "1", "appliesTo": {"tools": ["slack.*"]}, "rules": [{"action": {"deny": {}}}]}),
    );
    let o = outcome(&[elsewhere]);
    assert!(!o.applied && o.winner().is_none());
    assert!(o.records(Hook::Request).is_empty());

    let labelled = policy(
        "p",
        json!({"version": "1", "appliesTo": {"agents": {"selector": {"matchLabels": {"team": "x"}}}}, "rules": [{"action": {"deny": {}}}]}),
    );
    assert!(
        !outcome(&[labelled]).applied,
        "the call carries no team label"
    );

    let no_match = policy(
        "p",
        json!({"version": "1", "rules": [{"when": {"tool.name": "other"}, "action": {"deny": {}}}]}),
    );
    let o = outcome(&[no_match]);
    assert_eq!(o.records(Hook::Request)[0].decision, DecisionKind::Allow);

    let broken = policy(
        "p",
        json!({"version": "1", "rules": [{"when": {"expr": "((("}, "action": "allow"}]}),
    );
    let o = outcome(&[broken]);
    let w = o.winner().unwrap();
    assert_eq!(w.verdict.effect, Effect::Deny, "fails closed");
    assert!(
        w.verdict
            .reason
            .as_deref()
            .unwrap()
            .contains("failed to evaluate")
    );
}

#[test]
fn shadow_decisions_are_recorded_but_never_win() {
    let deny = policy(
        "shadow-deny",
        json!({"version": "2", "enforcement": "shadow", "rules": [{"action": {"deny": {"reason": "would stop it"}}}]}),
    );
    let silent = policy(
        "shadow-silent",
        json!({"version": "1", "enforcement": "shadow", "rules": [{"when": {"tool.name": "other"}, "action": {"deny": {}}}]}),
    );
    let modify = policy(
        "z-modify",
        json!({"version": "1", "rules": [{"action": {"modify": {"set": {"priority": "low"}}}}]}),
    );
    let o = outcome(&[deny.clone(), silent.clone()]);
    assert!(
        o.winner().is_none() && !o.applied,
        "shadow policies decide nothing"
    );
    let records = o.records(Hook::Request);
    let seen: Vec<_> = records
        .iter()
        .map(|r| (r.policy_id.as_deref(), r.decision.as_str(), r.shadow))
        .collect();
    assert_eq!(
        seen,
        [
            (Some("shadow-deny"), "deny", true),
            (Some("shadow-silent"), "allow", true)
        ]
    );
    let o = outcome(&[deny, modify]);
    assert_eq!(o.winner().map(|w| w.policy_id.as_str()), Some("z-modify"));
    assert_eq!(o.patches().len(), 1, "a shadow deny does not stop a modify");
    let records = o.records(Hook::Request);
    assert_eq!(
        records.iter().map(|r| r.shadow).collect::<Vec<_>>(),
        [false, true]
    );
}
