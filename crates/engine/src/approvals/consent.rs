//! Consent approvals: a call whose upstream needs its user's own token
//! waits in `AwaitingApproval` with an Approval of kind `consent`, whose
//! payload holds the authorization URL (`consentUrl`). The user's browser
//! comes back to joch's `/oauth/callback`; the vault exchanges the code,
//! and the approval is decided here like any other: conditionally, so
//! that the call runs once, on the replica that took the callback. A
//! consent declined at the authorization server rejects the call; one that
//! does not come before the deadline ends it with `consent_required`.
//!
//! The callback has no principal: the single-use `state`, bound server-side
//! to the call and the user, is what authorizes it.

use joch_core::approval::ApprovalPhase;
use joch_core::{Principal, ToolCall};
use serde_json::Value;

use super::ApprovalDecision;
use super::Approvals;
use crate::EngineError;
use crate::vault::{ConsentFailed, ConsentGiven};
use joch_core::ApprovalActionKind;

/// What the authorization server sent back to `/oauth/callback`.
#[derive(Debug, Clone, Copy)]
pub enum ConsentReply<'a> {
    /// The user consented: the authorization code, and the response's
    /// `iss` if it had one (RFC 9207).
    Code(&'a str, Option<&'a str>),
    /// The user declined, or the server refused: its `error`.
    Declined(&'a str),
}

fn failed(message: String) -> EngineError {
    EngineError::Refused {
        code: joch_core::RefusalCode::ConsentFailed,
        message,
    }
}

impl Approvals {
    /// Completes the consent `state` names: with a code, the user's token
    /// is kept and the waiting call runs (once, here); declined, the call
    /// ends `Denied`. A state joch did not issue, or used or expired,
    /// changes nothing (`400 invalid_query` on `state`).
    pub async fn oauth_callback(
        &self,
        state: &str,
        reply: ConsentReply<'_>,
    ) -> Result<ConsentGiven, EngineError> {
        let credentials = self
            .inner
            .credentials
            .as_ref()
            .ok_or_else(|| failed("this joch has no token vault".to_owned()))?;
        let unknown = |message: String| EngineError::InvalidQuery {
            parameter: "state",
            message,
        };
        let given = match reply {
            ConsentReply::Code(c, iss) => match credentials.complete_consent(state, c, iss).await {
                Ok(given) => given,
                Err(ConsentFailed::Unknown(e)) => return Err(unknown(e)),
                Err(ConsentFailed::Unavailable(e)) => return Err(failed(e)),
                Err(ConsentFailed::Refused { message, given }) => {
                    // The state is spent: the call would only wait for its
                    // deadline. It ends now, saying why and what to do.
                    let ended = format!(
                        "{message}: call the tool again, and have the user consent at the new consent URL"
                    );
                    self.decide_consent(&given, ApprovalPhase::Rejected, ended)
                        .await?;
                    return Err(failed(message));
                }
            },
            ConsentReply::Declined(error) => {
                let given = credentials
                    .decline_consent(state)
                    .await
                    .map_err(failed)?
                    .ok_or_else(|| {
                        unknown("this consent link is unknown or used already".to_owned())
                    })?;
                let message = format!(
                    "the user declined consent at the authorization server ({error}): call the tool again to ask them again"
                );
                self.decide_consent(&given, ApprovalPhase::Rejected, message)
                    .await?;
                return Ok(given);
            }
        };
        let rationale = "consented at the authorization server".to_owned();
        self.decide_consent(&given, ApprovalPhase::Approved, rationale)
            .await?;
        for call in &given.also {
            let waiting = ConsentGiven {
                call: call.clone(),
                also: Vec::new(),
                ..given.clone()
            };
            let rationale = "their consent for another call serves this one".to_owned();
            self.decide_consent(&waiting, ApprovalPhase::Approved, rationale)
                .await?;
        }
        Ok(given)
    }

    /// The authorization URL the call `name` waits on for its user's
    /// consent, while it waits; for surfaces that relay it (MCP URL-mode
    /// elicitation, `input_required`).
    pub async fn consent_url(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<Option<String>, EngineError> {
        crate::rules::acts_in(by, namespace)?;
        let call: ToolCall = self.call(namespace, name).await?;
        if call.status.phase != joch_core::Phase::AwaitingApproval {
            return Ok(None);
        }
        let approval = self.get(namespace, name).await?;
        let waits = approval.spec.action.kind == ApprovalActionKind::Consent
            && approval.status.phase == ApprovalPhase::Pending;
        Ok(waits
            .then(|| {
                approval
                    .spec
                    .payload
                    .get("consentUrl")
                    .and_then(Value::as_str)
            })
            .flatten()
            .map(str::to_owned))
    }
}

impl Approvals {
    /// Decides the consent approval of `given`'s call, if it still waits,
    /// and carries the decision out. Racing decisions: the first wins.
    async fn decide_consent(
        &self,
        given: &ConsentGiven,
        phase: ApprovalPhase,
        rationale: String,
    ) -> Result<(), EngineError> {
        let mut approval = match self.pending_approval(&given.namespace, &given.call).await {
            Ok(approval) => approval,
            // Decided (its deadline passed): the token stays for the next call.
            Err(EngineError::Refused { .. } | EngineError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        approval.status.phase = phase;
        let approved = phase == ApprovalPhase::Approved;
        if !approved {
            approval.status.message = Some(rationale.clone());
        }
        let decision = ApprovalDecision {
            by: given.user.clone(),
            rationale: Some(rationale),
            ..ApprovalDecision::default()
        };
        let verb = if approved { "consent" } else { "reject" };
        match self.decide(&mut approval, verb, &decision, None).await {
            Err(EngineError::Refused { .. }) => return Ok(()),
            other => other?,
        }
        let carried = self.inner.decided.carry_out(&approval, &decision).await;
        carried.map(drop)
    }

    /// Withdraws the consents under way for a consent approval's call
    /// that will not run on them (rejected, or past its deadline).
    pub(crate) async fn withdraw_consents(&self, approval: &joch_core::Approval) {
        let credentials = self.inner.credentials.as_ref();
        if let (ApprovalActionKind::Consent, Some(credentials)) =
            (approval.spec.action.kind, credentials)
        {
            let meta = &approval.metadata;
            credentials
                .withdraw_consents(&meta.namespace, &meta.name)
                .await;
        }
    }
}
