//! The state declarative tools run with: their Endpoints, and the call
//! context of their execution, which they change through `contextChanges`
//! that this module persists.
//!
//! Concurrent calls of one execution never lose each other's changes: the
//! context is updated conditionally on its `resourceVersion`, and on a
//! conflict the changes are applied again to the newer copy.

use joch_core::actions::{ActionsBackend, CallContext, ContextChange};
use joch_core::{ActionInputs, CallError, ErrorCode, Execution, ObjectMeta, ToolCall};
use joch_store::{Durability, StoreErrorKind};
use serde_json::{Map, Value, json};

use crate::{Calls, EngineError};

/// Attempts at a conditional context write before giving up.
const MAX_RETRIES: usize = 100;

impl Calls {
    /// Loads the Endpoints a declarative tool names and its execution's context.
    pub(in crate::calls) async fn action_inputs(
        &self,
        call: &ToolCall,
        backend: &ActionsBackend,
    ) -> Result<ActionInputs, EngineError> {
        let ns = &call.metadata.namespace;
        let mut inputs = ActionInputs {
            upstream_user: call.status.upstream_user.clone(),
            ..ActionInputs::default()
        };
        for (_, name) in backend.endpoints() {
            match self.inner.catalog.endpoint(ns, name).await {
                Ok(endpoint) => {
                    inputs
                        .endpoints
                        .insert(name.to_owned(), endpoint.spec.clone());
                }
                Err(e) if e.kind() == StoreErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        let execution = call.spec.execution_ref.as_ref().map(|r| r.name.as_str());
        let mut context = match execution {
            Some(name) => self
                .stored_context(ns, name)
                .await?
                .map(|c| c.data)
                .unwrap_or_default(),
            None => Map::new(),
        };
        if !context.contains_key("user") {
            let from_call = call
                .spec
                .context
                .as_ref()
                .and_then(|c| c.get("user"))
                .cloned();
            let from_run = match (from_call.is_none(), execution) {
                (true, Some(name)) => self
                    .inner
                    .resources
                    .get::<Execution>(ns, name)
                    .await
                    .ok()
                    .and_then(|e| e.spec.user),
                _ => None,
            };
            context.insert(
                "user".to_owned(),
                from_call.or(from_run).unwrap_or_else(|| json!({})),
            );
        }
        if let (Some(Value::Object(user)), Some(caller)) =
            (context.get_mut("user"), &call.spec.caller_id)
        {
            user.entry("id").or_insert_with(|| json!(caller));
        }
        for scope in ["workflow", "agents", "flags"] {
            context.entry(scope).or_insert_with(|| json!({}));
        }
        inputs.context = context;
        Ok(inputs)
    }

    async fn stored_context(
        &self,
        ns: &str,
        execution: &str,
    ) -> Result<Option<CallContext>, EngineError> {
        match self.inner.store.get_object(ns, execution).await {
            Ok(context) => Ok(Some(context)),
            Err(e) if e.kind() == StoreErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Persists what a declarative tool changed: its context changes (per
    /// execution) and a handoff (the execution's active agent).
    pub(in crate::calls) async fn persist_actions_outcome(
        &self,
        call: &ToolCall,
        result: &Value,
    ) -> Result<(), EngineError> {
        let Some(execution) = call.spec.execution_ref.as_ref().map(|r| r.name.clone()) else {
            return Ok(());
        };
        let ns = call.metadata.namespace.clone();
        let changes: Vec<ContextChange> =
            serde_json::from_value(result["contextChanges"].clone()).unwrap_or_default();
        if !changes.is_empty() {
            self.apply_changes(&ns, &execution, &changes).await?;
        }
        if let Some(agent) = result.pointer("/handoff/agent").and_then(Value::as_str) {
            self.record_handoff(&ns, &execution, agent).await?;
        }
        Ok(())
    }

    async fn apply_changes(
        &self,
        ns: &str,
        execution: &str,
        changes: &[ContextChange],
    ) -> Result<(), EngineError> {
        for _ in 0..MAX_RETRIES {
            let written = match self.stored_context(ns, execution).await? {
                Some(mut context) => {
                    changes.iter().for_each(|c| c.apply(&mut context.data));
                    self.inner
                        .store
                        .update_object(&mut context, Durability::Deferred)
                        .await
                }
                None => {
                    let mut context = CallContext {
                        api_version: joch_core::API_VERSION.to_owned(),
                        kind: "CallContext".to_owned(),
                        metadata: ObjectMeta {
                            name: execution.to_owned(),
                            namespace: ns.to_owned(),
                            ..ObjectMeta::default()
                        },
                        data: Map::new(),
                    };
                    changes.iter().for_each(|c| c.apply(&mut context.data));
                    self.inner
                        .store
                        .create_object(&mut context, Durability::Deferred)
                        .await
                }
            };
            match written {
                Ok(()) => return Ok(()),
                Err(e)
                    if matches!(
                        e.kind(),
                        StoreErrorKind::Conflict | StoreErrorKind::AlreadyExists
                    ) =>
                {
                    // Another call of the execution wrote first; its write may not be
                    // visible to readers until its commit lands.
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(EngineError::Contended(format!(
            "the context of execution {execution:?} is too contended to update"
        )))
    }

    async fn record_handoff(
        &self,
        ns: &str,
        execution: &str,
        agent: &str,
    ) -> Result<(), EngineError> {
        for _ in 0..MAX_RETRIES {
            let mut run = self.execution(ns, execution).await?;
            run.status.active_agent = Some(agent.to_owned());
            match self
                .inner
                .store
                .update_object(&mut run, Durability::Deferred)
                .await
            {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == StoreErrorKind::Conflict => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(EngineError::Contended(format!(
            "execution {execution:?} is too contended to record a handoff"
        )))
    }
}

/// A declarative tool whose Endpoint vanished after it was created.
pub(in crate::calls) fn missing_endpoints(
    backend: &ActionsBackend,
    inputs: &ActionInputs,
) -> Option<CallError> {
    let missing: Vec<&str> = backend
        .endpoints()
        .into_iter()
        .map(|(_, n)| n)
        .filter(|n| !inputs.endpoints.contains_key(*n))
        .collect();
    (!missing.is_empty()).then(|| {
        CallError::new(
            ErrorCode::EndpointNotFound,
            format!("no Endpoint {} in the namespace", missing.join(", ")),
        )
    })
}
