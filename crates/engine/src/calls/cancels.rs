//! Cancelling a call, whichever replica runs it.
//!
//! A call still waiting for a person is withdrawn at once (its Approval
//! expires, the call ends `Failed` with `error.code: cancelled`, never run).
//! A call that is pending or running belongs to the replica running it, the
//! only one that may settle it: the canceller writes a cancel mark (a
//! `ToolCallCancel` record named after the call) and each replica hears of
//! marks through the store's change feed (or at once, for its own). The
//! replica running the call then stops it: an upstream MCP server gets
//! `notifications/cancelled` for its `tools/call` (through the call's
//! client, see `Engine::call_client`), any other backend's request is
//! dropped, and the call settles `Failed` with `error.code: cancelled`, once,
//! by the ordinary settle. A call that already settled is returned as it
//! stands; the mark of a settled call is removed.
//!
//! A mark heard before its call starts running here (a submitted call still
//! in admission) is kept for [`HEARD_FOR`], so the call stops as soon as it
//! starts. A change feed that lost changes makes every running call read
//! its mark from the store.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use joch_core::object::IndexFields;
use joch_core::{CallError, CallMode, ErrorCode, Phase, Principal, ToolCall};
use joch_store::{Durability, Record, StoreErrorKind};
use serde_json::json;
use tokio::sync::watch;

use crate::Calls;
use crate::EngineError;
use crate::clock::now;
use crate::rules::{Action, may};

/// The kind of a cancel mark, which no API serves.
pub(crate) const CANCEL_KIND: &str = "ToolCallCancel";
/// How long a mark heard for a call not running here is remembered.
const HEARD_FOR: Duration = Duration::from_secs(60);
/// How long a cancel waits for the running replica to settle the call.
const SETTLE_WAIT: Duration = Duration::from_secs(10);
/// How long an upstream MCP call is given to end by itself once cancelled
/// (it tells the server, then returns) before its request is dropped.
pub(in crate::calls) const MCP_GRACE: Duration = Duration::from_secs(2);

/// The calls running in this process, and marks heard for calls not (yet)
/// running here, by `namespace/name`.
#[derive(Default)]
pub(in crate::calls) struct Cancels {
    running: Mutex<HashMap<String, watch::Sender<bool>>>,
    heard: Mutex<HashMap<String, Instant>>,
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Cancels {
    /// A cancel mark for the call was written (here or, heard from the
    /// store, by another replica).
    pub(in crate::calls) fn heard(&self, namespace: &str, name: &str) {
        let key = key(namespace, name);
        // Locks in the order `register` takes them, holding `running`
        // throughout: a mark is either seen by the running call or kept.
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = running.get(&key) {
            sender.send_replace(true);
            return;
        }
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        heard.retain(|_, at| at.elapsed() < HEARD_FOR);
        heard.insert(key, Instant::now());
    }

    /// The call `key` runs here from now on: a receiver that is `true`
    /// once it is cancelled (already, for a mark heard before).
    fn register(&self, key: &str) -> watch::Receiver<bool> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let already = {
            let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
            heard.remove(key).is_some()
        };
        let (sender, cancelled) = watch::channel(already);
        running.insert(key.to_owned(), sender);
        cancelled
    }

    fn forget(&self, key: &str) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.remove(key);
    }

    fn running_keys(&self) -> Vec<String> {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.keys().cloned().collect()
    }
}

/// A call running in this process; dropping it forgets the call.
pub(in crate::calls) struct Running {
    engine: Calls,
    key: String,
    cancelled: watch::Receiver<bool>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.engine.inner.cancels.forget(&self.key);
    }
}

impl Running {
    /// A receiver that turns `true` when the call is cancelled.
    pub(in crate::calls) fn watch(&self) -> watch::Receiver<bool> {
        self.cancelled.clone()
    }

    /// Resolves once the call is cancelled (never, if it is not).
    pub(in crate::calls) async fn cancelled(&self) {
        let mut cancelled = self.cancelled.clone();
        if cancelled.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The failure a call stopped by its cancel records.
    pub(in crate::calls) fn failure() -> CallError {
        CallError::new(
            ErrorCode::Cancelled,
            "the call was cancelled while it ran; its request was dropped",
        )
    }
}

impl Calls {
    /// Registers the call as running here, until the guard is dropped.
    pub(in crate::calls) fn running(&self, call: &ToolCall) -> Running {
        let key = key(&call.metadata.namespace, &call.metadata.name);
        let cancelled = self.inner.cancels.register(&key);
        Running {
            engine: self.clone(),
            key,
            cancelled,
        }
    }

    /// The change feed lost changes: each call running here reads its mark.
    pub(crate) fn recheck_cancels(&self) {
        let keys = self.inner.cancels.running_keys();
        if keys.is_empty() {
            return;
        }
        let engine = self.clone();
        tokio::spawn(async move {
            for key in keys {
                let Some((namespace, name)) = key.split_once('/') else {
                    continue;
                };
                let marked = engine.inner.store.get(CANCEL_KIND, namespace, name).await;
                if marked.is_ok() {
                    engine.inner.cancels.heard(namespace, name);
                }
            }
        });
    }

    /// True when the call carries a cancel mark (read from the store).
    pub(in crate::calls) async fn cancel_marked(
        &self,
        call: &ToolCall,
    ) -> Result<bool, EngineError> {
        let (ns, name) = (&call.metadata.namespace, &call.metadata.name);
        match self.inner.store.get(CANCEL_KIND, ns, name).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == StoreErrorKind::NotFound => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn mark_cancelled(&self, by: &Principal, call: &ToolCall) -> Result<(), EngineError> {
        let (ns, name) = (&call.metadata.namespace, &call.metadata.name);
        let body = json!({"by": by.name, "atMs": now().0.timestamp_millis()});
        let mark = Record {
            kind: CANCEL_KIND.to_owned(),
            namespace: ns.clone(),
            name: name.clone(),
            resource_version: 1,
            labels: Default::default(),
            index: IndexFields::default(),
            body: body.to_string(),
        };
        match self.inner.store.create(mark, Durability::Sync).await {
            Ok(()) => {}
            // Cancelled twice: the first mark stands.
            Err(e) if e.kind() == StoreErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
        self.inner.cancels.heard(ns, name);
        Ok(())
    }

    async fn unmark(&self, call: &ToolCall) {
        let (ns, name) = (&call.metadata.namespace, &call.metadata.name);
        match self.inner.store.delete(CANCEL_KIND, ns, name, None).await {
            Ok(_) => {}
            Err(e) if e.kind() == StoreErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(call = %name, error = %e, "a settled call's cancel mark stays")
            }
        }
    }
}

impl Calls {
    /// Cancels the call `name`, whichever replica runs it, for `by` if it
    /// made the call (or is an admin; else `Forbidden`). A call waiting for
    /// a person is withdrawn and never runs; a pending or running one is
    /// stopped by the replica running it (its upstream told, its request
    /// dropped) and settles `Failed` with `error.code: cancelled`, exactly
    /// once. Returns the call as it stands after up to 10 s: settled, or
    /// still running if its replica has not yet stopped it (or is gone, in
    /// which case recovery settles it cancelled). A call already settled,
    /// or a hook-mode call (the agent runs it), is returned unchanged.
    pub async fn cancel(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<ToolCall, EngineError> {
        let call = self.get(by, namespace, name).await?;
        may(by, &Action::CancelCall(&call))?;
        match call.status.phase {
            Phase::AwaitingApproval => self.withdraw(call).await,
            phase if phase.is_terminal() => Ok(call),
            _ if call.spec.mode == CallMode::Hook => Ok(call),
            _ => {
                self.mark_cancelled(by, &call).await?;
                let settled =
                    tokio::time::timeout(SETTLE_WAIT, self.wait_settled(namespace, name)).await;
                match settled {
                    Ok(Ok(settled)) => {
                        self.unmark(&settled).await;
                        Ok(settled)
                    }
                    Ok(Err(e)) => Err(e),
                    Err(_) => self.record(namespace, name).await,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reaches_its_call_whether_heard_before_or_while_it_runs() {
        let cancels = Cancels::default();
        // Heard while it runs.
        let running = cancels.register("ns/a");
        assert!(!*running.borrow());
        cancels.heard("ns", "a");
        assert!(*running.borrow());
        // Heard before it runs (still in admission): cancelled at once.
        cancels.heard("ns", "b");
        assert!(*cancels.register("ns/b").borrow());
        // Used once: a later run of the same name is not cancelled by it.
        cancels.forget("ns/b");
        assert!(!*cancels.register("ns/b").borrow());
        // Another call's mark is not this one's.
        cancels.heard("other", "c");
        assert!(!*cancels.register("ns/c").borrow());
        // A call that ended is forgotten: its mark is kept, not sent.
        cancels.forget("ns/a");
        cancels.heard("ns", "a");
        assert!(cancels.running_keys().iter().all(|k| k != "ns/a"));
    }

    /// Recovery reads the mark from the store: a fresh engine, which heard
    /// no mark, settles a marked call cancelled instead of running it again.
    /// (The two-replica e2e test passes on the surviving replica's memory
    /// of heard marks alone; this one has none.)
    #[tokio::test]
    async fn recovery_settles_a_marked_call_cancelled_and_does_not_run_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = crate::engine::test_engine(&dir);
        let store = engine.store();
        let mut call: ToolCall = serde_json::from_value(json!({
            "metadata": {"name": "call-1", "namespace": "default"},
            "spec": {"toolRef": {"name": "absent"}, "input": {"x": 1},
                     "sideEffects": {"level": "external_write", "idempotent": true}},
        }))
        .expect("a call");
        call.transition(Phase::Running).expect("running");
        store
            .create_object(&mut call, Durability::Sync)
            .await
            .expect("create");
        let report = engine.calls().recover().await.expect("recover");
        let unmarked: ToolCall = store.get_object("default", "call-1").await.expect("get");
        assert_ne!(
            unmarked.status.error.map(|e| e.code),
            Some(ErrorCode::Cancelled.as_str().to_owned()),
            "without a mark the call is not cancelled: {report:?}"
        );

        call.metadata.name = "call-2".to_owned();
        call.metadata.resource_version.clear();
        store
            .create_object(&mut call, Durability::Sync)
            .await
            .expect("create");
        engine
            .calls()
            .mark_cancelled(&Principal::local(), &call)
            .await
            .expect("mark");
        let fresh = crate::engine::test_engine(&dir);
        let report = fresh.calls().recover().await.expect("recover");
        let settled: ToolCall = fresh
            .store()
            .get_object("default", "call-2")
            .await
            .expect("get");
        assert_eq!(settled.status.phase, Phase::Failed, "{report:?}");
        assert_eq!(
            settled.status.error.map(|e| e.code),
            Some(ErrorCode::Cancelled.as_str().to_owned())
        );
        assert_eq!(settled.status.attempts, 0, "not run again");
    }
}
