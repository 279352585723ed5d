//! The rulebook: what a principal may do, whatever surface it came through
//! (REST, MCP over HTTP or stdio, hooks, batches, the console, the CLI, the
//! library). Surfaces authenticate and pass the `Principal`; every entry
//! point that reads or changes anything asks the gate ([`may`], with a
//! typed [`Action`]; the role table is `gate.rs`'s). A rule kept in a
//! handler would be forgotten by the next surface.
//!
//! - A principal acts in its own namespace only; others do not exist for it.
//! - Tools outside a principal's tool selector do not exist for it, nor
//!   do their calls and those calls' approvals (`Engine::sees_call`).
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
use joch_core::{
    Approval, LabelSelector, Principal, PrincipalKind, PrincipalRef, Tool, ToolCall,
    ValidationError,
};

use crate::EngineError;
use crate::policy::evaluate::glob_matches;
use joch_core::ApprovalActionKind;
use joch_core::toolcall::CallMode;

mod gate;

pub(crate) use gate::may_touch;
pub use gate::{Action, ActionKind, Allowance, Collection, may, may_in, table};

/// Refuses a principal bound to another namespace, as if the namespace's
/// resources did not exist.
pub(crate) fn acts_in(principal: &Principal, namespace: &str) -> Result<(), EngineError> {
    if principal.namespaces.contains(namespace) {
        return Ok(());
    }
    Err(EngineError::NotFound {
        kind: "Namespace".to_owned(),
        name: namespace.to_owned(),
    })
}

/// True when `principal` acts in more than one namespace (the root token
/// and the local caller act in every one; a JWT may claim several), so
/// that a surface showing one namespace at a time offers it the others.
pub fn acts_in_several(principal: &Principal) -> bool {
    principal.namespaces.are_several()
}

/// True when `tool` exists for `principal`: it matches one of the
/// selector's name globs (if any) and its label selector (if any).
pub(crate) fn sees(principal: &Principal, tool: &Tool) -> bool {
    let Some(selector) = &principal.tools else {
        return true;
    };
    let named = selector.names.is_empty()
        || selector
            .names
            .iter()
            .any(|glob| glob_matches(glob, &tool.metadata.name));
    let labelled = selector.labels.as_deref().is_none_or(|text| {
        LabelSelector::parse(text).is_ok_and(|s| s.matches(&tool.metadata.labels))
    });
    named && labelled
}

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

/// The operator: whoever started `joch serve`, i.e. the local caller (no
/// authentication) or the root token. Only the operator decides what runs
/// on joch's host and what it reads there, and reads what concerns every
/// namespace at once.
pub fn is_operator(by: &Principal) -> bool {
    matches!(by.kind, PrincipalKind::Local | PrincipalKind::Root)
}

impl crate::Engine {
    /// True when the namespace's tool `name` exists for `by`. A tool that
    /// does not exist is seen only by a principal without a selector (its
    /// answer is then the usual `tool_not_found`).
    pub(crate) async fn sees_tool(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<bool, EngineError> {
        if by.tools.is_none() {
            return Ok(true);
        }
        match self.inner.catalog.tool(namespace, name).await {
            Ok(tool) => Ok(sees(by, &tool)),
            Err(joch_store::StoreError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// True when the ToolCall `call` exists for `by`: when the tool it
    /// records (by name) exists for `by` ([`sees_tool`](Self::sees_tool),
    /// which reads the Tool for its labels). A call of a tool that no
    /// longer exists is seen only by a principal without a selector. A
    /// call of an artifact tool shows another call's content: it is seen
    /// when the call it read (`callId`) is; without one, as a missing
    /// tool's call.
    pub(crate) async fn sees_call(
        &self,
        by: &Principal,
        namespace: &str,
        call: &ToolCall,
    ) -> Result<bool, EngineError> {
        if by.tools.is_none() {
            return Ok(true);
        }
        if !call.spec.from_artifact_tool {
            return self.sees_tool(by, namespace, call.tool_name()).await;
        }
        let read = call
            .spec
            .input
            .as_object()
            .and_then(|args| joch_core::artifact_tools::call_id(args).ok());
        let Some(read) = read else {
            return Ok(false);
        };
        match self
            .inner
            .store
            .get_object::<ToolCall>(namespace, read)
            .await
        {
            Ok(target) if !target.spec.from_artifact_tool => {
                self.sees_tool(by, namespace, target.tool_name()).await
            }
            Ok(_) | Err(joch_store::StoreError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// True when `approval` exists for `by`: when the call it asks about
    /// does ([`sees_call`](Self::sees_call)); an approval whose call the
    /// ledger lost is seen only by a principal without a selector.
    pub(crate) async fn sees_approval(
        &self,
        by: &Principal,
        approval: &Approval,
    ) -> Result<bool, EngineError> {
        if by.tools.is_none() {
            return Ok(true);
        }
        let namespace = &approval.metadata.namespace;
        let name = &approval.spec.action.tool_call_ref.name;
        match self
            .inner
            .store
            .get_object::<ToolCall>(namespace, name)
            .await
        {
            Ok(call) => self.sees_call(by, namespace, &call).await,
            Err(joch_store::StoreError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Keeps of `calls` those that exist for `by` ([`sees_call`](Self::sees_call)),
    /// asking once per tool name.
    pub(crate) async fn keep_seen_calls(
        &self,
        by: &Principal,
        namespace: &str,
        calls: Vec<ToolCall>,
    ) -> Result<Vec<ToolCall>, EngineError> {
        if by.tools.is_none() {
            return Ok(calls);
        }
        let mut tools = std::collections::HashMap::<String, bool>::new();
        let mut seen = Vec::with_capacity(calls.len());
        for call in calls {
            let visible = match (call.spec.from_artifact_tool, tools.get(call.tool_name())) {
                (false, Some(known)) => *known,
                (false, None) => {
                    let known = self.sees_tool(by, namespace, call.tool_name()).await?;
                    tools.insert(call.tool_name().to_owned(), known);
                    known
                }
                (true, _) => self.sees_call(by, namespace, &call).await?,
            };
            if visible {
                seen.push(call);
            }
        }
        Ok(seen)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod visibility_tests;
