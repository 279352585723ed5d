//! Batches: the tool calls of one LLM turn, run concurrently within an
//! execution, under the execution's fail-safe (seed 003).
//!
//! Every call of a batch is admitted (recorded, policies decided) before any
//! runs, in the order given. A policy denial under `degrade` or `fail` stops
//! the batch: the calls not yet admitted are recorded `Skipped` without being
//! evaluated, and those admitted but not run are settled `Skipped` too. Under
//! `continue` the rest run and a `warning` event says so.
//!
//! A call of an artifact tool (`artifact_grep`, ...) reads a handle the
//! caller already holds; it passes no policy, so no stop skips it either.

use joch_core::{
    DenialPolicy, EventKind, Execution, ExecutionPhase, ObjectMeta, ObjectRef, Phase, Principal,
    ToolCall,
};
use joch_store::{Durability, StoreErrorKind};
use serde_json::json;
use tokio::task::JoinSet;

use crate::Calls;
use crate::EngineError;
use crate::calls::admission::{Admission, Intent};
use crate::calls::{CallOutcome, Recorded, Rejection};
use crate::telemetry;

/// Label carrying a call's batch number within its execution.
pub const BATCH_LABEL: &str = "joch.dev/batch";

/// A batch's outcome.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The execution after the batch.
    pub execution: Execution,
    /// 1 for the execution's first batch.
    pub number: u32,
    /// Each call, in the order given: settled, or as admitted with `wait=false`.
    pub calls: Vec<CallOutcome>,
}

enum Slot {
    Admitted(Box<Recorded>),
    Replayed(String),
    /// An artifact tool's call, answered by `call_artifact_tool`.
    ArtifactRead(Box<ToolCall>),
}

impl Calls {
    async fn run_batch_now(
        &self,
        by: &Principal,
        namespace: &str,
        execution: &str,
        calls: Vec<ToolCall>,
        wait: bool,
    ) -> Result<Batch, EngineError> {
        let started = std::time::Instant::now();
        let mut run = self.execution_for_batch(namespace, execution).await?;
        let number = run.status.batches;
        self.inner
            .events
            .emit(
                namespace,
                execution,
                EventKind::ToolBatchStarted,
                json!({"tool_call_count": calls.len(), "batch": number}),
            )
            .await?;
        let (mut slots, stopped) = self.admit_batch(by, &run, number, calls).await?;
        if let Some(reason) = &stopped {
            self.stop_batch(&mut run, &mut slots, reason).await?;
        }
        let calls = self.run_slots(by, namespace, slots, wait).await?;
        let failures = calls
            .iter()
            .filter(|c| c.record.status.phase != Phase::Succeeded)
            .count();
        telemetry::batch_done(
            calls.len(),
            failures,
            started.elapsed().as_secs_f64() * 1000.0,
        );
        let execution = self.inner.resources.get(namespace, execution).await?;
        Ok(Batch {
            execution,
            number,
            calls,
        })
    }

    /// Records each call of the batch in order. A denial under the
    /// execution's `approvalDenialPolicy` of `degrade` or `fail` stops the
    /// batch: the calls after it are recorded as skipped (the reason given).
    async fn admit_batch(
        &self,
        by: &Principal,
        run: &Execution,
        number: u32,
        calls: Vec<ToolCall>,
    ) -> Result<(Vec<Slot>, Option<String>), EngineError> {
        let (namespace, execution) = (&run.metadata.namespace, &run.metadata.name);
        let policy = run.spec.fail_safe.approval_denial_policy;
        let mut slots = Vec::with_capacity(calls.len());
        let mut stopped: Option<String> = None;
        for mut call in calls {
            if (call.spec.execution_ref.as_ref()).is_some_and(|r| &r.name != execution) {
                return Err(EngineError::Misdirected(format!(
                    "a call of this batch names another execution than {execution:?}"
                )));
            }
            call.spec.execution_ref = Some(ObjectRef::new(execution));
            if call.spec.agent_ref.is_none() {
                call.spec.agent_ref = run.spec.agent_ref.clone();
            }
            call.metadata
                .labels
                .insert(BATCH_LABEL.to_owned(), number.to_string());
            if joch_core::artifact_tools::is_artifact_tool(call.tool_name()) {
                slots.push(Slot::ArtifactRead(Box::new(call)));
                continue;
            }
            let admitted = self
                .admit(by, namespace, call, Intent::WhenSettled, stopped.as_deref())
                .await?;
            let recorded = match admitted {
                Admission::KeyHeldBy(holder) => {
                    slots.push(Slot::Replayed(holder));
                    continue;
                }
                Admission::New(recorded) => recorded,
            };
            let denied = (recorded.rejection.as_ref()).is_some_and(|r| r.phase == Phase::Denied);
            if denied && stopped.is_none() {
                let name = &recorded.call.metadata.name;
                if policy == DenialPolicy::Continue {
                    let message = format!(
                        "tool call {name} was denied; the run continues (fail_safe continue)"
                    );
                    self.inner
                        .events
                        .emit(
                            namespace,
                            execution,
                            EventKind::Warning,
                            json!({"message": message}),
                        )
                        .await?;
                } else {
                    stopped = Some(format!(
                        "tool call {name} was denied; the rest of the batch is skipped"
                    ));
                }
            }
            slots.push(Slot::Admitted(recorded));
        }
        Ok((slots, stopped))
    }

    /// Skips the batch's calls admitted before it stopped, and marks the
    /// execution `Failed` or `Degraded` as its policy says.
    async fn stop_batch(
        &self,
        run: &mut Execution,
        slots: &mut [Slot],
        reason: &str,
    ) -> Result<(), EngineError> {
        for slot in slots.iter_mut() {
            if let Slot::Admitted(recorded) = slot {
                self.skip(recorded, reason).await?;
            }
        }
        run.status.phase = if run.spec.fail_safe.approval_denial_policy == DenialPolicy::Fail {
            ExecutionPhase::Failed
        } else {
            ExecutionPhase::Degraded
        };
        run.status.message = Some(reason.to_owned());
        (self.inner.store)
            .update_object(run, Durability::Sync)
            .await?;
        Ok(())
    }

    /// Runs (or, without `wait`, starts) the batch's calls and returns their
    /// outcomes in the order given. Calls that will not run settle first,
    /// in order, so that a stopped batch's timeline is deterministic; the
    /// rest run concurrently.
    async fn run_slots(
        &self,
        by: &Principal,
        namespace: &str,
        slots: Vec<Slot>,
        wait: bool,
    ) -> Result<Vec<CallOutcome>, EngineError> {
        let mut calls = Vec::with_capacity(slots.len());
        let mut tasks = JoinSet::new();
        let mut runnable = Vec::with_capacity(slots.len());
        for (index, slot) in slots.into_iter().enumerate() {
            match slot {
                Slot::Admitted(recorded) if recorded.rejection.is_some() => {
                    calls.push((index, self.run(*recorded).await?));
                }
                other => runnable.push((index, other)),
            }
        }
        for (index, slot) in runnable {
            match slot {
                Slot::Replayed(holder) => calls.push((
                    index,
                    CallOutcome::stored(self.key_holder(namespace, &holder).await?, true),
                )),
                // A read of a stored artifact, settled as it is answered.
                Slot::ArtifactRead(call) => {
                    calls.push((index, self.call_artifact_tool(by, namespace, *call).await?));
                }
                Slot::Admitted(recorded) if !wait => {
                    calls.push((index, CallOutcome::stored(recorded.call.clone(), false)));
                    if recorded.call.status.phase == Phase::Pending {
                        self.run_in_background(*recorded);
                    }
                }
                Slot::Admitted(recorded) => {
                    let engine = self.clone();
                    tasks.spawn(async move { (index, engine.run_or_wait(*recorded).await) });
                }
            }
        }
        while let Some(joined) = tasks.join_next().await {
            let (index, outcome) = joined.map_err(EngineError::task("a batch's call"))?;
            calls.push((index, outcome?));
        }
        calls.sort_by_key(|(index, _)| *index);
        Ok(calls.into_iter().map(|(_, c)| c).collect())
    }

    /// Runs an admitted call, or waits for one that waits for a person.
    async fn run_or_wait(&self, recorded: Recorded) -> Result<CallOutcome, EngineError> {
        if recorded.call.status.phase == Phase::AwaitingApproval && recorded.rejection.is_none() {
            let call = &recorded.call.metadata;
            let settled = self.wait_settled(&call.namespace, &call.name).await?;
            return Ok(CallOutcome::stored(settled, false));
        }
        self.run(recorded).await
    }

    /// The execution, created on its first batch, with its batch counter advanced.
    async fn execution_for_batch(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Execution, EngineError> {
        let mut run = self.execution(namespace, name).await?;
        if matches!(
            run.status.phase,
            ExecutionPhase::Failed | ExecutionPhase::Completed
        ) {
            return Err(EngineError::Refused {
                code: joch_core::RefusalCode::ExecutionFinished,
                message: format!(
                    "execution {name:?} is {:?} and takes no more batches",
                    run.status.phase
                ),
            });
        }
        run.status.batches += 1;
        self.inner
            .store
            .update_object(&mut run, Durability::Sync)
            .await?;
        Ok(run)
    }

    /// The execution, created with the defaults if it does not exist yet
    /// (an execution starts with its first batch or call).
    pub(in crate::calls) async fn execution(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Execution, EngineError> {
        match self.inner.store.get_object(namespace, name).await {
            Ok(run) => return Ok(run),
            Err(e) if e.kind() == StoreErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let fresh = Execution {
            api_version: joch_core::API_VERSION.to_owned(),
            kind: "Execution".to_owned(),
            metadata: ObjectMeta {
                name: name.to_owned(),
                ..ObjectMeta::default()
            },
            spec: Default::default(),
            status: Default::default(),
        };
        match self
            .inner
            .resources
            .create(&Principal::local(), namespace, fresh)
            .await
        {
            Err(EngineError::AlreadyExists { .. }) => {
                Ok(self.inner.store.get_object(namespace, name).await?)
            }
            other => other,
        }
    }

    /// Marks an admitted call that has not run as skipped.
    async fn skip(&self, recorded: &mut Recorded, reason: &str) -> Result<(), EngineError> {
        if recorded.rejection.is_some() {
            return Ok(());
        }
        let call = &recorded.call;
        if call.status.phase == Phase::AwaitingApproval {
            self.inner
                .approvals
                .withdraw_approval(&call.metadata.namespace, &call.metadata.name, reason)
                .await?;
        }
        recorded.rejection = Some(Rejection::skipped(call, reason.to_owned()));
        Ok(())
    }
}

impl Calls {
    /// Runs one LLM turn's calls in `execution` (created with the default
    /// fail-safe if it does not exist). With `wait`, answers once all settled.
    pub async fn run_batch(
        &self,
        by: &Principal,
        namespace: &str,
        execution: &str,
        calls: Vec<ToolCall>,
        wait: bool,
    ) -> Result<Batch, EngineError> {
        crate::rules::may_in(by, namespace, &crate::rules::Action::CallTool)?;
        let (by, namespace, execution) = (by.clone(), namespace.to_owned(), execution.to_owned());
        self.to_completion("a batch", move |engine| async move {
            engine
                .run_batch_now(&by, &namespace, &execution, calls, wait)
                .await
        })
        .await
    }

    /// Marks an execution completed: it takes no more batches.
    pub async fn complete_execution(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<Execution, EngineError> {
        crate::rules::may_in(by, namespace, &crate::rules::Action::CompleteExecution)?;
        let mut run: Execution = self.inner.resources.get(namespace, name).await?;
        if run.status.phase == ExecutionPhase::Running
            || run.status.phase == ExecutionPhase::Degraded
        {
            run.status.phase = ExecutionPhase::Completed;
            self.inner
                .store
                .update_object(&mut run, Durability::Sync)
                .await?;
        }
        Ok(run)
    }
}
