//! The catalog: the configuration every call reads (tools and their
//! compiled schemas, policies, budgets, namespace settings, rate limits and
//! API tokens), written through `resources/writes.rs` and read through
//! snapshots of the store (`snapshots.rs`), so that a call pays no store
//! read for each; with the compiled schemas (`schema.rs`) and rate limiters
//! (`limits.rs`). Below every part that reads configuration.
//!
//! Its state is its own: other parts ask it for a snapshot and tell it when
//! a kind was written ([`Catalog::touched`]), here or on another replica.

use std::collections::HashMap;
use std::sync::Arc;

use joch_core::detect::Detectors;
use joch_core::mcp_surface::{McpOperation, surface_server};
use joch_core::token::ApiToken;
use joch_core::{
    Budget, CallMode, Endpoint, McpServer, Namespace, Object, Policy, Principal, PrincipalKind,
    Tool, ToolCall, ValidationError,
};
use joch_store::{ListQuery, Store, StoreError, StoreErrorKind};
use tokio::sync::watch;

mod limits;
pub(crate) mod schema;
mod snapshots;

use crate::EngineError;
use limits::Limiters;
use schema::{Compiled, SchemaCache};
use snapshots::Snapshots;

/// Most items of one kind a namespace's snapshot holds.
const MAX_LISTED: usize = 1000;

pub(crate) struct Catalog {
    store: Arc<dyn Store>,
    /// Tools by `namespace/name`.
    tools: Snapshots<Tool>,
    /// Endpoints and McpServers by `namespace/name`: the upstreams calls go to.
    endpoints: Snapshots<Endpoint>,
    mcp_servers: Snapshots<McpServer>,
    schemas: SchemaCache,
    /// Each namespace's policies, in name order.
    policies: Snapshots<Vec<Policy>>,
    /// Whether any of each namespace's policies reads `cost.*`.
    spend_readers: Snapshots<bool>,
    /// Each namespace's detectors, when any of its policies reads
    /// detections (`None`: detectors cost its calls nothing).
    detectors: Snapshots<Option<Arc<Detectors>>>,
    budgets: Snapshots<Vec<Budget>>,
    namespaces: Snapshots<Namespace>,
    limiters: Snapshots<Limiters>,
    /// Every token by hash, under the key `all`.
    tokens: Snapshots<TokenIndex>,
    /// Bumped whenever a Tool is created, replaced or deleted, so MCP
    /// sessions can tell their clients the tool list changed.
    tools_changed: watch::Sender<u64>,
}

impl Catalog {
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            tools: Snapshots::default(),
            endpoints: Snapshots::default(),
            mcp_servers: Snapshots::default(),
            schemas: SchemaCache::default(),
            policies: Snapshots::default(),
            spend_readers: Snapshots::default(),
            detectors: Snapshots::default(),
            budgets: Snapshots::default(),
            namespaces: Snapshots::default(),
            limiters: Snapshots::default(),
            tokens: Snapshots::default(),
            tools_changed: watch::channel(0).0,
        }
    }

    /// Drops the snapshots a write of `kind` made stale.
    pub(crate) fn touched(&self, kind: &str) {
        match kind {
            Tool::KIND => {
                self.tools.invalidate();
                self.tools_changed.send_modify(|n| *n = n.wrapping_add(1));
            }
            Policy::KIND => {
                self.policies.invalidate();
                self.spend_readers.invalidate();
                self.detectors.invalidate();
            }
            Endpoint::KIND => self.endpoints.invalidate(),
            McpServer::KIND => self.mcp_servers.invalidate(),
            Budget::KIND => self.budgets.invalidate(),
            Namespace::KIND => {
                self.namespaces.invalidate();
                self.limiters.invalidate();
                self.detectors.invalidate();
            }
            ApiToken::KIND => self.tokens.invalidate(),
            _ => {}
        }
    }

    /// A receiver that changes whenever a Tool of any namespace is created,
    /// replaced or deleted.
    pub(crate) fn tool_changes(&self) -> watch::Receiver<u64> {
        self.tools_changed.subscribe()
    }

    /// The Tool, loaded once per write.
    pub(crate) async fn tool(&self, namespace: &str, name: &str) -> Result<Arc<Tool>, StoreError> {
        self.named(&self.tools, namespace, name).await
    }

    /// The Endpoint, loaded once per write.
    pub(crate) async fn endpoint(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Endpoint>, StoreError> {
        self.named(&self.endpoints, namespace, name).await
    }

    /// The McpServer, loaded once per write.
    pub(crate) async fn mcp_server(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<McpServer>, StoreError> {
        self.named(&self.mcp_servers, namespace, name).await
    }

    async fn named<T: Object>(
        &self,
        snapshots: &Snapshots<T>,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<T>, StoreError> {
        let key = format!("{namespace}/{name}");
        snapshots
            .get_or_load(&key, self.store.get_object(namespace, name))
            .await
    }

    /// The tool's schemas, compiled once per version.
    pub(crate) fn schemas(&self, tool: &Tool) -> Result<Arc<Compiled>, ValidationError> {
        self.schemas.get(tool)
    }

    /// Every policy of the namespace, in name order (the order decisions are
    /// combined and recorded in).
    pub(crate) async fn policies(&self, namespace: &str) -> Result<Arc<Vec<Policy>>, EngineError> {
        self.policies
            .get_or_load(namespace, async {
                let mut policies = self.list::<Policy>(namespace).await?;
                policies.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                Ok(policies)
            })
            .await
    }

    /// Whether any of the namespace's `policies` reads `cost.*`, answered
    /// once per policy snapshot.
    pub(crate) async fn reads_spend(
        &self,
        namespace: &str,
        policies: &[Policy],
        reads: fn(&Policy) -> bool,
    ) -> Result<bool, EngineError> {
        let answer = self
            .spend_readers
            .get_or_load(namespace, async {
                Ok::<_, EngineError>(policies.iter().any(reads))
            })
            .await?;
        Ok(*answer)
    }

    /// The namespace's detectors when one of `policies` reads them (`reads`);
    /// else `None`.
    pub(crate) async fn detectors(
        &self,
        namespace: &str,
        policies: &[Policy],
        reads: fn(&Policy) -> bool,
    ) -> Result<Option<Arc<Detectors>>, EngineError> {
        let loaded = self
            .detectors
            .get_or_load(namespace, async {
                if !policies.iter().any(reads) {
                    return Ok::<_, EngineError>(None);
                }
                let settings = self.namespace(namespace).await?;
                let detectors = Detectors::new(&settings.spec.detectors)
                    .map_err(|e| ValidationError::field("spec.detectors", e.to_string()))?;
                Ok(Some(Arc::new(detectors)))
            })
            .await?;
        Ok(Option::clone(&loaded))
    }

    /// The namespace's budgets.
    pub(crate) async fn budgets(&self, namespace: &str) -> Result<Arc<Vec<Budget>>, EngineError> {
        self.budgets
            .get_or_load(namespace, async { self.list::<Budget>(namespace).await })
            .await
    }

    /// The namespace's settings (defaults when it has none stored).
    pub(crate) async fn namespace(&self, namespace: &str) -> Result<Arc<Namespace>, EngineError> {
        self.namespaces
            .get_or_load(namespace, async {
                match self
                    .store
                    .get_object::<Namespace>(namespace, namespace)
                    .await
                {
                    Ok(ns) => Ok(ns),
                    Err(e) if e.kind() == StoreErrorKind::NotFound => {
                        Ok(Namespace::named(namespace))
                    }
                    Err(e) => Err(e.into()),
                }
            })
            .await
    }

    /// The namespace's rate limits, parsed.
    pub(crate) async fn limiters(&self, namespace: &str) -> Result<Arc<Limiters>, EngineError> {
        self.limiters
            .get_or_load(namespace, async {
                let settings = self.namespace(namespace).await?;
                Ok::<_, EngineError>(Limiters::of(&settings.spec.rate_limits))
            })
            .await
    }

    /// Every token by hash.
    pub(crate) async fn tokens(&self) -> Result<Arc<TokenIndex>, EngineError> {
        self.tokens
            .get_or_load("all", async {
                let query = ListQuery {
                    kind: ApiToken::KIND.to_owned(),
                    limit: 100_000,
                    ..ListQuery::default()
                };
                let tokens = self.store.list_objects::<ApiToken>(query).await?.items;
                Ok::<_, EngineError>(index(tokens))
            })
            .await
    }

    async fn list<T: Object>(&self, namespace: &str) -> Result<Vec<T>, EngineError> {
        let query = ListQuery {
            namespace: namespace.to_owned(),
            limit: MAX_LISTED,
            ..ListQuery::default()
        };
        Ok(self.store.list_objects::<T>(query).await?.items)
    }
}

/// Every token, by hash.
pub(crate) type TokenIndex = HashMap<String, Principal>;

/// The principal each token stands for, by the token's hash.
pub(crate) fn index(tokens: Vec<ApiToken>) -> TokenIndex {
    tokens
        .into_iter()
        .map(|t| {
            let principal = Principal {
                kind: PrincipalKind::Token,
                name: t.metadata.name.clone(),
                namespaces: joch_core::Namespaces::one(t.metadata.namespace.clone()),
                role: t.spec.role,
                tools: t.spec.tools.clone(),
                presented: Default::default(),
            };
            (t.spec.hash, principal)
        })
        .collect()
}

impl Catalog {
    /// The Tool `call` names: the namespace's Tool of that name; for an MCP
    /// `resources/read` or `prompts/get`, the surface tool made from its
    /// server (read from the store, not a snapshot); or, in hook mode, an
    /// unregistered one: the agent may run tools joch has never heard of.
    pub(crate) async fn resolve_tool(
        &self,
        namespace: &str,
        call: &ToolCall,
    ) -> Result<Arc<Tool>, EngineError> {
        let operation = call.spec.operation;
        if operation != McpOperation::CallTool {
            let not_found = || EngineError::NotFound {
                kind: crate::NotFoundKind::Tool,
                name: call.tool_name().to_owned(),
            };
            let server = surface_server(call.tool_name(), operation).ok_or_else(not_found)?;
            let server: McpServer = match self.store.get_object(namespace, server).await {
                Ok(server) => server,
                Err(StoreError::NotFound { .. }) => return Err(not_found()),
                Err(e) => return Err(e.into()),
            };
            if let Some(tool) = server.surface_tool(operation) {
                return Ok(Arc::new(tool));
            }
        }
        match self.tool(namespace, call.tool_name()).await {
            Ok(tool) => Ok(tool),
            Err(StoreError::NotFound { .. }) if call.spec.mode == CallMode::Hook => {
                Ok(Arc::new(Tool::unregistered(namespace, call.tool_name())))
            }
            Err(e) => Err(e.into()),
        }
    }
}
