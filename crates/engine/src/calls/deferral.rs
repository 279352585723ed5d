//! Why a call waits, and for what: what the request policies, the tool,
//! a consent or a superseded decision ask of a person.

use std::time::Duration;

use joch_core::approval::PolicyRef;
use joch_core::policy::{ApprovalRouting, UserInput};
use joch_core::{Approval, ApprovalActionKind};

use crate::policies::{Decision, Effect};

/// Why a call waits, and for what.
pub(in crate::calls) struct Deferral {
    pub(in crate::calls) routing: ApprovalRouting,
    pub(in crate::calls) user_input: Option<UserInput>,
    pub(in crate::calls) policy: Option<PolicyRef>,
    pub(in crate::calls) reason: Option<String>,
    pub(in crate::calls) approver_reason: Option<String>,
    /// The authorization URL of a consent the call waits for.
    pub(in crate::calls) consent_url: Option<String>,
}

impl Deferral {
    pub(in crate::calls) fn from_decision(d: &Decision) -> Self {
        let (routing, user_input) = match &d.verdict.effect {
            Effect::Defer(routing) => (routing.clone(), None),
            Effect::RequestUserInput(input) => (ApprovalRouting::default(), Some(input.clone())),
            _ => (ApprovalRouting::default(), None),
        };
        Deferral {
            routing,
            user_input,
            policy: Some(PolicyRef {
                name: d.policy_id.clone(),
                version: d.policy_version.clone(),
            }),
            reason: d.verdict.reason.clone(),
            approver_reason: d.verdict.approver_reason.clone(),
            consent_url: None,
        }
    }

    /// True for a yes/no approval (a user-input request needs a value each time).
    pub(in crate::calls) fn is_approval(&self) -> bool {
        self.user_input.is_none()
    }

    /// The authorization URL of the consent the call waits for, if any.
    pub(in crate::calls) fn consent_url(&self) -> Option<&str> {
        self.consent_url.as_deref()
    }

    pub(in crate::calls) fn policy(&self) -> Option<&PolicyRef> {
        self.policy.as_ref()
    }

    pub(in crate::calls) fn tool_requires_approval() -> Self {
        Deferral {
            routing: ApprovalRouting::default(),
            user_input: None,
            policy: None,
            reason: Some("the tool requires approval".to_owned()),
            approver_reason: None,
            consent_url: None,
        }
    }

    /// The call of `decided` goes back for a new decision, because `why`:
    /// asked as before (the same question, routing and policy), anew.
    pub(in crate::calls) fn again(decided: &Approval, why: String) -> Self {
        let user_input = (decided.spec.action.kind == ApprovalActionKind::UserInput)
            .then(|| serde_json::from_value(decided.spec.payload.get("userInput")?.clone()).ok())
            .flatten();
        Deferral {
            routing: decided.spec.routing.clone(),
            user_input,
            policy: decided.spec.policy_ref.clone(),
            reason: Some(why),
            approver_reason: None,
            consent_url: None,
        }
    }

    /// The call waits for its user's consent at `url`, until `timeout`.
    pub(in crate::calls) fn consent(url: String, reason: String, timeout: Duration) -> Self {
        Deferral {
            routing: ApprovalRouting {
                timeout_seconds: Some(timeout.as_secs()),
                ..ApprovalRouting::default()
            },
            user_input: None,
            policy: None,
            reason: Some(reason),
            approver_reason: None,
            consent_url: Some(url),
        }
    }
}
