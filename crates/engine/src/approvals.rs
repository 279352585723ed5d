//! Human approvals: a deferred call waits in `AwaitingApproval` with an
//! `Approval` resource until a person approves, edits or rejects it, or its
//! deadline applies the fallback.
//!
//! Exactly once: deciding updates the Approval conditionally on its
//! `resourceVersion`, so only one decision wins, and the approved call moves
//! `AwaitingApproval → Running` conditionally too, so it runs once even if
//! two replicas (or a decision and a timeout) race.
//!
//! A part with walls, built by the calls part: it stores decisions, and
//! leaves acting on the call to the call path, through the one seam it is
//! built with ([`Decided`], `calls/decided.rs`); it never imports `calls`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use joch_core::approval::PolicyRef;
use joch_core::{Approval, ApprovalPhase, Principal, ToolCall};
use joch_store::{Durability, Store, StoreErrorKind};
use serde_json::Value;

use crate::catalog::Catalog;
use crate::clock::now;
use crate::lists::Lists;
use crate::policies;
use crate::resources::Resources;
use crate::rules::{self, Decider, Visibility};
use crate::signal::Signal;
use crate::telemetry;
use crate::vault::Credentials;
use crate::{EngineError, ListParams, ObjectList};
use joch_core::ApprovalActionKind;

/// What the approvals part needs done with a call once its Approval is
/// decided: the call path carries the decision out. The calls part
/// implements it, and hands it to the approvals part it builds (calls own
/// approvals; approvals hold this seam back, never the calls part itself).
#[async_trait]
pub(crate) trait Decided: Send + Sync {
    /// Carries `approval`'s stored decision (`decision`, as its decider
    /// made it) out on its call, if the call still waits: runs it
    /// (approved), settles it `Denied` (rejected), applies the fallback
    /// (expired at its deadline) or settles it `Skipped` (withdrawn).
    /// Answers the Approval as it waits again when the approved call went
    /// back for a new decision (`calls/decided/binding.rs`).
    async fn carry_out(
        &self,
        approval: &Approval,
        decision: &ApprovalDecision,
    ) -> Result<Option<Approval>, EngineError>;

    /// For the deadline timer of a decided Approval whose call runs on its
    /// caller's retry: how long is left until the retry deadline, or, once
    /// it passed, the call ends `TimedOut` (`not_retried`). `None` when
    /// nothing is left to wait for.
    async fn expire_unretried(&self, approval: &Approval) -> Result<Option<Duration>, EngineError>;
}

/// The approvals part: the Approvals people decide, their deadlines, the
/// inbox and standing decisions. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Approvals {
    inner: Arc<Parts>,
}

/// What the approvals part uses and keeps.
struct Parts {
    store: Arc<dyn Store>,
    catalog: Arc<Catalog>,
    visibility: Visibility,
    lists: Lists,
    /// Where standing decisions are written, through each kind's checks.
    resources: Arc<Resources>,
    /// The token vault, for consents (none without one).
    credentials: Option<Arc<Credentials>>,
    /// This replica's name, recorded on the decisions made here.
    replica: Option<String>,
    /// The call path, which carries decisions out.
    decided: Arc<dyn Decided>,
    /// Approvals (namespace, name) whose deadline timer runs in this
    /// process, so that re-arming (at start, or on taking over a dead
    /// replica's work) starts no second timer.
    armed: Mutex<HashSet<(String, String)>>,
    /// Bumped whenever an Approval opens or is decided (here or, heard from
    /// the store, on another replica), so inboxes re-read at once.
    changed: Signal,
}

/// The parts the approvals part uses, handed to [`Approvals::new`].
pub(crate) struct Needs {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) visibility: Visibility,
    pub(crate) lists: Lists,
    pub(crate) resources: Arc<Resources>,
    pub(crate) credentials: Option<Arc<Credentials>>,
    pub(crate) replica: Option<String>,
}

impl Approvals {
    /// The part over `needs`, carrying decisions out through `decided`.
    pub(crate) fn new(needs: Needs, decided: Arc<dyn Decided>) -> Self {
        let Needs {
            store,
            catalog,
            visibility,
            lists,
            resources,
            credentials,
            replica,
        } = needs;
        let inner = Parts {
            store,
            catalog,
            visibility,
            lists,
            resources,
            credentials,
            replica,
            decided,
            armed: Mutex::default(),
            changed: Signal::default(),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// An Approval opened or was decided.
    pub(crate) fn changed(&self) {
        self.inner.changed.bump();
    }

    fn armed(&self) -> std::sync::MutexGuard<'_, HashSet<(String, String)>> {
        // The set stays consistent under a panic elsewhere: inserts and removes are single calls.
        self.inner
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads a ToolCall for the approvals' own use, whoever asks.
    async fn call(&self, namespace: &str, name: &str) -> Result<ToolCall, EngineError> {
        crate::resources::valid_namespace(namespace)?;
        Ok(self.inner.store.get_object(namespace, name).await?)
    }
}

/// A person's decision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApprovalDecision {
    /// Who decides.
    pub by: String,
    /// Why, for the record.
    pub rationale: Option<String>,
    /// For the model, when rejecting.
    pub message: Option<String>,
    /// New arguments (`edit`): they go through the request hook again.
    pub edited_input: Option<Value>,
    /// The value asked for by a `userInput` requirement.
    pub value: Option<Value>,
    /// Let the decision stand for later calls of the same tool.
    pub always: bool,
    /// The surface asked the call's own user (MCP elicitation, the agent's
    /// own prompt): allowed to the call's maker only where the policy says
    /// `askUser` (see `rules.rs`), and recorded as `status.askedUser`.
    pub for_user: bool,
}

impl Approvals {
    /// Stores an approval's decision, durably; the store appends its audit
    /// entry in the same write.
    pub(crate) async fn store_decided(
        &self,
        approval: &mut Approval,
    ) -> Result<(), joch_store::StoreError> {
        self.inner
            .store
            .update_object(approval, Durability::Sync)
            .await
    }

    /// Creates `approval` (from [`approval_for`](Self::approval_for)) for a
    /// call just recorded `AwaitingApproval`, and arms its deadline.
    pub(crate) async fn open_approval(
        &self,
        mut approval: Approval,
    ) -> Result<Approval, EngineError> {
        self.inner
            .store
            .create_object(&mut approval, Durability::Sync)
            .await?;
        self.opened(&approval);
        Ok(approval)
    }

    /// Stores `approval`, a decided Approval made pending again in place
    /// (an Approval is named by its call), if nobody changed it meanwhile.
    pub(crate) async fn reopen(&self, approval: &mut Approval) -> Result<(), EngineError> {
        self.inner
            .store
            .update_object(approval, Durability::Sync)
            .await?;
        self.opened(approval);
        Ok(())
    }

    /// An Approval waits (again): counted, told to inboxes, its deadline armed.
    fn opened(&self, approval: &Approval) {
        telemetry::approvals_pending(1.0);
        self.changed();
        self.arm_deadline(approval);
    }

    /// Withdraws a pending approval whose call will not run (its batch was
    /// stopped by a denial).
    pub(crate) async fn withdraw_approval(
        &self,
        namespace: &str,
        name: &str,
        reason: &str,
    ) -> Result<(), EngineError> {
        let mut approval = match self.pending_approval(namespace, name).await {
            Ok(approval) => approval,
            Err(EngineError::Refused { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        approval.status.phase = ApprovalPhase::Expired;
        let decision = ApprovalDecision {
            by: "joch".to_owned(),
            rationale: Some(reason.to_owned()),
            ..Default::default()
        };
        match self
            .decide(&mut approval, "withdrawn", &decision, None)
            .await
        {
            Err(EngineError::Refused { .. }) => Ok(()),
            other => other,
        }
    }

    /// Who decides, by the rulebook; the decision is then recorded under
    /// that name.
    async fn decider(
        &self,
        by: &Principal,
        approval: &Approval,
        decision: &mut ApprovalDecision,
    ) -> Result<Decider, EngineError> {
        rules::acts_in(by, &approval.metadata.namespace)?;
        let (namespace, name) = (
            &approval.metadata.namespace,
            &approval.spec.action.tool_call_ref.name,
        );
        rules::may_in(
            by,
            namespace,
            &rules::Action::Read(rules::Collection::ToolCalls),
        )?;
        let call = self.call(namespace, name).await?;
        let call = self.inner.visibility.seen_call(by, namespace, call).await?;
        let decider = rules::decider(&call, approval, by, &decision.by, decision.for_user)?;
        if decision.always && !decider.asked_user {
            rules::may(by, &rules::Action::DecideStanding)?;
        }
        decision.by.clone_from(&decider.name);
        Ok(decider)
    }

    async fn pending_approval(&self, namespace: &str, name: &str) -> Result<Approval, EngineError> {
        let approval = self.get(namespace, name).await?;
        if approval.status.phase != ApprovalPhase::Pending {
            return Err(decided(name, approval.status.phase));
        }
        Ok(approval)
    }

    /// Stores the decision; only the first of racing decisions wins.
    async fn decide(
        &self,
        approval: &mut Approval,
        verb: &str,
        decision: &ApprovalDecision,
        decider: Option<Decider>,
    ) -> Result<(), EngineError> {
        approval.status.decision = Some(verb.to_owned());
        if let Some(decider) = decider {
            approval.status.decider = Some(decider.principal);
            approval.status.asked_user = decider.asked_user;
        }
        approval.status.replica.clone_from(&self.inner.replica);
        approval.status.decided_by = Some(decision.by.clone());
        approval.status.decided_at = Some(now());
        approval.status.rationale = decision.rationale.clone();
        approval.status.always = decision.always && matches!(verb, "approve" | "reject");
        approval.status.decided_under = self.in_force(approval).await?;
        match self.store_decided(approval).await {
            Err(e) if e.kind() == StoreErrorKind::Conflict => {
                return Err(decided(&approval.metadata.name, ApprovalPhase::Approved));
            }
            other => other?,
        }
        telemetry::approvals_pending(-1.0);
        self.changed();
        if let (Some(opened), Some(decided)) = (
            approval.metadata.creation_timestamp,
            approval.status.decided_at,
        ) {
            telemetry::approval_waited(opened.millis_until(decided) as f64 / 1000.0);
        }
        if approval.status.always {
            self.stand_by(approval, verb, decision, Standing::Replace)
                .await?;
        }
        Ok(())
    }

    /// The request policies in force for the approval's call, now.
    async fn in_force(&self, approval: &Approval) -> Result<Vec<PolicyRef>, EngineError> {
        let meta = &approval.metadata;
        let tool = approval.spec.payload["tool"].as_str().unwrap_or_default();
        let policies = self.inner.catalog.policies(&meta.namespace).await?;
        Ok(policies::in_force(&policies, tool, &meta.labels))
    }
}

impl Approvals {
    /// Reads an Approval as `by` may: the approval of a call that does not
    /// exist for `by` (a tool outside its selector) answers as one that
    /// does not exist.
    pub async fn read(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<Approval, EngineError> {
        rules::may_in(
            by,
            namespace,
            &rules::Action::Read(rules::Collection::Approvals),
        )?;
        let approval = self.get(namespace, name).await?;
        if !self.inner.visibility.sees_approval(by, &approval).await? {
            return Err(EngineError::NotFound {
                kind: crate::NotFoundKind::Approval,
                name: name.to_owned(),
            });
        }
        Ok(approval)
    }

    /// [`list`](Self::list) as `by` may read it: the approvals of calls
    /// that do not exist for `by` are left out of the page after it is
    /// read, so a page may be short (even empty) while its `continue`
    /// token still leads on.
    pub async fn read_all(
        &self,
        by: &Principal,
        namespace: &str,
        params: ListParams,
    ) -> Result<ObjectList<Approval>, EngineError> {
        rules::may_in(
            by,
            namespace,
            &rules::Action::Read(rules::Collection::Approvals),
        )?;
        let mut page = self.list(namespace, params).await?;
        if by.tools.is_some() {
            let mut seen = Vec::with_capacity(page.items.len());
            for approval in std::mem::take(&mut page.items) {
                if self.inner.visibility.sees_approval(by, &approval).await? {
                    seen.push(approval);
                }
            }
            page.items = seen;
        }
        Ok(page)
    }

    /// Reads an Approval, whoever asks: for the engine's own use and
    /// callers that asked the rulebook ([`read`](Self::read) asks it).
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Approval, EngineError> {
        crate::resources::valid_namespace(namespace)?;
        Ok(self.inner.store.get_object(namespace, name).await?)
    }

    /// Lists Approvals, newest first; `phase` filters (`Pending`, ...),
    /// whoever asks ([`read_all`](Self::read_all) asks the rulebook).
    pub async fn list(
        &self,
        namespace: &str,
        params: ListParams,
    ) -> Result<ObjectList<Approval>, EngineError> {
        crate::resources::valid_namespace(namespace)?;
        let query = self.inner.lists.query(
            namespace,
            ListParams {
                phase: None,
                ..params.clone()
            },
        )?;
        let mut query = query;
        query.index.phase = params.phase;
        Ok(self.inner.store.list_objects(query).await?)
    }

    /// Approves (or, with `edited_input`, edits; or, for a user-input
    /// request, provides the value). The call then runs in the background.
    ///
    /// Edited arguments are checked before anything is decided: they must
    /// be an object that fits the tool's input schema, else 422
    /// `invalid_resource` naming the problem, and the approval stays
    /// pending. The request policies then see them again, as at admission.
    ///
    /// `by` decides under the rules of `rules.rs`: never on a call it made
    /// (403 `forbidden`), but where its policy asked the caller's user.
    pub async fn approve(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        mut decision: ApprovalDecision,
    ) -> Result<Approval, EngineError> {
        let mut approval = self.pending_approval(namespace, name).await?;
        let decider = self.decider(by, &approval, &mut decision).await?;
        if approval.spec.action.kind == ApprovalActionKind::Consent {
            return Err(EngineError::Refused {
                code: joch_core::RefusalCode::ConsentNotApprovable,
                message: "a consent is given by the user at the authorization server (the approval's consentUrl), not approved; it may be rejected".to_owned(),
            });
        }
        let verb = match (&decision.edited_input, approval.spec.action.kind) {
            (_, ApprovalActionKind::UserInput) if decision.value.is_none() => {
                return Err(EngineError::InvalidDecision(
                    "this approval asks for a value: give one".to_owned(),
                ));
            }
            (_, ApprovalActionKind::UserInput) => "provide",
            (Some(_), _) => "edit",
            (None, _) => "approve",
        };
        if let Some(input) = &decision.edited_input {
            self.check_edit(namespace, &approval, input).await?;
        }
        approval.status.phase = ApprovalPhase::Approved;
        approval.status.edited_input = decision.edited_input.clone();
        approval.status.value = decision.value.clone();
        self.decide(&mut approval, verb, &decision, Some(decider))
            .await?;
        // Gone back for a new decision: what was approved is not what would run.
        let carried = self.inner.decided.carry_out(&approval, &decision).await?;
        Ok(carried.unwrap_or(approval))
    }

    /// Rejects: the call ends `Denied`, and the model gets the message.
    /// Arguments or a value are refused (400 `bad_request`), not dropped.
    pub async fn reject(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        mut decision: ApprovalDecision,
    ) -> Result<Approval, EngineError> {
        let mut approval = self.pending_approval(namespace, name).await?;
        let decider = self.decider(by, &approval, &mut decision).await?;
        if decision.edited_input.is_some() || decision.value.is_some() {
            // Arguments or a value would be recorded beside a rejection
            // that never uses them: the approver meant to approve.
            return Err(EngineError::InvalidDecision(
                "a rejection takes no input or value: approve (or edit) with them".to_owned(),
            ));
        }
        approval.status.phase = ApprovalPhase::Rejected;
        approval.status.message = decision.message.clone();
        self.decide(&mut approval, "reject", &decision, Some(decider))
            .await?;
        self.inner.decided.carry_out(&approval, &decision).await?;
        Ok(approval)
    }
}

fn decided(name: &str, phase: ApprovalPhase) -> EngineError {
    EngineError::Refused {
        code: joch_core::RefusalCode::ApprovalDecided,
        message: format!("approval {name:?} is already {}", phase.as_str()),
    }
}

mod carried;
mod consent;
pub(crate) mod deadline;
mod edit;
mod inbox;
mod pauses;
mod standing;
#[cfg(test)]
mod tests;
mod waiting;

pub(crate) use carried::stored_decision;
pub use consent::ConsentReply;
pub use inbox::InboxItem;
use standing::Standing;
