//! The timeline of an execution (seed 003): `tool_batch_started`,
//! `policy_decision`, `run_paused`, `run_resumed`, `tool_completed` (always
//! the last event of a call) and `warning`, numbered per execution.
//!
//! Events are written through the store's ordered writer without their own
//! sync: each rides with the call write that follows it, which is synced
//! before the caller hears of it.

use crate::signal::Signal;
use std::time::Duration;

use joch_core::{EventKind, Principal, Time, ToolCall};
use joch_store::{Durability, EventRecord};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::Calls;
use crate::engine::now;
use crate::identity::rules::{Action, Collection, may_in};
use crate::{Engine, EngineError};

/// One event of an execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// 1, 2, 3... within the execution.
    #[serde(default)]
    pub sequence: u64,
    /// What happened.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// When it happened.
    pub time: Time,
    /// The seed's data fields for this type.
    pub data: Value,
}

/// What the events part keeps besides the store.
#[derive(Default)]
pub(crate) struct State {
    /// Bumped whenever an event is appended, so followers read at once.
    appended: Signal,
}

impl State {
    /// An event was appended, here or (heard from the store) on another replica.
    pub(crate) fn appended(&self) {
        self.appended.bump();
    }
}

impl Engine {
    /// Appends an event to `execution`'s timeline.
    pub(crate) async fn emit(
        &self,
        namespace: &str,
        execution: &str,
        kind: EventKind,
        data: Value,
    ) -> Result<(), EngineError> {
        let event = Event {
            sequence: 0,
            kind,
            time: now(),
            data,
        };
        let body = serde_json::to_string(&event).expect("an event serialises");
        let record = EventRecord {
            namespace: namespace.to_owned(),
            execution: execution.to_owned(),
            sequence: 0,
            body,
        };
        self.inner
            .store
            .append_event(record, Durability::Deferred)
            .await?;
        self.inner.events.appended();
        Ok(())
    }

    /// Appends an event about `call`, if it belongs to an execution.
    pub(crate) async fn emit_for(
        &self,
        call: &ToolCall,
        kind: EventKind,
        mut data: Value,
    ) -> Result<(), EngineError> {
        let Some(execution) = &call.spec.execution_ref else {
            return Ok(());
        };
        data["tool_name"] = json!(call.tool_name());
        data["tool_call_id"] = json!(call.metadata.name);
        self.emit(&call.metadata.namespace, &execution.name, kind, data)
            .await
    }
}

impl Calls<'_> {
    /// The execution's events numbered above `after`, oldest first.
    /// Events about a call of a tool `by` cannot see are left out, as if
    /// the call did not exist (their numbers skip).
    pub async fn events(
        &self,
        by: &Principal,
        namespace: &str,
        execution: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, EngineError> {
        may_in(by, namespace, &Action::Read(Collection::Executions))?;
        crate::catalog::valid_namespace(namespace)?;
        let records = self
            .inner
            .store
            .list_events(namespace, execution, after, limit)
            .await?;
        let mut seen = std::collections::HashMap::<String, bool>::new();
        let mut events = Vec::with_capacity(records.len());
        for r in records {
            let mut event: Event = serde_json::from_str(&r.body).map_err(|e| {
                EngineError::Store(joch_store::StoreError::Unavailable(format!(
                    "stored event cannot be read: {e}"
                )))
            })?;
            event.sequence = r.sequence;
            if let Some(tool) = event.data["tool_name"]
                .as_str()
                .filter(|_| by.tools.is_some())
            {
                let visible = match seen.get(tool) {
                    Some(known) => *known,
                    None => {
                        let known = self.sees_tool(by, namespace, tool).await?;
                        seen.insert(tool.to_owned(), known);
                        known
                    }
                };
                if !visible {
                    continue;
                }
            }
            events.push(event);
        }
        Ok(events)
    }

    /// Waits until new events may be available: at once when this process
    /// appends one, or after `poll` (for events written by another process).
    pub async fn wait_for_events(
        &self,
        seen: &mut tokio::sync::watch::Receiver<u64>,
        poll: Duration,
    ) {
        let _ = tokio::time::timeout(poll, seen.changed()).await;
    }

    /// A receiver to pass to [`Calls::wait_for_events`](crate::Calls::wait_for_events).
    pub fn event_notifications(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.events.appended.subscribe()
    }
}
