//! The calls part: the call path and the ledger's records.
//!
//! The path, top to bottom: the entry points here (run a call and wait for
//! it, `call`; or record it and let it run, `submit`) and what passes
//! between its stages; `admission.rs` (resolve the tool, the checks of
//! `admission/`, request policies and why a call waits (`deferral.rs`),
//! the idempotency key of `idempotency.rs`, the record, the Approval a
//! deferred call waits with); `execute.rs` (what `prepare.rs` and
//! `context.rs` load, the backend, output chunks, cancels, the result
//! hook); `settle.rs` (the terminal phase, stored durably). Beside it:
//! a person's decision carried out (`decided.rs`, `decided/`), hook mode
//! (`hooked.rs`), calls resumed by their caller's retry (`resumed.rs`),
//! batches, replays, recovery after a crash (`recovery.rs`) or a failed
//! store write (`orphans.rs`); and reads: records, events, costs, the
//! overview's window.
//!
//! A part with walls: [`Calls::new`] names the parts it uses, and builds
//! the approvals part it owns, handing it the `Decided` seam back.

mod admission;
mod artifact_tools;
mod awaited;
mod batches;
mod cancels;
mod chunks;
mod context;
mod costs;
mod decided;
mod deferral;
mod events;
mod execute;
mod hooked;
mod hooks;
mod idempotency;
mod minted;
mod orphans;
mod overdue;
mod prepare;
mod ratelimit;
mod records;
mod recovery;
mod replay;
mod resumed;
mod rounds;
mod settle;
mod window;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub use batches::{BATCH_LABEL, Batch};
pub use chunks::{ChunkFollower, FOLLOW_QUEUE};
pub use hooked::{Deferred, HookResult, HookVerdict, named_values};
pub use idempotency::{MAX_KEY_LEN, validate_key};
pub use minted::MintedName;
pub use recovery::{RecoveryReport, Resolve};
pub use replay::{Replay, ReplayMode};
pub use resumed::Retry;
pub use window::{CallBucket, CallWindow};

use admission::{Admitting, RESUMPTION};
pub(crate) use cancels::CANCEL_KIND;
pub(in crate::calls) use chunks::Followers;

use joch_core::policy::OnTimeout;
use joch_core::{CallError, ErrorCode, Phase, Policy, Principal, Tool, ToolBackend, ToolCall};
use joch_store::{Durability, Store, timing};
use serde_json::{Map, Value};
use tracing::Instrument;

use crate::EngineError;
use crate::approvals::{Approvals, Decided};
use crate::artifacts::Artifacts;
use crate::calls::admission::{Admission, Intent};
use crate::calls::hooks::refusal;
use crate::catalog::Catalog;
use crate::catalog::schema::Compiled;
use crate::config::EngineConfig;
use crate::events::Events;
use crate::lists::Lists;
use crate::mcp::Mcp;
use crate::policies::{Decision, Facts, Policies};
use crate::resources::Resources;
use crate::rules::Visibility;
use crate::signal::Signal;
use crate::telemetry;
use crate::tracing_spans;
use crate::vault::Credentials;

/// The calls part: the call path and the ledger's records. Cheap to
/// clone; clones share everything.
#[derive(Clone)]
pub struct Calls {
    inner: Arc<Parts>,
}

/// The parts the call path uses, handed to [`Calls::new`] by the engine.
pub(crate) struct Needs {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) backends: HashMap<&'static str, Arc<dyn ToolBackend>>,
    pub(crate) settings: Settings,
    pub(crate) lists: Lists,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) visibility: Visibility,
    pub(crate) events: Arc<Events>,
    pub(crate) resources: Arc<Resources>,
    pub(crate) policies: Arc<Policies>,
    pub(crate) artifacts: Arc<Artifacts>,
    pub(crate) mcp: Mcp,
}

/// The settings the call path reads (see `EngineConfig` for each).
pub(crate) struct Settings {
    pub(crate) idempotency_window: Duration,
    pub(crate) approval_timeout: Duration,
    pub(crate) approval_fallback: OnTimeout,
    pub(crate) intent_grace: Duration,
    pub(crate) trace_content: bool,
    /// This replica's name, recorded on the calls it runs.
    pub(crate) replica: Option<String>,
    /// The token vault, for upstreams that take a user's own token.
    pub(crate) credentials: Option<Arc<Credentials>>,
    /// Under which consents come back.
    pub(crate) public_url: Option<String>,
}

impl Settings {
    /// The call path's share of the engine's settings.
    pub(crate) fn of(config: &EngineConfig) -> Self {
        Self {
            idempotency_window: config.idempotency_window,
            approval_timeout: config.approval_timeout,
            approval_fallback: config.approval_fallback,
            intent_grace: config.intent_grace,
            trace_content: config.trace_content,
            replica: config.replica.clone(),
            credentials: config.credentials.clone(),
            public_url: config.public_url.clone(),
        }
    }
}

/// What the calls part uses and keeps.
struct Parts {
    store: Arc<dyn Store>,
    backends: HashMap<&'static str, Arc<dyn ToolBackend>>,
    settings: Settings,
    lists: Lists,
    catalog: Arc<Catalog>,
    visibility: Visibility,
    events: Arc<Events>,
    resources: Arc<Resources>,
    policies: Arc<Policies>,
    artifacts: Arc<Artifacts>,
    mcp: Mcp,
    /// The Approvals deferred calls wait with; built by [`Calls::new`].
    approvals: Approvals,
    /// Bumped whenever a call settles, so callers waiting on another call's
    /// outcome (same idempotency key) re-read the store at once.
    settled: Signal,
    /// Surfaces following running calls' output chunks (see `chunks.rs`).
    followers: Followers,
    /// Calls running here, and the cancel marks heard (see `cancels.rs`).
    cancels: cancels::Cancels,
    /// Names minted for surfaces and not yet recorded (see `minted.rs`).
    minted: minted::Minted,
    /// Calls waiting for the store to come back (see `orphans.rs`).
    orphans: orphans::Waiting,
}

impl Calls {
    /// The calls part over `needs`, and the approvals part it owns, built
    /// by `approvals` with the seam back to this one (see `decided.rs`):
    /// deferred calls wait on approvals, and decisions resume calls.
    pub(crate) fn new(needs: Needs, approvals: impl FnOnce(Arc<dyn Decided>) -> Approvals) -> Self {
        let inner = Arc::new_cyclic(|me| Parts {
            approvals: approvals(Arc::new(decided::Back(me.clone()))),
            store: needs.store,
            backends: needs.backends,
            settings: needs.settings,
            lists: needs.lists,
            catalog: needs.catalog,
            visibility: needs.visibility,
            events: needs.events,
            resources: needs.resources,
            policies: needs.policies,
            artifacts: needs.artifacts,
            mcp: needs.mcp,
            settled: Signal::default(),
            followers: Followers::default(),
            cancels: cancels::Cancels::default(),
            minted: minted::Minted::default(),
            orphans: orphans::Waiting::default(),
        });
        Self { inner }
    }

    /// The approvals part this one built.
    pub(crate) fn approvals(&self) -> &Approvals {
        &self.inner.approvals
    }

    /// A call settled, here or (heard from the store) on another replica.
    pub(crate) fn settled(&self) {
        self.inner.settled.bump();
    }

    /// Another replica marked `namespace/name` cancelled (see `cancels.rs`).
    pub(crate) fn cancel_heard(&self, namespace: &str, name: &str) {
        self.inner.cancels.heard(namespace, name);
    }

    /// Runs `work` as a task of its own and waits for it. A caller that goes
    /// away (its connection closed, its future dropped) cannot stop what it
    /// started halfway: between a call's record and its settlement, it would
    /// leave the call `Pending` or `Running` on a live replica with nothing
    /// to finish it.
    async fn to_completion<T, F>(
        &self,
        what: &'static str,
        work: impl FnOnce(Calls) -> F,
    ) -> Result<T, EngineError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, EngineError>> + Send + 'static,
    {
        let work = tracing::Instrument::in_current_span(work(self.clone()));
        tokio::spawn(work).await.map_err(EngineError::task(what))?
    }
}

/// What a caller gets back for a call.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The record, exactly as stored.
    pub record: ToolCall,
    /// The tool's output in full. The record may hold less: the tool's
    /// `observability` settings redact or drop it there, but the caller that
    /// made the call gets what the tool returned.
    pub output: Option<Value>,
    /// True when this is an earlier call with the same idempotency key,
    /// returned from the record without running anything.
    pub replayed: bool,
    /// Where the call's time went, for a call made through
    /// [`Calls::call`](crate::Calls::call) (a surface may answer it as `Server-Timing`).
    pub timings: Option<joch_store::timing::Timings>,
}

impl CallOutcome {
    /// The record with the full output: what the calling agent receives.
    /// An output that came in an envelope (seed 001) comes in it again when
    /// read back from the record (an idempotent replay), keyed by the
    /// recorded nonce.
    pub fn into_response(self) -> ToolCall {
        let mut record = self.record;
        if self.output.is_some() {
            record.status.output = self.output;
        } else if let Some(nonce) = record.status.output_nonce.clone() {
            record.status.output = record
                .status
                .output
                .take()
                .map(|output| crate::policies::rewrap(&record, &nonce, output));
        }
        record
    }

    pub(crate) fn stored(record: ToolCall, replayed: bool) -> Self {
        Self {
            record,
            output: None,
            replayed,
            timings: None,
        }
    }
}

/// A recorded call, ready to run.
pub(crate) struct Recorded {
    pub(crate) call: ToolCall,
    pub(crate) tool: Arc<Tool>,
    pub(crate) args: Map<String, Value>,
    pub(crate) schemas: Option<Arc<Compiled>>,
    /// Set when the call must not run; it settles with this phase, error and
    /// answer for the model.
    pub(crate) rejection: Option<Rejection>,
    /// The namespace's policies, for the result hook.
    pub(crate) policies: Arc<Vec<Policy>>,
    /// What the request hook saw, extended with the output for the result hook.
    pub(crate) facts: Option<Facts>,
}

/// Why a call will not run.
pub(crate) struct Rejection {
    pub(crate) phase: Phase,
    pub(crate) error: CallError,
    pub(crate) answer: Option<Value>,
}

impl Rejection {
    pub(crate) fn failed(code: ErrorCode, message: String) -> Self {
        Rejection {
            phase: Phase::Failed,
            error: CallError::new(code, message),
            answer: None,
        }
    }

    /// A refusal the model is told about: `{"success": false, "error": headline, "reason"}`.
    pub(crate) fn refused(
        call: &ToolCall,
        phase: Phase,
        headline: &str,
        code: ErrorCode,
        reason: String,
    ) -> Self {
        Rejection {
            phase,
            answer: Some(refusal(call, headline, Some(&reason))),
            error: CallError::new(code, reason),
        }
    }

    /// Not run because its batch stopped first.
    pub(crate) fn skipped(call: &ToolCall, reason: String) -> Self {
        Self::refused(call, Phase::Skipped, "Skipped", ErrorCode::Skipped, reason)
    }

    /// A policy's denial.
    pub(crate) fn by_policy(call: &ToolCall, decision: &Decision) -> Self {
        let reason = decision
            .verdict
            .reason
            .clone()
            .unwrap_or_else(|| format!("denied by policy {}", decision.policy_id));
        Self::refused(
            call,
            Phase::Denied,
            "Denied by policy",
            ErrorCode::DeniedByPolicy,
            reason,
        )
    }
}

/// What a call came to in its own task: settled, or waiting for another
/// record to settle (its approval's decision, or the call holding its key).
enum Reached {
    Settled(Box<CallOutcome>),
    Awaiting(String),
    KeyHeldBy(String),
}

impl Calls {
    /// Records the call and, unless it waits, runs it to its settlement.
    async fn admit_and_run(
        &self,
        by: &Principal,
        namespace: &str,
        call: ToolCall,
        paused: Option<tokio::sync::oneshot::Sender<joch_core::Approval>>,
    ) -> Result<Reached, EngineError> {
        match self
            .admit(by, namespace, call, Intent::WhenSettled, None)
            .await?
        {
            Admission::New(recorded) if recorded.call.status.phase == Phase::AwaitingApproval => {
                let name = recorded.call.metadata.name.clone();
                if let Some(paused) = paused.filter(|p| !p.is_closed()) {
                    // The Approval was written (synced) before `record` returned.
                    match self.inner.approvals.get(namespace, &name).await {
                        Ok(approval) => drop(paused.send(approval)),
                        Err(e) => {
                            tracing::warn!(call = %name, error = %e, "the pending approval could not be read")
                        }
                    }
                }
                Ok(Reached::Awaiting(name))
            }
            Admission::New(recorded) => Ok(Reached::Settled(Box::new(self.run(*recorded).await?))),
            Admission::KeyHeldBy(holder) => Ok(Reached::KeyHeldBy(holder)),
        }
    }

    async fn submit_now(
        &self,
        by: &Principal,
        namespace: &str,
        call: ToolCall,
    ) -> Result<CallOutcome, EngineError> {
        gateway_only(&call)?;
        if joch_core::artifact_tools::is_artifact_tool(call.tool_name()) {
            return self.call_artifact_tool(by, namespace, call).await;
        }
        let recorded = match self
            .admit(by, namespace, call, Intent::Now(Durability::Sync), None)
            .await?
        {
            Admission::New(recorded) => *recorded,
            Admission::KeyHeldBy(holder) => {
                let existing = self.key_holder(namespace, &holder).await?;
                if !existing.status.phase.is_terminal() {
                    return Err(EngineError::IdempotencyKeyInUse { call: holder });
                }
                telemetry::idempotent_replay(
                    telemetry::call_labels(&self.inner.catalog, &existing).await,
                );
                return Ok(CallOutcome::stored(existing, true));
            }
        };
        let accepted = recorded.call.clone();
        if accepted.status.phase == Phase::Pending {
            self.run_in_background(recorded);
        }
        Ok(CallOutcome::stored(accepted, false))
    }

    pub(crate) fn run_in_background(&self, recorded: Recorded) {
        let engine = self.clone();
        let span = tracing_spans::call_span(&recorded.call.metadata.namespace, &recorded.call);
        tokio::spawn(
            async move {
            let name = recorded.call.metadata.name.clone();
            if let Err(e) = engine.run(recorded).await {
                tracing::error!(call = %name, error = %e, "background call could not be settled");
            }
            }
            .instrument(span),
        );
    }

    /// Waits until the named call has settled and returns it.
    pub(in crate::calls) async fn wait_settled(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ToolCall, EngineError> {
        let mut settled = self.inner.settled.subscribe();
        loop {
            let call = self.key_holder(namespace, name).await?;
            if call.status.phase.is_terminal() {
                return Ok(call);
            }
            // A settle elsewhere in this process wakes us at once; the timer
            // covers a call settled by another process sharing the store.
            let _ = tokio::time::timeout(Duration::from_millis(500), settled.changed()).await;
        }
    }

    /// Reads the call holding an idempotency key. The store reports a claim
    /// as soon as it is applied, but a reader sees the holder only once its
    /// group commit lands, a moment later: a brief NotFound means "not yet".
    pub(in crate::calls) async fn key_holder(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ToolCall, EngineError> {
        let mut waited = Duration::ZERO;
        loop {
            match self.record(namespace, name).await {
                Err(EngineError::NotFound { .. }) if waited < Duration::from_secs(5) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    waited += Duration::from_millis(5);
                }
                other => return other,
            }
        }
    }
}

impl Calls {
    /// Records a call, runs it and returns it settled. The answer is durable
    /// when this returns; the record was durable before the tool's side
    /// effect could happen. A call deferred for approval is answered once
    /// decided. A call whose idempotency key is held by an earlier call with
    /// the same arguments returns that call, once settled, without running.
    pub async fn call(
        &self,
        by: &Principal,
        namespace: &str,
        call: ToolCall,
    ) -> Result<CallOutcome, EngineError> {
        self.call_reporting_pause(by, namespace, call, None).await
    }

    /// [`call`](Self::call), and if the call is recorded `AwaitingApproval`,
    /// `paused` gets its Approval before the wait: a surface that can reach
    /// the caller's user (MCP elicitation) may then ask them too, deciding
    /// through [`approve`](crate::Approvals::approve) / [`reject`](crate::Approvals::reject) like
    /// any approver. Nothing is sent for a call that does not wait.
    pub async fn call_reporting_pause(
        &self,
        by: &Principal,
        namespace: &str,
        call: ToolCall,
        paused: Option<tokio::sync::oneshot::Sender<joch_core::Approval>>,
    ) -> Result<CallOutcome, EngineError> {
        gateway_only(&call)?;
        // The artifact tools' names are reserved: they read handles, not a Tool.
        if joch_core::artifact_tools::is_artifact_tool(call.tool_name()) {
            return self.call_artifact_tool(by, namespace, call).await;
        }
        let span = tracing_spans::call_span(namespace, &call);
        let (owned_by, owned_namespace, task_span) =
            (by.clone(), namespace.to_owned(), span.clone());
        let reached = self
            .to_completion("a call", move |engine| {
                async move {
                    let admitted = engine.admit_and_run(&owned_by, &owned_namespace, call, paused);
                    let (reached, timings) = timing::measured(admitted).await;
                    reached.map(|reached| match reached {
                        Reached::Settled(outcome) => Reached::Settled(Box::new(CallOutcome {
                            timings: Some(timings),
                            ..*outcome
                        })),
                        waiting => waiting,
                    })
                }
                .instrument(task_span)
            })
            .await?;
        // Waiting for a person or for another call is the caller's: one
        // that goes away stops waiting, and the call goes on without it.
        match reached {
            Reached::Settled(outcome) => Ok(*outcome),
            Reached::Awaiting(name) => {
                let settled = self
                    .wait_settled(namespace, &name)
                    .instrument(tracing::info_span!(parent: &span, "await_approval"))
                    .await?;
                Ok(CallOutcome::stored(settled, false))
            }
            Reached::KeyHeldBy(holder) => {
                let original = self
                    .wait_settled(namespace, &holder)
                    .instrument(span)
                    .await?;
                telemetry::idempotent_replay(
                    telemetry::call_labels(&self.inner.catalog, &original).await,
                );
                Ok(CallOutcome::stored(original, true))
            }
        }
    }

    /// Records a call durably and returns that record at once (`Pending`, or
    /// `AwaitingApproval`); the call runs in the background and settles in
    /// the store. If its idempotency key is held by a settled call, that
    /// call is returned; by an unsettled one, `IdempotencyKeyInUse`.
    pub async fn submit(
        &self,
        by: &Principal,
        namespace: &str,
        call: ToolCall,
    ) -> Result<CallOutcome, EngineError> {
        let (by, namespace) = (by.clone(), namespace.to_owned());
        self.to_completion("a submitted call", move |engine| async move {
            engine.submit_now(&by, &namespace, call).await
        })
        .await
    }
}

/// A hook-mode call comes through the hook endpoints, which hand it to the
/// agent; through the gateway nobody would run it.
fn gateway_only(call: &ToolCall) -> Result<(), EngineError> {
    if call.spec.mode == joch_core::CallMode::Hook {
        return Err(EngineError::Misdirected(
            "spec.mode hook: report calls the agent runs itself through /v1/hooks/aos or /v1/hooks/claude".to_owned(),
        ));
    }
    Ok(())
}
