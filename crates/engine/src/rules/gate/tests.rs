use joch_core::token::Role;
use joch_core::{Object, ToolCall};

use super::*;

use crate::rules::tests::{call_by, token};

/// The action of `kind`, about `call` where it names one.
fn action(kind: ActionKind, call: &ToolCall) -> Action<'_> {
    match kind {
        ActionKind::CallTool => Action::CallTool,
        ActionKind::CancelCall => Action::CancelCall(call),
        ActionKind::ReportResult => Action::ReportResult(call),
        ActionKind::CompleteExecution => Action::CompleteExecution,
        ActionKind::DecideApproval => Action::DecideApproval,
        ActionKind::DecideStanding => Action::DecideStanding,
        ActionKind::RelabelCall => Action::RelabelCall,
        ActionKind::ReplayCall => Action::ReplayCall,
        ActionKind::ResolveCall => Action::ResolveCall,
        ActionKind::AcceptToolChange => Action::AcceptToolChange,
        ActionKind::BackTest => Action::BackTest,
        ActionKind::Read(c) => Action::Read(c),
        ActionKind::Write(c) => Action::Write(c),
        ActionKind::ReadMetrics => Action::ReadMetrics,
    }
}

/// What each role may do, written out by hand (not derived from the
/// table it checks): (action, agent, approver, admin) with `y` yes, `o`
/// own calls, `n` no.
const EXPECTED: &[(&str, char, char, char)] = &[
    ("call tools", 'y', 'y', 'y'),
    ("cancel calls", 'o', 'o', 'y'),
    ("report hook results", 'o', 'o', 'y'),
    ("complete executions", 'y', 'y', 'y'),
    ("decide approvals", 'n', 'y', 'y'),
    ("decide approvals always", 'n', 'y', 'y'),
    ("relabel calls", 'n', 'n', 'y'),
    ("replay calls", 'n', 'n', 'y'),
    ("resolve calls", 'n', 'n', 'y'),
    ("accept upstream tool definitions", 'n', 'n', 'y'),
    ("back-test policies", 'n', 'n', 'y'),
    ("read tools", 'y', 'y', 'y'),
    ("read toolcalls", 'y', 'y', 'y'),
    ("read executions", 'y', 'y', 'y'),
    ("read approvals", 'y', 'y', 'y'),
    ("read callcontexts", 'y', 'y', 'y'),
    ("read artifacts", 'y', 'y', 'y'),
    ("read policies", 'n', 'y', 'y'),
    ("read standingapprovals", 'n', 'y', 'y'),
    ("read endpoints", 'n', 'y', 'y'),
    ("read budgets", 'n', 'y', 'y'),
    ("read mcpservers", 'n', 'y', 'y'),
    ("read namespaces", 'n', 'y', 'y'),
    ("read tokens", 'n', 'n', 'y'),
    ("read credentials", 'n', 'n', 'y'),
    ("read audit", 'n', 'y', 'y'),
    ("read costs", 'n', 'y', 'y'),
    ("write tools", 'n', 'n', 'y'),
    ("write executions", 'n', 'n', 'y'),
    ("write policies", 'n', 'n', 'y'),
    ("write standingapprovals", 'n', 'n', 'y'),
    ("write endpoints", 'n', 'n', 'y'),
    ("write budgets", 'n', 'n', 'y'),
    ("write mcpservers", 'n', 'n', 'y'),
    ("write namespaces", 'n', 'n', 'y'),
    ("manage tokens", 'n', 'n', 'y'),
    ("manage credentials", 'n', 'n', 'y'),
    ("read /metrics", 'n', 'n', 'n'),
];

#[test]
fn every_action_for_every_role() {
    let kinds = ActionKind::all();
    assert_eq!(kinds.len(), EXPECTED.len(), "one expectation per action");
    for (kind, (name, agent, approver, admin)) in kinds.into_iter().zip(EXPECTED) {
        assert_eq!(kind.name(), *name);
        for (role, expected) in [
            (Role::Agent, agent),
            (Role::Approver, approver),
            (Role::Admin, admin),
        ] {
            let me = token("me", role);
            let mine = call_by(&me);
            let theirs = call_by(&token("someone-else", Role::Agent));
            let on_mine = may(&me, &action(kind, &mine)).is_ok();
            let on_theirs = may(&me, &action(kind, &theirs)).is_ok();
            let got = match (on_mine, on_theirs) {
                (true, true) => 'y',
                (true, false) => 'o',
                (false, false) => 'n',
                (false, true) => panic!("{name}: another's call but not one's own"),
            };
            assert_eq!(got, *expected, "{} may {name}", role.as_str());
            if let Err(refused) = may(&me, &action(kind, &theirs)) {
                assert!(matches!(refused, EngineError::Forbidden(_)));
            }
        }
        // The operator (local caller, root token) may take every action.
        for operator in [Principal::local(), Principal::root()] {
            let call = call_by(&token("someone-else", Role::Agent));
            assert!(may(&operator, &action(kind, &call)).is_ok(), "{name}");
        }
    }
}

#[test]
fn refusals_say_the_role_and_the_action() {
    let agent = token("bot", Role::Agent);
    let refused = may(&agent, &Action::Read(Collection::Policies)).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "a principal with role agent cannot read policies"
    );
    let refused = may(&agent, &Action::Write(Collection::Tokens)).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "a principal with role agent cannot manage tokens"
    );
}

#[test]
fn a_namespace_bound_principal_acts_in_its_own_only() {
    let admin = token("ops", Role::Admin);
    assert!(may_in(&admin, "default", &Action::Write(Collection::Tools)).is_ok());
    assert!(matches!(
        may_in(&admin, "other", &Action::Read(Collection::Tools)),
        Err(EngineError::NotFound { .. })
    ));
    assert!(may_touch(&admin, "default", "policies", true).is_ok());
    assert!(may_touch(&token("bot", Role::Agent), "default", "policies", false).is_err());
    // A kind that belongs to no collection is the operator's.
    assert!(may_touch(&admin, "default", "consentrequests", false).is_err());
    assert!(may_touch(&Principal::root(), "default", "consentrequests", false).is_ok());
}

#[test]
fn every_resource_kind_has_its_collection() {
    for plural in [
        joch_core::Tool::PLURAL,
        joch_core::ToolCall::PLURAL,
        joch_core::Execution::PLURAL,
        joch_core::Approval::PLURAL,
        joch_core::actions::CallContext::PLURAL,
        joch_core::artifact::Artifact::PLURAL,
        joch_core::Policy::PLURAL,
        joch_core::StandingApproval::PLURAL,
        joch_core::Endpoint::PLURAL,
        joch_core::Budget::PLURAL,
        joch_core::McpServer::PLURAL,
        joch_core::Namespace::PLURAL,
        joch_core::token::ApiToken::PLURAL,
        joch_core::credential::Credential::PLURAL,
    ] {
        assert!(Collection::parse(plural).is_some(), "{plural}");
    }
}

/// docs/identity.md prints the gate's table between two markers.
#[test]
fn the_docs_table_is_the_gates() {
    let docs = include_str!("../../../../../docs/identity.md");
    let start = "<!-- gate table: generated from rules::gate::table(); keep equal -->\n";
    let end = "<!-- end of gate table -->";
    let from = docs.find(start).expect("the table's start marker") + start.len();
    let to = from + docs[from..].find(end).expect("the table's end marker");
    assert_eq!(
        &docs[from..to],
        table(),
        "docs/identity.md's action table differs from the gate; print table() into it"
    );
}
