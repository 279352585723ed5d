//! The checks a call passes before it may run, as an ordered list.
//!
//! Each check is one unit with one signature: it reads and amends the call
//! being admitted ([`Admitting`]) and answers a [`Verdict`]: go on, defer
//! to a person, or refuse (with the decision recorded on the call). The
//! first refusal ends the list. Adding a check is one variant, one arm in
//! [`Check::run`] and one line in the list that needs it.

use super::admitting::{Admitting, Verdict};
use crate::calls::Rejection;
use crate::{Calls, EngineError};

/// One check of the call path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::calls) enum Check {
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
pub(in crate::calls) const ADMISSION: &[Check] = &[
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
pub(in crate::calls) const RESUMPTION: &[Check] = &[Check::RequestPolicies, Check::InputSchema];

impl Check {
    async fn run(self, engine: &Calls, a: &mut Admitting<'_>) -> Result<Verdict, EngineError> {
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
            Check::InputSchema => Ok(Calls::input_schema(a)),
            Check::UpstreamConsent => engine.upstream_consent(a).await,
        }
    }
}

impl Calls {
    /// Runs `checks` in order on the call; answers the refusal that ended
    /// them, if one did. A deferral is left on the call for the next checks.
    pub(in crate::calls) async fn check(
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
