use joch_core::token::Role;
use joch_core::{Approval, PrincipalKind, Tool, ToolCall};
use serde_json::json;

use super::*;

pub(super) fn token(name: &str, role: Role) -> Principal {
    Principal {
        kind: PrincipalKind::Token,
        name: name.to_owned(),
        namespaces: joch_core::Namespaces::one("default"),
        role,
        tools: None,
        presented: Default::default(),
    }
}

pub(super) fn call_by(maker: &Principal) -> ToolCall {
    let mut call: ToolCall = serde_json::from_value(json!({
        "metadata": {"name": "c1", "namespace": "default"},
        "spec": {"toolRef": {"name": "crm.update"}}
    }))
    .expect("a call");
    call.status.principal = Some(maker.reference());
    call
}

fn approval(kind: &str, ask_user: bool) -> Approval {
    serde_json::from_value(json!({
        "metadata": {"name": "c1", "namespace": "default"},
        "spec": {
            "action": {"type": kind, "toolCallRef": {"name": "c1"}},
            "risk": {"level": "financial", "summary": "s"},
            "routing": {"askUser": ask_user},
            "options": ["approve"],
            "payload": {}
        }
    }))
    .expect("an approval")
}

fn tool(name: &str, labels: &[(&str, &str)]) -> Tool {
    let mut tool: Tool = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"backend": {"type": "noop"}}
    }))
    .expect("a tool");
    for (k, v) in labels {
        tool.metadata
            .labels
            .insert((*k).to_owned(), (*v).to_owned());
    }
    tool
}

#[test]
fn a_principal_cannot_decide_a_call_it_made() {
    let alice = token("alice", Role::Approver);
    let bob = token("bob", Role::Approver);
    let call = call_by(&alice);
    let plain = approval("tool_call", false);
    assert!(matches!(
        decider(&call, &plain, &alice, "", false),
        Err(EngineError::Forbidden(_))
    ));
    // Asking "for the user" does not lift it where the policy did not ask.
    assert!(matches!(
        decider(&call, &plain, &alice, "mcp-elicitation", true),
        Err(EngineError::Forbidden(_))
    ));
    let by_bob = decider(&call, &plain, &bob, "claimed", false).expect("bob decides");
    assert_eq!(
        by_bob.name, "bob",
        "an authenticated decider's own name is recorded"
    );
    assert!(!by_bob.asked_user);
}

#[test]
fn ask_user_is_the_one_exception_and_is_recorded() {
    let agent = token("agent", Role::Agent);
    let call = call_by(&agent);
    for asking in [approval("tool_call", true), approval("user_input", false)] {
        let d = decider(&call, &asking, &agent, "mcp-elicitation:a", true).expect("asked user");
        assert!(d.asked_user);
        assert_eq!(d.name, "mcp-elicitation:a");
    }
}

#[test]
fn agents_do_not_decide_others_calls() {
    let maker = token("maker", Role::Agent);
    let other = token("other", Role::Agent);
    let call = call_by(&maker);
    assert!(matches!(
        decider(&call, &approval("tool_call", true), &other, "x", true),
        Err(EngineError::Forbidden(_))
    ));
}

#[test]
fn the_local_caller_decides_under_the_name_it_gives() {
    let local = Principal::local();
    let call = call_by(&local);
    let plain = approval("tool_call", false);
    assert_eq!(
        decider(&call, &plain, &local, "alice", false)
            .expect("decides")
            .name,
        "alice"
    );
    assert!(matches!(
        decider(&call, &plain, &local, " ", false),
        Err(EngineError::Invalid(_))
    ));
}

#[test]
fn tool_selectors_hide_tools_by_name_and_label() {
    let mut crm = token("crm", Role::Agent);
    crm.tools = Some(joch_core::ToolSelector {
        names: vec!["crm.*".to_owned()],
        labels: None,
    });
    assert!(sees(&crm, &tool("crm.update", &[])));
    assert!(!sees(&crm, &tool("billing.refund", &[])));
    let mut labelled = token("l", Role::Agent);
    labelled.tools = Some(joch_core::ToolSelector {
        names: vec![],
        labels: Some("team=crm".to_owned()),
    });
    assert!(sees(&labelled, &tool("x", &[("team", "crm")])));
    assert!(!sees(&labelled, &tool("x", &[("team", "ops")])));
    assert!(sees(&token("all", Role::Agent), &tool("anything", &[])));
}

#[test]
fn results_come_from_whoever_made_the_call() {
    let maker = token("maker", Role::Agent);
    let call = call_by(&maker);
    let report = |by: &Principal| may(by, &Action::ReportResult(&call));
    assert!(report(&maker).is_ok());
    assert!(matches!(
        report(&token("other", Role::Approver)),
        Err(EngineError::Forbidden(_))
    ));
    assert!(report(&token("admin", Role::Admin)).is_ok());
}

#[test]
fn a_principal_acts_in_its_own_namespace_only() {
    let alice = token("alice", Role::Admin);
    assert!(acts_in(&alice, "default").is_ok());
    assert!(matches!(
        acts_in(&alice, "other"),
        Err(EngineError::NotFound { .. })
    ));
    assert!(acts_in(&Principal::root(), "other").is_ok());
    // Only those that act anywhere are offered other namespaces.
    assert!(!acts_in_several(&alice));
    assert!(acts_in_several(&Principal::root()) && acts_in_several(&Principal::local()));
}

#[test]
fn reading_follows_the_role() {
    let local = Principal::local();
    for (plural, agent, approver) in [
        ("tools", true, true),
        ("toolcalls", true, true),
        ("artifacts", true, true),
        ("policies", false, true),
        ("mcpservers", false, true),
        ("costs", false, true),
        ("audit", false, true),
        ("tokens", false, false),
    ] {
        let read = Action::Read(Collection::parse(plural).expect("a collection"));
        let by = |role| may(&token("t", role), &read).is_ok();
        assert_eq!(by(Role::Agent), agent, "agent reads {plural}");
        assert_eq!(by(Role::Approver), approver, "approver reads {plural}");
        assert!(by(Role::Admin), "admin reads {plural}");
        assert!(may(&local, &read).is_ok(), "local reads {plural}");
    }
}

#[test]
fn the_upstream_user_is_the_principal_unless_the_namespace_trusts_caller_ids() {
    let alice = token("alice", Role::Agent);
    let jwt_bob = Principal {
        kind: PrincipalKind::Jwt,
        ..token("bob", Role::Agent)
    };
    let with_caller = |caller: Option<&str>| {
        let mut call = call_by(&alice);
        call.spec.caller_id = caller.map(str::to_owned);
        call
    };
    // (principal, callerId, trusted) -> the user, or a refusal naming the setting.
    let cases = [
        (&alice, None, false, Ok("alice")),
        (&jwt_bob, None, false, Ok("bob")),
        (&alice, Some("alice"), false, Ok("alice")),
        (&alice, Some(" "), false, Ok("alice")),
        (&alice, Some("carol"), true, Ok("carol")),
        (&alice, None, true, Ok("alice")),
        (&alice, Some("carol"), false, Err("spec.trustCallerId")),
    ];
    for (by, caller, trusted, expected) in cases {
        let got = upstream_user(by, &with_caller(caller), trusted);
        match (expected, got) {
            (Ok(user), Ok(got)) => assert_eq!(got, user, "{caller:?} {trusted}"),
            (Err(reason), Err(got)) => assert!(got.contains(reason), "{got}"),
            (expected, got) => panic!("{caller:?} {trusted}: {got:?}, expected {expected:?}"),
        }
    }
}

fn standing_by(name: &str, decider: Option<&Principal>) -> StandingApprovalSpec {
    StandingApprovalSpec {
        decision: "approve".to_owned(),
        decided_by: name.to_owned(),
        decider: decider.map(Principal::reference),
        approval_ref: joch_core::ObjectRef::new("c0"),
        rationale: None,
    }
}

#[test]
fn a_standing_decision_never_decides_its_deciders_own_calls() {
    let alice = token("alice", Role::Approver);
    let carol = token("carol", Role::Agent);
    let by_alice = standing_by("alice", Some(&alice));
    assert!(!stands_for(&by_alice, &alice));
    assert!(stands_for(&by_alice, &carol));
    // Another kind of principal of the same name is someone else.
    let jwt_alice = Principal {
        kind: PrincipalKind::Jwt,
        ..alice.clone()
    };
    assert!(stands_for(&by_alice, &jwt_alice));
    // Stored before the decider was: its name stands for it.
    let legacy = standing_by("alice", None);
    assert!(!stands_for(&legacy, &alice));
    assert!(stands_for(&legacy, &carol));
    // The local caller has no identity to compare.
    let local = Principal::local();
    assert!(stands_for(&standing_by("local", Some(&local)), &local));
    assert!(stands_for(&standing_by("local", None), &local));
    // A local decider's name is what it claimed, not a token's identity.
    assert!(stands_for(&standing_by("alice", Some(&local)), &alice));
}

#[test]
fn a_principal_cancels_its_own_calls_and_an_admin_any() {
    let maker = token("maker", Role::Agent);
    let call = call_by(&maker);
    let cancel = |by: &Principal| may(by, &Action::CancelCall(&call));
    assert!(cancel(&maker).is_ok());
    for other in [
        token("other", Role::Agent),
        token("approver", Role::Approver),
    ] {
        assert!(matches!(cancel(&other), Err(EngineError::Forbidden(_))));
    }
    assert!(cancel(&token("admin", Role::Admin)).is_ok());
    assert!(cancel(&Principal::local()).is_ok());
}
