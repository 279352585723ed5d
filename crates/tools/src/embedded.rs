//! The whole gateway in-process, on a SQLite file.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use joch_core::{Approval, ApprovalPhase, Endpoint, Policy, Principal, Tool};
use joch_engine::{
    ApprovalDecision, Configurable, Engine, EngineConfig, ListParams, Running, Workers,
};
use serde_json::Value;

use crate::{
    Error, StoreLocation, ToolCall, ToolDefinition, ToolExecutor, ToolOutput, open_engine,
};

/// joch's call path running in this process: records, policies, approvals
/// and idempotency on a SQLite file, without a server. Cheap to clone.
#[derive(Clone)]
pub struct EmbeddedGateway {
    engine: Engine,
    /// Its workers (MCP refresh, key purge, ...), stopped with the last clone.
    _running: Arc<Running>,
    namespace: String,
    agent: Option<String>,
    execution: Option<String>,
    principal: Principal,
}

impl EmbeddedGateway {
    /// Opens (or creates) the ledger at `path`, serving `namespace`. Calls
    /// a crash left unfinished are reconciled first, as `joch serve` does.
    pub async fn open(path: impl AsRef<Path>, namespace: &str) -> Result<Self, Error> {
        let location = StoreLocation::Sqlite(path.as_ref().to_owned());
        let running = open_engine(&location, EngineConfig::default(), Workers::default()).await?;
        Ok(Self {
            engine: running.engine().clone(),
            _running: Arc::new(running),
            namespace: namespace.to_owned(),
            agent: None,
            execution: None,
            principal: Principal::local(),
        })
    }

    /// Acts as `principal` (default: the local caller, which has no
    /// identity): its calls are recorded as its own, its tool selector
    /// applies, and it cannot decide a call it made.
    pub fn with_principal(mut self, principal: Principal) -> Self {
        self.principal = principal;
        self
    }

    /// Records the calls as made by `agent`.
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// Records the calls as part of the run `execution`.
    pub fn with_execution(mut self, execution: impl Into<String>) -> Self {
        self.execution = Some(execution.into());
        self
    }

    /// The engine, for everything the gateway does not wrap (replay,
    /// events, costs, audit).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Creates a resource (a `Tool`, `Policy`, `Endpoint`) in the namespace.
    pub async fn apply<T: Configurable>(&self, resource: T) -> Result<T, Error> {
        Ok(self
            .engine
            .resources()
            .create(&self.principal, &self.namespace, resource)
            .await?)
    }

    /// Creates a resource from its manifest (YAML's or JSON's data model),
    /// by its `kind`: `Tool` (or seed 002's tool JSON), `Policy`, `Endpoint`.
    pub async fn apply_manifest(&self, manifest: Value) -> Result<(), Error> {
        fn read<T: Configurable>(manifest: Value) -> Result<T, Error> {
            serde_json::from_value(T::upgrade(manifest))
                .map_err(|e| Error::Invalid(format!("not a {}: {e}", T::KIND)))
        }
        let kind = manifest
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("Tool");
        match kind {
            "Tool" => self.apply(read::<Tool>(manifest)?).await.map(drop),
            "Policy" => self.apply(read::<Policy>(manifest)?).await.map(drop),
            "Endpoint" => self.apply(read::<Endpoint>(manifest)?).await.map(drop),
            other => Err(Error::Invalid(format!(
                "cannot apply a {other}: Tool, Policy or Endpoint"
            ))),
        }
    }

    /// Approvals waiting for a person, of the calls the gateway's
    /// principal sees.
    pub async fn pending_approvals(&self) -> Result<Vec<Approval>, Error> {
        let all = self
            .engine
            .approvals()
            .read_all(&self.principal, &self.namespace, ListParams::default())
            .await?;
        Ok(all
            .items
            .into_iter()
            .filter(|a| a.status.phase == ApprovalPhase::Pending)
            .collect())
    }

    /// Cancels call `name` as the gateway's principal, which may cancel the
    /// calls it made (an admin any): one waiting for a person never runs,
    /// a running one is stopped; it settles `Failed` with `error.code:
    /// cancelled`. Returns the call as it then stands.
    pub async fn cancel(&self, name: &str) -> Result<joch_core::ToolCall, Error> {
        Ok(self
            .engine
            .calls()
            .cancel(&self.principal, &self.namespace, name)
            .await?)
    }

    /// Approves a paused call; the call then runs, and its caller gets the
    /// result. Recorded under `by` for the local caller, else under the
    /// gateway's principal.
    pub async fn approve(&self, approval: &str, by: &str) -> Result<Approval, Error> {
        let decision = ApprovalDecision {
            by: by.to_owned(),
            ..ApprovalDecision::default()
        };
        Ok(self
            .engine
            .approvals()
            .approve(&self.principal, &self.namespace, approval, decision)
            .await?)
    }

    /// Denies a paused call as `by`, telling the model `message`.
    pub async fn deny(&self, approval: &str, by: &str, message: &str) -> Result<Approval, Error> {
        let decision = ApprovalDecision {
            by: by.to_owned(),
            message: Some(message.to_owned()),
            ..ApprovalDecision::default()
        };
        Ok(self
            .engine
            .approvals()
            .reject(&self.principal, &self.namespace, approval, decision)
            .await?)
    }
}

#[async_trait]
impl ToolExecutor for EmbeddedGateway {
    async fn tool_definitions(&self) -> Result<Vec<ToolDefinition>, Error> {
        let tools = self
            .engine
            .resources()
            .list_tools(&self.principal, &self.namespace, ListParams::default())
            .await?;
        Ok(tools.items.iter().map(ToolDefinition::from).collect())
    }

    async fn execute_tool_call(&self, call: &ToolCall) -> Result<ToolOutput, Error> {
        let manifest = call.manifest(self.agent.as_deref(), self.execution.as_deref());
        let record = serde_json::from_value(manifest)
            .map_err(|e| Error::Invalid(format!("not a ToolCall: {e}")))?;
        let outcome = self
            .engine
            .calls()
            .call(&self.principal, &self.namespace, record)
            .await?;
        let replayed = outcome.replayed;
        Ok(ToolOutput::of(call, outcome.into_response(), replayed))
    }
}
