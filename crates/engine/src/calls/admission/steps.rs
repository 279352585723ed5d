//! The checks a call passes before it may run, as an ordered list.
//!
//! Each check is one unit with one signature: it reads and amends the call
//! being admitted ([`Admitting`]) and answers a [`Verdict`]: go on, defer
//! to a person, or refuse (with the decision recorded on the call). The
//! first refusal ends the list. Adding a check is one variant, one arm in
//! [`Check::run`] and one line in the list that needs it.

use std::sync::Arc;

use joch_core::normalize::normalize_args;
use joch_core::{
    CallSideEffects, DecisionKind, Policy, Principal, Tool, ToolCall, ToolCallStatus, checksum,
};
use serde_json::{Map, Value};

use crate::approvals::Deferral;
use crate::calls::idempotency;
use crate::calls::{Recorded, Rejection};
use crate::catalog::schema::Compiled;
use crate::policy::Facts;
use crate::{Engine, EngineError};

/// What a check may answer.
pub(crate) enum Verdict {
    /// The call goes on to the next check.
    Continue,
    /// A person decides before it runs; later checks still apply.
    Defer(Deferral),
    /// The call will not run; no later check runs.
    Reject(Rejection),
}

/// One check of the call path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// The principal's tool selector shows the tool.
    Visible,
    /// The input is an object, or a JSON string of one.
    WellFormed,
    /// The call's batch has not stopped.
    NotStopped,
    /// The tool's upstream definition has not drifted into quarantine.
    NotQuarantined,
    /// The namespace's rate limits leave room for it.
    RateLimit,
    /// Its budgets leave room for it.
    Budget,
    /// The request policies allow it (or modify it, or defer it).
    RequestPolicies,
    /// A tool marked `requiresApproval` waits for a person.
    ToolApproval,
    /// A standing decision answers for the person.
    StandingDecision,
    /// The tool's schemas compile.
    ToolConfig,
    /// The (possibly modified) input matches the tool's `inputSchema`.
    InputSchema,
    /// The call's user has a token for each upstream taking per-user
    /// tokens, or the call waits for their consent.
    UpstreamConsent,
}

/// The checks a new call passes, in order.
pub(crate) const ADMISSION: &[Check] = &[
    Check::Visible,
    Check::WellFormed,
    Check::NotStopped,
    Check::NotQuarantined,
    Check::RateLimit,
    Check::Budget,
    Check::RequestPolicies,
    Check::ToolApproval,
    Check::StandingDecision,
    Check::ToolConfig,
    Check::InputSchema,
    Check::UpstreamConsent,
];

/// The checks an approved call passes again just before it runs, with
/// the arguments as approved, edited or completed: the request policies in
/// force then (a deny wins, modifications apply, a defer is satisfied by the
/// approval) and the input schema.
pub(crate) const RESUMPTION: &[Check] = &[Check::RequestPolicies, Check::InputSchema];

/// A call on its way through the checks.
pub(crate) struct Admitting<'a> {
    /// Who makes the call; `None` for a call admitted before, resumed.
    pub(crate) by: Option<&'a Principal>,
    pub(crate) call: ToolCall,
    pub(crate) tool: Arc<Tool>,
    /// The arguments, normalised and possibly modified by policies.
    pub(crate) args: Map<String, Value>,
    /// The idempotency key the call claims, if any.
    pub(crate) key: Option<String>,
    /// Why the input is not an object, and what was sent instead.
    pub(crate) malformed: Option<(String, Value)>,
    /// Why the call's batch stopped before it.
    pub(crate) stopped: Option<&'a str>,
    /// The namespace's policies, once the request policies ran.
    pub(crate) policies: Arc<Vec<Policy>>,
    /// The tool's compiled schemas, once they compiled.
    pub(crate) schemas: Option<Arc<Compiled>>,
    /// What the request policies saw, for the result hook.
    pub(crate) facts: Option<Facts>,
    pub(crate) deferral: Option<Deferral>,
    /// What the request hook decided, for the `policy_decision` event.
    pub(crate) decided: Option<(DecisionKind, Option<String>)>,
    /// A person approved the call already: a policy's defer is satisfied.
    pub(crate) approved: bool,
}

impl<'a> Admitting<'a> {
    /// Normalises the input and fills in what the record says of the call
    /// before any check: its checksum, the tool version, the principal,
    /// its side effects and idempotency key.
    pub(crate) fn new(
        by: &'a Principal,
        mut call: ToolCall,
        tool: Arc<Tool>,
        stopped: Option<&'a str>,
    ) -> Result<Self, EngineError> {
        let mut malformed = None;
        let args = match std::mem::take(&mut call.spec.input) {
            Value::Object(args) => args,
            other => normalize_args(other.clone()).unwrap_or_else(|e| {
                malformed = Some((e.to_string(), other));
                Map::new()
            }),
        };
        let key = idempotency::key_of(&call, &tool, &args)?;
        call.status = ToolCallStatus {
            checksum: checksum(call.tool_name(), &args),
            // An unregistered tool (hook mode) has no version.
            tool_version: Some(tool.metadata.resource_version.clone()).filter(|v| !v.is_empty()),
            principal: Some(by.reference()),
            ..Default::default()
        };
        let effects = &tool.spec.side_effects;
        call.spec.side_effects = Some(CallSideEffects {
            level: effects.level,
            idempotent: effects.idempotent,
            idempotency_key: key.clone(),
        });
        Ok(Admitting {
            by: Some(by),
            call,
            tool,
            args,
            key,
            malformed,
            stopped,
            policies: Arc::default(),
            schemas: None,
            facts: None,
            deferral: None,
            decided: None,
            approved: false,
        })
    }
}

impl<'a> Admitting<'a> {
    /// An approved call, with its arguments as approved, edited or
    /// completed, on its way through [`RESUMPTION`]'s checks.
    pub(crate) fn resumed(
        call: ToolCall,
        tool: Arc<Tool>,
        args: Map<String, Value>,
        policies: Arc<Vec<Policy>>,
        schemas: Option<Arc<Compiled>>,
    ) -> Self {
        Admitting {
            by: None,
            call,
            tool,
            args,
            key: None,
            malformed: None,
            stopped: None,
            policies,
            schemas,
            facts: None,
            deferral: None,
            decided: None,
            approved: true,
        }
    }
}

impl Admitting<'_> {
    /// The `resourceVersion` of the tool called (none for an unregistered
    /// tool in hook mode).
    pub(crate) fn tool_version(&self) -> Option<&str> {
        Some(self.tool.metadata.resource_version.as_str()).filter(|v| !v.is_empty())
    }

    /// The digest of the call as it would run now (`status.runDigest`).
    pub(crate) fn run_digest(&self) -> String {
        joch_core::run_digest(
            self.call.tool_name(),
            self.tool_version(),
            &self.args,
            self.call.status.principal.as_ref(),
        )
    }

    /// The call as execution takes it, settling with `rejection` if set;
    /// one that will run records the digest of what runs.
    pub(crate) fn into_recorded(mut self, rejection: Option<Rejection>) -> Recorded {
        let deferred =
            !self.approved && self.call.status.phase == joch_core::Phase::AwaitingApproval;
        if rejection.is_none() && !deferred {
            self.call.status.run_digest = Some(self.run_digest());
            self.call.status.tool_version = self.tool_version().map(str::to_owned);
        }
        Recorded {
            call: self.call,
            tool: self.tool,
            args: self.args,
            schemas: self.schemas,
            rejection,
            policies: self.policies,
            facts: self.facts,
        }
    }
}

impl Check {
    async fn run(self, engine: &Engine, a: &mut Admitting<'_>) -> Result<Verdict, EngineError> {
        match self {
            Check::Visible => engine.visible(a).await,
            Check::WellFormed => Ok(super::checks::well_formed(a)),
            Check::NotStopped => Ok(super::checks::not_stopped(a)),
            Check::NotQuarantined => engine.not_quarantined(a).await,
            Check::RateLimit => engine.within_rate_limit(a).await,
            Check::Budget => engine.within_budget(a).await,
            Check::RequestPolicies => engine.request_policies(a).await,
            Check::ToolApproval => Ok(super::checks::tool_approval(a)),
            Check::StandingDecision => engine.standing(a).await,
            Check::ToolConfig => Ok(engine.tool_config(a)),
            Check::InputSchema => Ok(Engine::input_schema(a)),
            Check::UpstreamConsent => engine.upstream_consent(a).await,
        }
    }
}

impl Engine {
    /// Runs `checks` in order on the call; answers the refusal that ended
    /// them, if one did. A deferral is left on the call for the next checks.
    pub(crate) async fn check(
        &self,
        a: &mut Admitting<'_>,
        checks: &[Check],
    ) -> Result<Option<Rejection>, EngineError> {
        for check in checks {
            match check.run(self, a).await? {
                Verdict::Continue => {}
                Verdict::Defer(deferral) => a.deferral = Some(deferral),
                Verdict::Reject(rejection) => return Ok(Some(rejection)),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_call_passes_every_check_once() {
        let all = [
            Check::Visible,
            Check::WellFormed,
            Check::NotStopped,
            Check::NotQuarantined,
            Check::RateLimit,
            Check::Budget,
            Check::RequestPolicies,
            Check::ToolApproval,
            Check::StandingDecision,
            Check::ToolConfig,
            Check::InputSchema,
            Check::UpstreamConsent,
        ];
        for check in all {
            let times = ADMISSION.iter().filter(|c| **c == check).count();
            assert_eq!(times, 1, "{check:?} is in ADMISSION {times} times");
        }
        assert_eq!(ADMISSION.len(), all.len());
    }

    #[test]
    fn the_order_keeps_what_each_check_relies_on() {
        let at = |check| ADMISSION.iter().position(|c| *c == check).unwrap();
        // A hidden tool is refused as unknown before anything about the
        // call is judged, so that no answer tells it exists.
        assert_eq!(at(Check::Visible), 0);
        // Policies decide on arguments that are an object, and may modify
        // them: the schema checks what the tool will receive.
        assert!(at(Check::WellFormed) < at(Check::RequestPolicies));
        assert!(at(Check::RequestPolicies) < at(Check::InputSchema));
        // A standing decision answers a deferral, which the policies and
        // the tool's requiresApproval make.
        assert!(at(Check::ToolApproval) < at(Check::StandingDecision));
        // A consent is asked for last: a call refused or awaiting a person
        // leaves no consent under way.
        assert_eq!(at(Check::UpstreamConsent), ADMISSION.len() - 1);
        // Resumed calls were admitted already: what may have changed while
        // they waited (the policies, the arguments) is checked again.
        assert!(!RESUMPTION.contains(&Check::ToolApproval));
        assert_eq!(RESUMPTION, &[Check::RequestPolicies, Check::InputSchema]);
    }
}
