use std::sync::Arc;

use joch_core::token::Role;
use joch_core::{
    Approval, ErrorCode, Phase, Principal, PrincipalKind, Tool, ToolCall, ToolSelector,
};
use joch_store::Durability;
use serde_json::{Value, json};

use super::admitting::Admitting;
use super::steps::Check;
use crate::calls::Rejection;
use crate::{Engine, EngineError};

/// A call of tool `wire` with idempotency key `k`, named `name` if given.
pub(in crate::calls) fn call(name: Option<&str>) -> ToolCall {
    let mut call = json!({"spec": {
        "toolRef": {"name": "wire"},
        "input": {},
        "sideEffects": {"idempotencyKey": "k"}
    }});
    if let Some(name) = name {
        call["metadata"] = json!({"name": name});
    }
    serde_json::from_value(call).expect("a call")
}

fn approval(name: &str) -> Approval {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "action": {"type": "tool_call", "toolCallRef": {"name": name}},
            "risk": {"level": "external_write", "summary": "in the way"},
            "options": ["approve", "reject"],
            "payload": Value::Null
        }
    }))
    .expect("an approval")
}

/// A call recorded `AwaitingApproval` whose Approval cannot be opened is
/// settled `Failed` at once: not left waiting with nobody able to decide
/// it, nor holding its idempotency key against every retry.
#[tokio::test]
async fn a_call_whose_approval_cannot_be_opened_is_settled_not_stuck() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = crate::engine::test_engine(&dir);
    let by = Principal::local();
    let tool: Tool = serde_json::from_value(json!({
        "metadata": {"name": "wire"},
        "spec": {
            "sideEffects": {"level": "external_write", "requiresApproval": true},
            "backend": {"type": "noop"}
        }
    }))
    .expect("a tool");
    engine
        .resources()
        .create(&Principal::local(), "ns", tool)
        .await
        .expect("the tool");
    // An Approval of the call's name is there already: the call's own
    // cannot be created once the call is recorded.
    let mut squatter = approval("stuck");
    let store = engine.store();
    store
        .create_object(&mut squatter, Durability::Sync)
        .await
        .expect("the squatter");

    let refused = engine.calls().submit(&by, "ns", call(Some("stuck"))).await;
    assert!(refused.is_err(), "{:?}", refused.map(|o| o.record));
    let stored = engine
        .calls()
        .record("ns", "stuck")
        .await
        .expect("recorded");
    assert_eq!(stored.status.phase, Phase::Failed);
    let code = stored.status.error.as_ref().map(|e| e.code.as_str());
    assert_eq!(code, Some("interrupted"));

    let retried = engine
        .calls()
        .submit(&by, "ns", call(None))
        .await
        .expect("a retry gets the settled call, not idempotency_key_in_use");
    assert_eq!(retried.record.metadata.name, "stuck");
    assert_eq!(retried.record.status.phase, Phase::Failed);
}

// The admission checks one at a time (`steps.rs`), in process: each
// refuses, defers or lets through what it guards, and nothing else.

/// A tool `wire` as `spec` says, stored in namespace `ns`.
async fn stored_tool(engine: &Engine, spec: Value) -> Arc<Tool> {
    let tool: Tool =
        serde_json::from_value(json!({"metadata": {"name": "wire"}, "spec": spec})).expect("tool");
    let tool = engine
        .resources()
        .create(&Principal::local(), "ns", tool)
        .await
        .expect("the tool");
    Arc::new(tool)
}

fn call_with(input: Value) -> ToolCall {
    serde_json::from_value(json!({"spec": {"toolRef": {"name": "wire"}, "input": input}}))
        .expect("a call")
}

/// What `checks` answer for `call` of `tool` made by `by`, and the call as
/// they left it.
async fn checked<'a>(
    engine: &Engine,
    by: &'a Principal,
    call: ToolCall,
    tool: Arc<Tool>,
    stopped: Option<&'a str>,
    checks: &[Check],
) -> (Admitting<'a>, Result<Option<Rejection>, EngineError>) {
    let mut call = call;
    call.metadata.namespace = "ns".to_owned();
    call.metadata.name = "c1".to_owned();
    let mut a = Admitting::new(by, call, tool, stopped).expect("admitting");
    let verdict = engine.calls().check(&mut a, checks).await;
    (a, verdict)
}

fn code(rejection: &Option<Rejection>) -> Option<&str> {
    rejection.as_ref().map(|r| r.error.code.as_str())
}

#[tokio::test]
async fn each_check_refuses_only_what_it_guards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = crate::engine::test_engine(&dir);
    let by = Principal::local();
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    let tool = stored_tool(
        &engine,
        json!({"backend": {"type": "noop"}, "inputSchema": schema}),
    )
    .await;
    let good = || call_with(json!({"n": 1}));
    let cases: [(Check, ToolCall, Option<&str>, Option<ErrorCode>); 7] = [
        (Check::WellFormed, good(), None, None),
        (
            Check::WellFormed,
            call_with(json!([1, 2])),
            None,
            Some(ErrorCode::InvalidArguments),
        ),
        (Check::NotStopped, good(), None, None),
        (
            Check::NotStopped,
            good(),
            Some("an earlier call failed"),
            Some(ErrorCode::Skipped),
        ),
        (Check::InputSchema, good(), None, None),
        (
            Check::InputSchema,
            call_with(json!({"n": "one"})),
            None,
            Some(ErrorCode::InputSchemaViolation),
        ),
        (Check::RateLimit, good(), None, None),
    ];
    for (check, call, stopped, expected) in cases {
        let mut steps = vec![Check::ToolConfig];
        steps.push(check);
        let (_, verdict) = checked(&engine, &by, call, tool.clone(), stopped, &steps).await;
        let verdict = verdict.expect("checked");
        let expected = expected.map(|c: ErrorCode| c.as_str());
        assert_eq!(code(&verdict), expected, "{check:?} stopped {stopped:?}");
    }
}

#[tokio::test]
async fn a_tool_requiring_approval_defers_and_a_broken_one_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = crate::engine::test_engine(&dir);
    let by = Principal::local();
    let tool = stored_tool(
        &engine,
        json!({"backend": {"type": "noop"}, "sideEffects": {"level": "external_write", "requiresApproval": true}}),
    )
    .await;
    let (a, verdict) = checked(
        &engine,
        &by,
        call_with(json!({})),
        tool.clone(),
        None,
        &[Check::ToolApproval],
    )
    .await;
    assert!(verdict.expect("checked").is_none());
    assert!(a.deferral.as_ref().is_some_and(|d| d.is_approval()));

    let mut broken = Tool::clone(&tool);
    broken.spec.input_schema = json!({"type": 12});
    let (_, verdict) = checked(
        &engine,
        &by,
        call_with(json!({})),
        Arc::new(broken),
        None,
        &[Check::ToolConfig],
    )
    .await;
    assert_eq!(
        code(&verdict.expect("checked")),
        Some(ErrorCode::InvalidToolConfig.as_str())
    );
}

#[tokio::test]
async fn a_hidden_tool_is_unknown_to_its_caller() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = crate::engine::test_engine(&dir);
    let tool = stored_tool(&engine, json!({"backend": {"type": "noop"}})).await;
    let crm = Principal {
        kind: PrincipalKind::Token,
        name: "crm".to_owned(),
        namespaces: joch_core::Namespaces::one("ns"),
        role: Role::Agent,
        tools: Some(ToolSelector {
            names: vec!["crm.*".to_owned()],
            labels: None,
        }),
        presented: Default::default(),
    };
    let (_, verdict) = checked(
        &engine,
        &crm,
        call_with(json!({})),
        tool.clone(),
        None,
        &[Check::Visible],
    )
    .await;
    assert!(
        matches!(
            verdict,
            Err(EngineError::NotFound {
                kind: crate::NotFoundKind::Tool,
                ..
            })
        ),
        "{:?}",
        verdict.err()
    );
    let refused = engine.calls().record("ns", "c1").await.expect("recorded");
    assert_eq!(
        refused.status.phase,
        Phase::Denied,
        "the attempt is on the ledger"
    );

    let mut hooked = call_with(json!({}));
    hooked.spec.mode = joch_core::CallMode::Hook;
    let (_, verdict) = checked(&engine, &crm, hooked, tool, None, &[Check::Visible]).await;
    assert_eq!(
        code(&verdict.expect("checked")),
        Some(ErrorCode::ToolNotFound.as_str())
    );
}

#[tokio::test]
async fn rate_limits_and_policies_refuse_with_their_decision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = crate::engine::test_engine(&dir);
    let by = Principal::local();
    let tool = stored_tool(&engine, json!({"backend": {"type": "noop"}})).await;
    let settings: joch_core::Namespace = serde_json::from_value(json!({
        "metadata": {"name": "ns"},
        "spec": {"rateLimits": [{"name": "slow", "per": "namespace", "callsPerMinute": 1, "burst": 1}]}
    }))
    .expect("settings");
    engine
        .resources()
        .put_namespace(&by, "ns", settings)
        .await
        .expect("the settings");
    let mut codes = Vec::new();
    for _ in 0..2 {
        let (a, verdict) = checked(
            &engine,
            &by,
            call_with(json!({})),
            tool.clone(),
            None,
            &[Check::RateLimit],
        )
        .await;
        let verdict = verdict.expect("checked");
        if verdict.is_some() {
            let decision = a.call.status.hook_decisions.last().expect("a decision");
            assert_eq!(decision.policy_id.as_deref(), Some("ratelimit/slow"));
        }
        codes.push(code(&verdict).map(str::to_owned));
    }
    assert_eq!(
        codes,
        [None, Some(ErrorCode::RateLimited.as_str().to_owned())]
    );

    let policy: joch_core::Policy = serde_json::from_value(json!({
        "metadata": {"name": "no-wires"},
        "spec": {"version": "1", "rules": [
            {"when": {"tool.name": "wire"}, "action": {"deny": {}}, "reason": "no wires today"}
        ]}
    }))
    .expect("a policy");
    engine
        .resources()
        .create(&by, "ns", policy)
        .await
        .expect("the policy");
    let (a, verdict) = checked(
        &engine,
        &by,
        call_with(json!({})),
        tool,
        None,
        &[Check::RequestPolicies],
    )
    .await;
    let verdict = verdict.expect("checked");
    assert_eq!(verdict.as_ref().map(|r| r.phase), Some(Phase::Denied));
    assert_eq!(
        verdict.as_ref().map(|r| r.error.message.as_str()),
        Some("no wires today")
    );
    let decision = a.call.status.hook_decisions.last().expect("a decision");
    assert_eq!(decision.policy_id.as_deref(), Some("no-wires"));
}
