//! Hook mode: the agent runs the tool itself (a shell, a file editor, a
//! Python function) and asks joch before and tells joch after. The call
//! takes the gateway's path up to the backend: recorded, decided by the
//! same policies, approved, idempotency-checked. Instead of running, it is
//! handed to the agent (`Running`) until the agent reports the result,
//! which then goes through the result hook and settles the record.

use std::time::Duration;

use joch_core::{
    CallError, CallMode, Hook, HookAnswer, Phase, Principal, ToolCall, ToolCallStatus,
};
use joch_store::Durability;
use serde_json::{Map, Value};
use tracing::Instrument;

use crate::Calls;
use crate::EngineError;
use crate::calls::CallOutcome;
use crate::calls::admission::{Admission, Intent};
use crate::calls::execute::Concluding;
use crate::clock::now;
use crate::policies::Facts;
use crate::rules;

/// What joch tells the agent: run it as asked, run it with these
/// arguments (or use this result), or don't.
#[derive(Debug, Clone, PartialEq)]
pub struct HookVerdict {
    /// `allow`, `modify`, `deny`, or `ask` (see [`Deferred::AskAgent`]).
    pub decision: HookAnswer,
    /// Why, when a policy, an approver or joch said so.
    pub reason: Option<String>,
    /// The deciding policy and its version.
    pub policy_id: Option<String>,
    /// Its `spec.version` when it decided.
    pub policy_version: Option<String>,
    /// For `modify`: the arguments to run with (request) or the result to
    /// use (result).
    pub modified: Option<Value>,
    /// The record as it stands after the decision.
    pub call: ToolCall,
}

/// What a hook-mode request that needs a person's approval waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deferred {
    /// The answer waits until an approver decides (or the approval times out).
    Wait,
    /// Answer `ask` at once: the agent asks its own user.
    AskAgent,
}

/// What the agent reports after running the tool.
#[derive(Debug, Clone)]
pub enum HookResult {
    /// The tool's output.
    Output(Value),
    /// The tool failed.
    Failed(CallError),
}

impl Calls {
    async fn hook_request_traced(
        &self,
        by: &Principal,
        namespace: &str,
        call: ToolCall,
        deferred: Deferred,
    ) -> Result<HookVerdict, EngineError> {
        let name = match self
            .admit(by, namespace, call, Intent::Now(Durability::Deferred), None)
            .await?
        {
            Admission::New(recorded) => {
                let name = recorded.call.metadata.name.clone();
                if recorded.call.status.phase != Phase::AwaitingApproval {
                    self.run(*recorded).await?;
                }
                name
            }
            Admission::KeyHeldBy(holder) => {
                // The agent must not run it again: say so, and by which call.
                let earlier = self.key_holder(namespace, &holder).await?;
                let state = if earlier.status.phase.is_terminal() {
                    "already ran"
                } else {
                    "is already running"
                };
                return Ok(HookVerdict {
                    decision: HookAnswer::Deny,
                    reason: Some(format!(
                        "a call with this idempotency key {state} as {holder}; it must not run twice"
                    )),
                    policy_id: None,
                    policy_version: None,
                    modified: earlier.status.output.clone(),
                    call: earlier,
                });
            }
        };
        if deferred == Deferred::AskAgent {
            let call = self.key_holder(namespace, &name).await?;
            if call.status.phase == Phase::AwaitingApproval
                && (!by.is_authenticated()
                    || rules::asks_user(&self.inner.approvals.get(namespace, &name).await?))
            {
                let mut verdict = request_verdict(call);
                verdict.decision = HookAnswer::Ask;
                verdict.reason = Some(format!(
                    "a person must approve this call (approval {name}); the agent's user may"
                ));
                return Ok(verdict);
            }
        }
        let call = self.wait_decided(namespace, &name).await?;
        Ok(request_verdict(call))
    }

    async fn hook_result_now(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        result: HookResult,
    ) -> Result<HookVerdict, EngineError> {
        rules::acts_in(by, namespace)?;
        let mut call = self.record(namespace, name).await?;
        rules::may(by, &rules::Action::ReportResult(&call))?;
        if call.spec.mode == CallMode::Hook && call.status.phase == Phase::AwaitingApproval {
            // Asked in the agent's own prompt, and it ran: its user approved.
            let decision = crate::ApprovalDecision {
                by: call
                    .spec
                    .agent_ref
                    .as_ref()
                    .map_or_else(|| "agent".to_owned(), |a| format!("user of {}", a.name)),
                rationale: Some("approved in the agent's own prompt".to_owned()),
                message: None,
                edited_input: None,
                value: None,
                always: false,
                for_user: true,
            };
            match self
                .inner
                .approvals
                .approve(by, namespace, name, decision)
                .await
            {
                Ok(_) | Err(EngineError::Refused { .. }) => {}
                Err(e) => return Err(e),
            }
            call = self.wait_decided(namespace, name).await?;
        }
        if call.spec.mode != CallMode::Hook {
            return Err(refused(
                joch_core::RefusalCode::NotHookMode,
                format!("call {name:?} was run by joch; it takes no reported result"),
            ));
        }
        match call.status.phase {
            Phase::Running | Phase::Unknown => {}
            phase if phase.is_terminal() => return Ok(result_verdict(call, None)),
            phase => {
                return Err(refused(
                    joch_core::RefusalCode::NotRunning,
                    format!("call {name:?} is {phase:?}: the agent was not allowed to run it yet"),
                ));
            }
        }
        let tool = self.inner.catalog.resolve_tool(namespace, &call).await?;
        let args = call.spec.input.as_object().cloned().unwrap_or_default();
        let policies = self.inner.catalog.policies(namespace).await?;
        let facts = match policies.is_empty() {
            true => None,
            false => {
                let count = self.tool_call_count(&call).await?;
                let mut facts = Facts::request(&call, &tool, &args, count, false);
                facts.detect_input(self.inner.policies.detectors(namespace, &policies).await?);
                Some(facts)
            }
        };
        let schemas = self.inner.catalog.schemas(&tool).ok();
        let latency_ms = call
            .status
            .started_at
            .map(|started| started.millis_until(now()));
        let reported = match result {
            HookResult::Output(output) => Ok(output),
            HookResult::Failed(error) => Err(error),
        };
        let given = reported.as_ref().ok().cloned();
        let outcome = self
            .conclude(
                call,
                &tool,
                Concluding {
                    schemas: schemas.as_deref(),
                    policies: &policies,
                    facts: facts.as_ref(),
                    answers_on_failure: false,
                    latency_ms,
                    text_type: None,
                },
                reported,
            )
            .await?;
        Ok(result_verdict(outcome.into_response(), given))
    }

    /// Gives an allowed hook-mode call to the agent: `Running`, durably,
    /// before the agent hears it may run it.
    pub(in crate::calls) async fn hand_over(
        &self,
        mut call: ToolCall,
    ) -> Result<CallOutcome, EngineError> {
        if call.status.phase != Phase::Running {
            call.transition(Phase::Running)?;
        }
        call.status.attempts += 1;
        call.status.started_at = Some(now());
        self.inner
            .store
            .update_object(&mut call, Durability::Sync)
            .await?;
        self.settled();
        Ok(CallOutcome::stored(call, false))
    }

    /// Waits until nobody is deciding on the call any more.
    async fn wait_decided(&self, namespace: &str, name: &str) -> Result<ToolCall, EngineError> {
        let mut changed = self.inner.settled.subscribe();
        loop {
            let call = self.key_holder(namespace, name).await?;
            if !matches!(call.status.phase, Phase::Pending | Phase::AwaitingApproval) {
                return Ok(call);
            }
            let _ = tokio::time::timeout(Duration::from_millis(500), changed.changed()).await;
        }
    }
}

impl Calls {
    /// `steps/toolCallRequest`: records the call and decides on it. A call
    /// deferred to a person is answered once decided (or timed out). An
    /// allowed call is `Running` when this returns, durably: the agent may
    /// run it.
    pub async fn hook_request(
        &self,
        by: &Principal,
        namespace: &str,
        call: ToolCall,
    ) -> Result<HookVerdict, EngineError> {
        self.hook_request_deferring(by, namespace, call, Deferred::Wait)
            .await
    }

    /// Like [`Calls::hook_request`](crate::Calls::hook_request), but a call that needs a person can be
    /// answered `ask` at once, for an agent that asks its own user
    /// ([`Deferred::AskAgent`]): if the tool then runs, its reported result
    /// approves the Approval in that user's name. With authentication, an
    /// agent's user may decide only where the policy says `askUser` (see
    /// `rules.rs`); any other deferred call waits for an approver.
    pub async fn hook_request_deferring(
        &self,
        by: &Principal,
        namespace: &str,
        mut call: ToolCall,
        deferred: Deferred,
    ) -> Result<HookVerdict, EngineError> {
        call.spec.mode = CallMode::Hook;
        let span = crate::tracing_spans::call_span(namespace, &call);
        let (by, namespace) = (by.clone(), namespace.to_owned());
        self.to_completion("a hook request", move |engine| {
            async move {
                engine
                    .hook_request_traced(&by, &namespace, call, deferred)
                    .await
            }
            .instrument(span)
        })
        .await
    }

    /// `steps/toolCallResult`: settles a hook-mode call with what the agent
    /// reports, through the output schema and the result hook. Reporting
    /// the same call again returns the settled verdict; a call that timed
    /// out waiting (`Unknown`) still takes its late result.
    pub async fn hook_result(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        result: HookResult,
    ) -> Result<HookVerdict, EngineError> {
        let (by, namespace, name) = (by.clone(), namespace.to_owned(), name.to_owned());
        self.to_completion("a hook result", move |engine| async move {
            engine.hook_result_now(&by, &namespace, &name, result).await
        })
        .await
    }
}

fn refused(code: joch_core::RefusalCode, message: String) -> EngineError {
    EngineError::Refused { code, message }
}

/// The last request-hook decision on the record: who decided, and why.
fn last_decision(
    status: &ToolCallStatus,
    hook: Hook,
) -> (Option<String>, Option<String>, Option<String>) {
    status
        .hook_decisions
        .iter()
        .rev()
        .find(|d| d.hook == hook.step())
        .map(|d| {
            (
                d.policy_id.clone(),
                d.policy_version.clone(),
                d.reason.clone(),
            )
        })
        .unwrap_or_default()
}

fn request_verdict(call: ToolCall) -> HookVerdict {
    let (policy_id, policy_version, reason) = last_decision(&call.status, Hook::Request);
    let (decision, reason, modified) = match call.status.phase {
        Phase::Running if call.status.original_input.is_some() => {
            (HookAnswer::Modify, reason, Some(call.spec.input.clone()))
        }
        Phase::Running => (HookAnswer::Allow, reason, None),
        _ => (
            HookAnswer::Deny,
            call.status
                .error
                .as_ref()
                .map(|e| e.message.clone())
                .or(reason),
            None,
        ),
    };
    HookVerdict {
        decision,
        reason,
        policy_id,
        policy_version,
        modified,
        call,
    }
}

/// `given` is the output the agent reported; the answer differs from it
/// when the result hook modified it.
fn result_verdict(call: ToolCall, given: Option<Value>) -> HookVerdict {
    let (policy_id, policy_version, reason) = last_decision(&call.status, Hook::Result);
    let answer = call.status.output.clone();
    let (decision, modified) = match call.status.phase {
        Phase::Denied => (HookAnswer::Deny, None),
        _ if given.is_some() && answer != given => (HookAnswer::Modify, answer),
        _ => (HookAnswer::Allow, None),
    };
    let reason = match decision {
        HookAnswer::Deny => call
            .status
            .error
            .as_ref()
            .map(|e| e.message.clone())
            .or(reason),
        _ => reason,
    };
    HookVerdict {
        decision,
        reason,
        policy_id,
        policy_version,
        modified,
        call,
    }
}

/// `[{name, value}]` (AOS `inputs`) as an argument object.
pub fn named_values(inputs: &[Value]) -> Map<String, Value> {
    inputs
        .iter()
        .filter_map(|input| {
            let name = input.get("name")?.as_str()?;
            Some((
                name.to_owned(),
                input.get("value").cloned().unwrap_or(Value::Null),
            ))
        })
        .collect()
}
