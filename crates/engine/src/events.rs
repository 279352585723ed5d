//! The timeline of an execution (seed 003): `tool_batch_started`,
//! `policy_decision`, `run_paused`, `run_resumed`, `tool_completed` (always
//! the last event of a call) and `warning`, numbered per execution.
//!
//! Events are written through the store's ordered writer without their own
//! sync: each rides with the call write that follows it, which is synced
//! before the caller hears of it.

use std::sync::Arc;

use joch_core::{EventKind, Principal, Time, ToolCall};
use joch_store::{Durability, EventRecord, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::EngineError;
use crate::clock::now;
use crate::rules::{Action, Collection, Visibility, may_in};
use crate::signal::Signal;

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

/// The events part: appends to executions' timelines and reads them back
/// as a principal may see them.
pub(crate) struct Events {
    store: Arc<dyn Store>,
    visibility: Visibility,
    /// Bumped whenever an event is appended, so followers read at once.
    appended: Signal,
}

impl Events {
    pub(crate) fn new(store: Arc<dyn Store>, visibility: Visibility) -> Self {
        Self {
            store,
            visibility,
            appended: Signal::default(),
        }
    }

    /// An event was appended, here or (heard from the store) on another replica.
    pub(crate) fn appended(&self) {
        self.appended.bump();
    }

    /// A receiver that changes at each event appended from now on.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.appended.subscribe()
    }

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
        self.store
            .append_event(record, Durability::Deferred)
            .await?;
        self.appended();
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

    /// The execution's events numbered above `after`, oldest first, if `by`
    /// may read executions. Events about a call of a tool `by` cannot see
    /// are left out, as if the call did not exist (their numbers skip).
    pub(crate) async fn read(
        &self,
        by: &Principal,
        namespace: &str,
        execution: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, EngineError> {
        may_in(by, namespace, &Action::Read(Collection::Executions))?;
        crate::resources::valid_namespace(namespace)?;
        let records = self
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
                        let known = self.visibility.sees_tool(by, namespace, tool).await?;
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
}
