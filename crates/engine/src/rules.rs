//! The rulebook: what a principal may do, whatever surface it came through
//! (REST, MCP over HTTP or stdio, hooks, batches, the console, the CLI, the
//! library). Surfaces authenticate and pass the `Principal`; every entry
//! point that reads or changes anything asks the gate ([`may`], with a
//! typed [`Action`]; the role table is `gate.rs`'s). A rule kept in a
//! handler would be forgotten by the next surface.
//!
//! - A principal acts in its own namespace only; others do not exist for it.
//! - Tools outside a principal's tool selector do not exist for it, nor
//!   do their calls and those calls' approvals (`Visibility::sees_call`).
//! - A principal cannot decide a call it made, nor decide at all below the
//!   `approver` role, except when the deciding policy asked the caller's
//!   own user (`askUser`, or a `userInput` value): that decision is
//!   recorded as such (`status.askedUser`).
//! - A standing decision ("approve always", "deny always") never decides a
//!   call made by its own decider: that call waits for a person like any
//!   other ([`stands_for`]). A call it decides records it
//!   (`status.standing`).
//! - A principal cancels the calls it made; an `admin` cancels any call of
//!   its namespace ([`Action::CancelCall`]).
//! - Replaying and resolving a call, accepting an upstream tool's changed
//!   definition, and managing tokens and upstream credentials take the
//!   `admin` role.
//! - A hook-mode call's result is reported by the principal that made it.
//! - Reading: an `agent` reads what it calls with (tools, its calls,
//!   executions, approvals, call contexts, artifacts); an `approver` reads
//!   everything but tokens and credentials; an `admin` reads everything
//!   ([`Action::Read`]).
//!
//! - The end user whose own upstream tokens a call uses is the principal
//!   (a JWT's `sub`, a token's name); the call's `callerId` names them
//!   only where the namespace trusts its callers for that
//!   (`spec.trustCallerId`), else a `callerId` naming someone else is
//!   refused ([`upstream_user`]).
//!
//! The local caller (no authentication configured) has no identity: the
//! rules that compare identities do not apply to it, and a decision is
//! recorded under the name the decider gives.

use joch_core::approval::StandingApprovalSpec;
use joch_core::{Approval, Principal, PrincipalRef, ToolCall, ValidationError};

use crate::EngineError;
use joch_core::ApprovalActionKind;
use joch_core::toolcall::CallMode;

mod gate;
pub(crate) mod host;
mod visibility;

pub use gate::{
    Action, ActionKind, Allowance, Collection, acts_in_several, is_operator, may, may_in, table,
};
pub(crate) use gate::{acts_in, may_touch};
pub(crate) use visibility::{Visibility, sees};

/// Whose decision it is, as recorded on the Approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decider {
    /// `status.decidedBy`: the principal's name, or for the local caller
    /// and an asked user, the name the surface gives.
    pub(crate) name: String,
    /// `status.decider`.
    pub(crate) principal: PrincipalRef,
    /// `status.askedUser`.
    pub(crate) asked_user: bool,
}

/// Who decides on `approval` (of `call`) when `by` does, claiming `claimed`
/// as the decider's name. `for_user`: the surface asked the call's own
/// user (MCP elicitation, an agent's own prompt).
pub(crate) fn decider(
    call: &ToolCall,
    approval: &Approval,
    by: &Principal,
    claimed: &str,
    for_user: bool,
) -> Result<Decider, EngineError> {
    // An answer from the call's own surface (an MCP client's elicitation
    // answer, the agent's prompt) decides only where the call's user was
    // asked: a notice that a person decides elsewhere is no question.
    if for_user && !(asks_user(approval) || call.spec.mode == CallMode::Hook) {
        return Err(EngineError::Forbidden(
            "this approval does not ask the call's user: an approver decides it where it is listed (the approval's URL)".to_owned(),
        ));
    }
    let asked_user = for_user && asks_user(approval);
    if !by.is_authenticated() {
        if claimed.trim().is_empty() {
            return Err(ValidationError::field("approvedBy", "missing field").into());
        }
        return Ok(Decider {
            name: claimed.to_owned(),
            principal: by.reference(),
            asked_user,
        });
    }
    let made_it = call.status.principal.as_ref().is_some_and(|p| by.is(p));
    if asked_user && made_it {
        return Ok(Decider {
            name: claimed.to_owned(),
            principal: by.reference(),
            asked_user,
        });
    }
    if made_it {
        return Err(EngineError::Forbidden(
            "a principal cannot decide on a call it made; another approver must".to_owned(),
        ));
    }
    may(by, &Action::DecideApproval)?;
    Ok(Decider {
        name: by.name.clone(),
        principal: by.reference(),
        asked_user: false,
    })
}

/// True when `standing` may decide a call that `by` makes: never when
/// `by` made the standing decision itself, so that a principal's "approve
/// always" cannot approve its own later calls (a principal cannot decide a
/// call it made). A decision stored without its `decider` is taken as
/// `by`'s when its `decidedBy` is `by`'s name. The local caller has no
/// identity to compare: a standing decision decides its calls.
pub(crate) fn stands_for(standing: &StandingApprovalSpec, by: &Principal) -> bool {
    if !by.is_authenticated() {
        return true;
    }
    let own = match &standing.decider {
        Some(decider) => by.is(decider),
        None => standing.decided_by == by.name,
    };
    !own
}

/// True when the approval's policy asked the caller's own user: an
/// `askUser` routing, a `userInput` value only that user can give, or a
/// consent (only that user may decline it for themselves).
pub(crate) fn asks_user(approval: &Approval) -> bool {
    approval.spec.routing.ask_user
        || matches!(
            approval.spec.action.kind,
            ApprovalActionKind::UserInput | ApprovalActionKind::Consent
        )
}

/// The end user whose own upstream tokens (`oauth2` `perUser`) `call`
/// made by `by` uses: the call's `callerId` where the namespace trusts
/// callers to name their user (`trust_caller_id`), else the principal. A
/// `callerId` that names someone else than an untrusting namespace's
/// principal is refused (the reason is the error), so that one agent's
/// token cannot reach another user's upstream account by naming them.
pub(crate) fn upstream_user(
    by: &Principal,
    call: &ToolCall,
    trust_caller_id: bool,
) -> Result<String, String> {
    match call
        .spec
        .caller_id
        .as_deref()
        .filter(|c| !c.trim().is_empty())
    {
        Some(caller) if trust_caller_id => Ok(caller.to_owned()),
        Some(caller) if caller != by.name => Err(format!(
            "callerId {caller:?} names another user than the caller {:?}, and namespace {:?} does not trust callers to name whose upstream tokens a call uses (spec.trustCallerId)",
            by.name, call.metadata.namespace
        )),
        _ => Ok(by.name.clone()),
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod visibility_tests;
