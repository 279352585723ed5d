//! An upstream MCP server's questions during a call (SEP-2322
//! `input_required`: elicitation, sampling, `roots/list`), for a client
//! that answers them by retrying the call (protocol 2026-07-28, no session
//! to ask on).
//!
//! - The backend ends the call's sending with the questions (an
//!   `input_required` error, never a settled outcome): the call is *parked*,
//!   `Running` with `status.inputRequired` (the round, the upstream's
//!   `inputRequests` and its `requestState`), stored durably. The client
//!   gets the questions and a `requestState` of joch's naming the call and
//!   the round; the upstream's state never leaves joch.
//! - The client's retry ([`Calls::answer_input`]) is checked as any resume
//!   (its principal's call, the same tool and arguments), then *claims* the
//!   round: its answers are written with the record's `resourceVersion`, so
//!   that of two retries of the same round, on any replicas, one claims and
//!   the other waits. The claimant sends the call upstream again, once,
//!   with the answers and the upstream's `requestState`; the upstream
//!   finishes, or asks again (the next round).
//! - Once the round has run, the answers on the record are kept as the
//!   tool's `observability` keeps arguments.
//! - A round nobody answers within the deadline of an agent's report (the
//!   hook-mode result's, `--hook-result-timeout-seconds`) ends the call
//!   `Failed`, `input_abandoned`: the upstream holds nothing meanwhile.

use std::time::Duration;

use joch_core::mcp_surface::InputRound;
use joch_core::{CallError, Phase, Principal, RunsOn, Tool, ToolCall};
use joch_store::{Durability, StoreErrorKind};
use serde_json::Value;

use crate::Calls;
use crate::EngineError;
use crate::calls::{CallOutcome, Retry};
use crate::clock::now;
use joch_core::redact::recorded_value;

impl Calls {
    /// Parks `call`: the upstream asked its client `asked.details`
    /// (`{inputRequests, requestState}`), the next round.
    pub(in crate::calls) async fn park(
        &self,
        mut call: ToolCall,
        tool: &Tool,
        asked: CallError,
    ) -> Result<CallOutcome, EngineError> {
        Self::keep_answers(&mut call, tool);
        let details = asked.details.unwrap_or_default();
        let round = call
            .status
            .input_required
            .as_ref()
            .map_or(1, |r| r.round + 1);
        call.status.input_required = Some(InputRound {
            round,
            requests: details.get("inputRequests").cloned().unwrap_or_default(),
            state: details
                .get("requestState")
                .and_then(Value::as_str)
                .map(str::to_owned),
            asked_at: now(),
            answered_at: None,
            responses: None,
        });
        self.store_settled(&mut call).await?;
        // Whoever waits on the call hears that it now waits on its client.
        self.settled();
        tracing::info!(call = %call.metadata.name, round, "tool call waits for its client's input");
        Ok(CallOutcome::stored(call, false))
    }

    /// The answers of a round that has run, as the record keeps them.
    pub(in crate::calls) fn keep_answers(call: &mut ToolCall, tool: &Tool) {
        let o = &tool.spec.observability;
        if let Some(answers) = call
            .status
            .input_required
            .as_mut()
            .and_then(|round| round.responses.take())
        {
            let kept = recorded_value(answers, o.log_args, &o.redact_fields);
            if let Some(round) = call.status.input_required.as_mut() {
                round.responses = Some(kept);
            }
        }
    }

    /// Claims round `round` of the parked `call` for `answers`: true when
    /// this retry is the one that sends them upstream.
    async fn claim(
        &self,
        call: &mut ToolCall,
        round: u32,
        answers: &Value,
    ) -> Result<bool, EngineError> {
        let open = call.status.phase == Phase::Running
            && call
                .status
                .input_required
                .as_ref()
                .is_some_and(|r| r.round == round && r.answered_at.is_none());
        if !open {
            return Ok(false);
        }
        if let Some(asked) = call.status.input_required.as_mut() {
            asked.answered_at = Some(now());
            asked.responses = Some(answers.clone());
        }
        match self.inner.store.update_object(call, Durability::Sync).await {
            Ok(()) => Ok(true),
            // Another retry of the round claimed it first.
            Err(e) if e.kind() == StoreErrorKind::Conflict => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The call once it settled, or waits on its client (a round after
    /// `after`, or `after` itself not yet answered), or as it stands after
    /// `wait`.
    async fn until_settled_or_asked(
        &self,
        namespace: &str,
        name: &str,
        after: u32,
        wait: Duration,
    ) -> Result<ToolCall, EngineError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut changed = self.inner.settled.subscribe();
        loop {
            let call = self.record(namespace, name).await?;
            if call.status.phase.is_terminal() || waits_on_client(&call, after) {
                return Ok(call);
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(call);
            }
            // A park or settle here wakes at once; the timer covers another replica's.
            let tick = left.min(Duration::from_millis(250));
            let _ = tokio::time::timeout(tick, changed.changed()).await;
        }
    }
}

/// True when `call` waits on its client: round `after` not yet answered,
/// or a later round asked.
pub(in crate::calls) fn waits_on_client(call: &ToolCall, after: u32) -> bool {
    call.status.phase == Phase::Running
        && call
            .status
            .input_required
            .as_ref()
            .is_some_and(|r| r.answered_at.is_none() && r.round >= after)
}

impl Calls {
    /// A retry of call `name` that answers round `round` of its upstream's
    /// questions (`answers`: the client's `inputResponses`). The retry is
    /// checked as [`Calls::resume`] checks one (`by`'s call, the same tool
    /// and arguments). The first retry of the round sends the call upstream
    /// again with the answers, in the background; any retry then gets the
    /// call once it settles, once it waits on its client again (the next
    /// round), or as it stands after `wait`.
    pub async fn answer_input(
        &self,
        by: &Principal,
        namespace: &str,
        (name, round): (&str, u32),
        retry: Retry<'_>,
        answers: &Value,
        wait: Duration,
    ) -> Result<ToolCall, EngineError> {
        self.resume(by, namespace, name, retry, Duration::ZERO)
            .await?;
        let mut call = self.record(namespace, name).await?;
        if self.claim(&mut call, round, answers).await? {
            let tool = self.inner.catalog.resolve_tool(namespace, &call).await?;
            self.run_again(call, (*tool).clone()).await?;
        }
        let call = self
            .until_settled_or_asked(namespace, name, round + 1, wait)
            .await?;
        Ok(CallOutcome::stored(call, false).into_response())
    }

    /// The call `name` that `by` made ([`Calls::resume`]'s check), once it
    /// settles or waits on its client, or as it stands after `wait`: what
    /// a retry of a deferred call reads, whose call, approved, may since
    /// have been asked something by its upstream.
    pub async fn resume_or_asked(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        retry: Retry<'_>,
        wait: Duration,
    ) -> Result<ToolCall, EngineError> {
        let call = self
            .resume(by, namespace, name, retry, Duration::ZERO)
            .await?;
        if call.spec.runs_on == RunsOn::Retry && !call.status.phase.is_terminal() {
            // Carried out by the retry once approved (`Calls::resume`),
            // which returns once it settles or asks its client.
            return self.resume(by, namespace, name, retry, wait).await;
        }
        let call = self
            .until_settled_or_asked(namespace, name, 1, wait)
            .await?;
        Ok(CallOutcome::stored(call, false).into_response())
    }
}
