//! The front of the call path: admit a call, decide on it, record it.
//!
//! Durability rule: the write that immediately precedes a side effect is
//! synced, and so is the write that precedes an answer to the caller. Writes
//! commit in order, so syncing one makes all earlier ones durable too; every
//! other write may ride along unsynced. A read-only or idempotent call thus
//! costs one sync (its result), a risky call two (Running, then its result),
//! and both share each sync with every other call in flight (group commit).
//!
//! A call whose caller waits for its outcome and that claims no key skips
//! the `Pending` write: it is written twice (`Running`, synced before its
//! side effect, then settled), or once, when it settles, if it will not
//! run or its tool may safely run twice: see [`Intent`].

mod admitting;
mod approval;
mod checks;
mod consent;
mod policies;
mod steps;
#[cfg(test)]
pub(in crate::calls) mod tests;

use joch_core::{
    Approval, CallApproval, CallError, ErrorCode, EventKind, Object, Phase, Principal, Tool,
    ToolCall,
};
use joch_store::{Durability, StoreError, StoreErrorKind};
use serde_json::{Value, json};

pub(in crate::calls) use admitting::Admitting;
pub(in crate::calls) use steps::RESUMPTION;

use crate::calls::Recorded;
use crate::calls::idempotency;
use crate::resources::admit;
use crate::rules;
use crate::{Calls, EngineError};
use steps::ADMISSION;

/// When a call's record is first written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::calls) enum Intent {
    /// At admission, with this durability: the caller reads the record
    /// back before the call ends (`submit`), or the call must be stored
    /// before anything else happens (hook mode).
    Now(Durability),
    /// The caller waits for the outcome. A call that claims no key is
    /// first written as it runs: a tool that must not run twice as
    /// `Running`, synced before its side effect (its durable intent); one
    /// that may safely run again, or a call that will not run, when it
    /// settles, or as `Running` once it has run for the engine's
    /// `intent_grace` (so a slow call can be seen, and found after a
    /// crash). A call that claims a key, or waits for a decision, is
    /// written at admission, unsynced.
    WhenSettled,
}

/// Either a new record, or the call already holding the idempotency key.
pub(in crate::calls) enum Admission {
    New(Box<Recorded>),
    KeyHeldBy(String),
}

impl Calls {
    /// Resolves the tool, runs the admission checks (request policies
    /// included), claims the idempotency key, and stores the call
    /// (`Pending`, or `AwaitingApproval` with its Approval). `stopped` says
    /// why the call's batch stopped before it: the call is recorded skipped.
    pub(in crate::calls) async fn admit(
        &self,
        by: &Principal,
        namespace: &str,
        mut call: ToolCall,
        intent: Intent,
        stopped: Option<&str>,
    ) -> Result<Admission, EngineError> {
        rules::may_in(by, namespace, &rules::Action::CallTool)?;
        let named_by_caller = !call.metadata.name.is_empty();
        let minted = !named_by_caller || self.inner.minted.take(&call.metadata.name);
        if !named_by_caller {
            call.metadata.name = crate::clock::new_call_name();
            crate::tracing_spans::record_call_id(&call.metadata.name);
        }
        let name = call.metadata.name.clone();
        let admitted = self
            .admit_named(by, namespace, call, intent, stopped, minted)
            .await;
        // The store went away while the call was being written: the write
        // may have landed although its answer was lost, leaving a `Pending`
        // record that no task of this replica runs, and a key that a retry
        // would wait on for ever. Reconciled once the store is back.
        if let Err(EngineError::Store(e)) = &admitted
            && e.kind() == StoreErrorKind::Unavailable
        {
            self.reconcile_when_back(namespace.to_owned(), name);
        }
        admitted
    }

    /// [`admit`](Self::admit), for a call with its name.
    async fn admit_named(
        &self,
        by: &Principal,
        namespace: &str,
        mut call: ToolCall,
        intent: Intent,
        stopped: Option<&str>,
        minted: bool,
    ) -> Result<Admission, EngineError> {
        // Set by the store when it writes the call: empty means not yet written.
        call.metadata.resource_version.clear();
        admit(namespace, &mut call, None)?;
        // Only joch marks a call as an artifact tool's (see artifact_tools.rs).
        call.spec.from_artifact_tool = false;
        let tool = self.inner.catalog.resolve_tool(namespace, &call).await?;
        let mut a = Admitting::new(by, call, tool, stopped)?;
        let rejection = self.check(&mut a, ADMISSION).await?;
        if a.schemas.is_none() {
            a.schemas = self.inner.catalog.schemas(&a.tool).ok();
        }
        a.record_input();
        let (deferral, decided) = (a.deferral.take(), a.decided.take());
        let consent_url = deferral
            .as_ref()
            .and_then(|d| d.consent_url().map(str::to_owned));
        // Its Approval, deadline included, is made before anything is
        // written: a deadline that cannot be kept refuses the call unrecorded.
        let approval = match deferral {
            Some(deferral) if rejection.is_none() => Some(self.approval_for(&a, deferral)?),
            _ => None,
        };
        let awaits_approval = approval.is_some();
        // A paused call is synced: a person may take hours over it.
        let durability = match intent {
            _ if awaits_approval => Durability::Sync,
            Intent::Now(durability) => durability,
            Intent::WhenSettled => Durability::Deferred,
        };
        let call = &mut a.call;
        if awaits_approval {
            call.transition(Phase::AwaitingApproval)?;
            call.spec.approval = Some(CallApproval {
                required: true,
                status: Some("pending".to_owned()),
                consent_url,
                ..Default::default()
            });
        }
        call.status.replica.clone_from(&self.inner.settings.replica);
        let written_later = intent == Intent::WhenSettled
            && a.key.is_none()
            && !awaits_approval
            // A name the caller chose may be taken: refused before anything runs.
            && (minted || self.name_is_free(call).await?);
        if !written_later {
            let key = a.key.take();
            if let Some(holder) = self.store_admitted(call, &a.tool, key, durability).await? {
                return Ok(Admission::KeyHeldBy(holder));
            }
        }
        if let Some((action, reason)) = decided {
            let decision = json!({"action": action, "reason": reason});
            self.inner
                .events
                .emit_for(call, EventKind::PolicyDecision, decision)
                .await?;
        }
        if let Some(approval) = approval {
            self.pause(call, approval).await?;
        }
        Ok(Admission::New(Box::new(a.into_recorded(rejection))))
    }

    /// Stores an admitted call, claiming its idempotency key if it has one;
    /// answers the call that holds the key already, for the same arguments.
    async fn store_admitted(
        &self,
        call: &mut ToolCall,
        tool: &Tool,
        key: Option<String>,
        durability: Durability,
    ) -> Result<Option<String>, EngineError> {
        let store = &self.inner.store;
        let created = match key {
            None => store.create_object(call, durability).await,
            Some(key) => {
                let window = self.idempotency_window(&call.metadata.namespace).await?;
                let claim = idempotency::claim(tool, key, &call.status.checksum, window);
                store.create_object_claimed(call, claim, durability).await
            }
        };
        match created {
            Ok(()) => Ok(None),
            Err(StoreError::KeyClaimed {
                call: holder,
                checksum,
            }) if checksum == call.status.checksum => Ok(Some(holder)),
            Err(StoreError::KeyClaimed { call: holder, .. }) => {
                Err(EngineError::IdempotencyKeyReused { call: holder })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Opens the Approval of a deferred call and tells its followers. A
    /// call whose Approval cannot be opened is settled `Failed`: left
    /// `AwaitingApproval`, nobody could decide it and its key would hold
    /// retries off until its window ends.
    async fn pause(&self, call: &ToolCall, approval: Approval) -> Result<(), EngineError> {
        let approval = match self.inner.approvals.open_approval(approval).await {
            Ok(approval) => approval,
            Err(e) => {
                self.abandon(call, &e).await;
                return Err(e);
            }
        };
        let payload = json!({"approval": approval.metadata.name, "input": call.spec.input, "options": approval.spec.options});
        let reason = approval
            .spec
            .payload
            .get("reason")
            .cloned()
            .unwrap_or(Value::Null);
        self.inner
            .events
            .emit_for(
                call,
                EventKind::RunPaused,
                json!({"reason": reason, "payload": payload}),
            )
            .await
    }
}

impl Admitting<'_> {
    /// Puts the input on the record as the tool's `observability` says: the
    /// arguments, or what the caller sent when it was no object; notes on the
    /// record whether any of it was withheld.
    pub(in crate::calls) fn record_input(&mut self) {
        let observability = &self.tool.spec.observability;
        let args = Value::Object(std::mem::take(&mut self.args));
        let (log_args, redact) = (observability.log_args, &observability.redact_fields);
        self.call.status.input_withheld = match self.malformed.take() {
            Some((_, sent)) => {
                self.call.spec.input = joch_core::redact::recorded_value(sent, log_args, redact);
                !log_args
            }
            None => {
                self.call.spec.input =
                    joch_core::redact::recorded_value(args.clone(), log_args, redact);
                self.call.spec.input != args
            }
        };
        if let Value::Object(args) = args {
            self.args = args;
        }
    }
}

impl Calls {
    /// Settles `call`, recorded `AwaitingApproval`, as `Failed` because its
    /// Approval could not be opened (`why`): a retry with its key then gets
    /// this outcome. If even that write fails, recovery settles it the
    /// same way at the next start.
    async fn abandon(&self, call: &ToolCall, why: &EngineError) {
        let error = CallError::new(
            ErrorCode::Interrupted,
            format!("joch could not ask for this call's approval ({why}); the call never ran"),
        );
        let settled = self
            .settle(call.clone(), Phase::Failed, None, Some(error), None)
            .await;
        if let Err(e) = settled {
            tracing::warn!(call = %call.metadata.name, error = %e, "a call whose approval could not be opened is left to recovery");
        }
    }

    async fn name_is_free(&self, call: &ToolCall) -> Result<bool, EngineError> {
        let taken = self
            .inner
            .store
            .get(
                ToolCall::KIND,
                &call.metadata.namespace,
                &call.metadata.name,
            )
            .await;
        match taken {
            Ok(_) => Ok(false),
            Err(StoreError::NotFound { .. }) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }
}
