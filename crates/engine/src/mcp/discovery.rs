//! Upstream MCP servers: each server's tools become Tools named
//! `<server>.<tool>`, kept in step with what the server lists, with changed
//! definitions held back as `spec.discovery.onSchemaDrift` says.

use std::collections::BTreeMap;
use std::time::Duration;

use joch_core::mcp::{Reconciled, SERVER_LABEL, reconcile};
use joch_core::{
    Backend, CallError, ErrorCode, EventKind, McpServer, Object, Principal, Tool, ToolDiscovery,
    ValidationError,
};
use joch_store::{Durability, ListQuery};
use serde_json::{Value, json};

use super::Mcp;
use crate::EngineError;
use crate::clock::now;
use crate::resources::Configurable;

/// The event timeline a server's drift warnings go to:
/// `GET /v1/namespaces/{ns}/executions/mcpserver.{name}/events`.
pub fn drift_timeline(server: &str) -> String {
    format!("mcpserver.{server}")
}

/// The `policyId` recorded on a call denied because its tool's upstream
/// definition changed.
pub(crate) const SCHEMA_DRIFT_POLICY: &str = "joch.dev/schema-drift";

/// Longest wait between two attempts to reach a server that is down.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl Configurable for McpServer {
    fn check(&self) -> Result<(), ValidationError> {
        Ok(())
    }

    fn host_uses(&self) -> Vec<joch_core::host::HostUse<'_>> {
        joch_core::host::UsesHost::host_uses(self)
    }

    fn keep_status(&mut self, current: Option<&Self>) {
        self.status = current.map(|c| c.status.clone()).unwrap_or_default();
    }
}

impl Mcp {
    fn discovery(&self) -> Option<&dyn ToolDiscovery> {
        self.inner.backends.get("mcp").and_then(|b| b.discovery())
    }

    /// Tells the MCP backend what `namespace/name` is now (deleted, or
    /// written), so that this process closes the connections it holds to
    /// what the server no longer is: on the replica that wrote it, and on
    /// the others as they hear of the write.
    pub(crate) async fn mcp_server_changed(&self, namespace: &str, name: &str) {
        let Some(discovery) = self.discovery() else {
            return;
        };
        let current = match self
            .inner
            .store
            .get_object::<McpServer>(namespace, name)
            .await
        {
            Ok(server) => Some(server),
            Err(joch_store::StoreError::NotFound { .. }) => None,
            Err(e) => {
                tracing::debug!(server = name, error = %e, "connections kept: the server cannot be read");
                return;
            }
        };
        discovery
            .server_changed(namespace, name, current.as_ref())
            .await;
    }

    async fn refuse_collisions(
        &self,
        server: &McpServer,
        definitions: &[Value],
    ) -> Result<(), EngineError> {
        let namespace = &server.metadata.namespace;
        let mut seen = std::collections::HashSet::new();
        for upstream in definitions.iter().filter_map(|d| d["name"].as_str()) {
            let name = server.tool_name(upstream);
            if !seen.insert(name.clone()) {
                return Err(collision(
                    server,
                    upstream,
                    &name,
                    "another tool of the same server",
                ));
            }
            match self.inner.store.get_object::<Tool>(namespace, &name).await {
                Ok(tool) if !made_from(&tool, server) => {
                    let owner = match tool.metadata.labels.get(SERVER_LABEL) {
                        Some(other) => format!("a tool of McpServer {other:?}"),
                        None => "a Tool defined directly".to_owned(),
                    };
                    return Err(collision(server, upstream, &name, &owner));
                }
                Ok(_) | Err(joch_store::StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Folds a listing into `server.status.tools` and the Tools; returns
    /// what could not be adopted, for `status.message`.
    async fn adopt_listing(
        &self,
        server: &mut McpServer,
        definitions: Vec<Value>,
    ) -> Result<Option<String>, EngineError> {
        let action = server.spec.discovery.on_schema_drift;
        let mut states = BTreeMap::new();
        let mut problems = Vec::new();
        for definition in definitions {
            let Some(upstream) = definition.get("name").and_then(Value::as_str) else {
                continue;
            };
            let upstream = upstream.to_owned();
            let (state, outcome) = reconcile(
                server.status.tools.get(&upstream),
                &definition,
                action,
                now(),
            );
            let drifted = match outcome {
                Reconciled::Adopt { drifted } => drifted,
                Reconciled::Hold { newly_drifted } => newly_drifted,
            };
            if drifted {
                self.warn_drift(server, &upstream, &state, action).await?;
            }
            if state.accepted_hash == state.discovered_hash {
                if let Err(problem) = self.put_upstream_tool(server, &definition).await? {
                    problems.push(format!("{upstream}: {problem}"));
                }
            }
            states.insert(upstream, state);
        }
        let vanished: Vec<String> = server
            .status
            .tools
            .keys()
            .filter(|name| !states.contains_key(*name))
            .cloned()
            .collect();
        for upstream in vanished {
            self.remove_upstream_tool(server, &upstream).await?;
        }
        server.status.tools = states;
        Ok((!problems.is_empty()).then(|| problems.join("; ")))
    }

    async fn warn_drift(
        &self,
        server: &McpServer,
        upstream: &str,
        state: &joch_core::mcp::UpstreamToolState,
        action: joch_core::mcp::DriftAction,
    ) -> Result<(), EngineError> {
        tracing::warn!(
            namespace = %server.metadata.namespace,
            server = %server.metadata.name,
            tool = %upstream,
            decision = ?action,
            "upstream tool definition changed"
        );
        let message = format!(
            "the definition of {} changed upstream; onSchemaDrift is {}",
            server.tool_name(upstream),
            serde_json::to_value(action)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        );
        self.inner
            .events
            .emit(
                &server.metadata.namespace,
                &drift_timeline(&server.metadata.name),
                EventKind::Warning,
                json!({
                    "code": "schema_drift",
                    "message": message,
                    "tool_name": server.tool_name(upstream),
                    "accepted_hash": state.accepted_hash,
                    "discovered_hash": state.discovered_hash,
                    "decision": action,
                }),
            )
            .await
    }

    /// Makes or updates the Tool for an upstream definition. `Ok(Err(_))` is
    /// a definition joch cannot take (a schema that does not compile, a
    /// name taken by a Tool of someone else's).
    async fn put_upstream_tool(
        &self,
        server: &McpServer,
        definition: &Value,
    ) -> Result<Result<(), String>, EngineError> {
        let tool = match server.tool_from(definition) {
            Ok(tool) => tool,
            Err(problem) => return Ok(Err(problem)),
        };
        if let Err(e) = tool.validate().and_then(|()| tool.check()) {
            return Ok(Err(e.to_string()));
        }
        let namespace = &server.metadata.namespace;
        let existing: Option<Tool> = match self
            .inner
            .store
            .get_object(namespace, &tool.metadata.name)
            .await
        {
            Ok(existing) => Some(existing),
            Err(joch_store::StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        match existing {
            None => {
                // joch itself adopts its upstream's tool.
                self.inner
                    .resources
                    .create(&Principal::local(), namespace, tool)
                    .await?;
            }
            Some(existing) if !made_from(&existing, server) => {
                return Ok(Err(format!(
                    "a Tool named {} exists and was not made from this server",
                    tool.metadata.name
                )));
            }
            Some(existing) if existing.spec == tool.spec => {}
            Some(existing) => {
                let mut tool = tool;
                tool.metadata.resource_version = existing.metadata.resource_version;
                self.inner
                    .resources
                    .replace(
                        &Principal::local(),
                        namespace,
                        &existing.metadata.name,
                        tool,
                    )
                    .await?;
            }
        }
        Ok(Ok(()))
    }

    async fn remove_upstream_tool(
        &self,
        server: &McpServer,
        upstream: &str,
    ) -> Result<(), EngineError> {
        let namespace = &server.metadata.namespace;
        let name = server.tool_name(upstream);
        match self.inner.store.get_object::<Tool>(namespace, &name).await {
            Ok(tool) if made_from(&tool, server) => {
                self.inner
                    .store
                    .delete_object::<Tool>(namespace, &name, Some(&tool.metadata.resource_version))
                    .await?;
                self.inner.catalog.touched(joch_core::Tool::KIND);
                Ok(())
            }
            Ok(_) | Err(joch_store::StoreError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Why a call of `tool` must be denied because its upstream definition
    /// changed, if it must.
    pub(crate) async fn drift_block(&self, tool: &Tool) -> Result<Option<String>, EngineError> {
        let Backend::Mcp(backend) = &tool.spec.backend else {
            return Ok(None);
        };
        let server: McpServer = match self
            .inner
            .store
            .get_object(&tool.metadata.namespace, &backend.server)
            .await
        {
            Ok(server) => server,
            Err(joch_store::StoreError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(server
            .status
            .tools
            .get(&backend.tool)
            .and_then(|state| state.blocked(server.spec.discovery.on_schema_drift)))
    }

    /// Re-lists every server that is due: never listed, past its
    /// `refreshInterval`, or unreachable and past its backoff. Runs until the
    /// runtime stops.
    pub(crate) fn spawn_mcp_refresher(&self, tick: Duration) -> tokio::task::JoinHandle<()> {
        // Servers that say their tools changed are re-listed at once, even
        // before any MCP session listens (see `mcp_surface.rs`).
        drop(self.upstream_notices());
        let engine = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(tick);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                if let Err(e) = engine.refresh_due_servers().await {
                    tracing::warn!(error = %e, "MCP server refresh failed");
                }
            }
        })
    }

    async fn refresh_due_servers(&self) -> Result<(), EngineError> {
        if self.discovery().is_none() {
            return Ok(());
        }
        let query = ListQuery {
            namespace: String::new(),
            limit: 10_000,
            ..ListQuery::default()
        };
        let servers = self
            .inner
            .store
            .list_objects::<McpServer>(query)
            .await?
            .items;
        let at = now();
        for server in servers {
            let since = server
                .status
                .last_refresh_at
                .map(|last| Duration::from_millis(last.millis_until(at)));
            let due = match (since, server.status.phase.as_deref()) {
                (None, _) => true,
                (Some(since), Some("Unavailable")) => since >= backoff(server.status.failures),
                (Some(since), _) => server
                    .refresh_interval()
                    .is_some_and(|every| since >= every),
            };
            if due {
                let (ns, name) = (&server.metadata.namespace, &server.metadata.name);
                if let Err(e) = self.sync_server(ns, name).await {
                    tracing::warn!(namespace = %ns, server = %name, error = %e, "MCP server refresh failed");
                }
            }
        }
        Ok(())
    }
}

impl Mcp {
    /// Lists the server's tools and brings its Tools in line: new tools are
    /// made, unchanged ones refreshed from the resource's overrides, changed
    /// ones adopted or held back, vanished ones removed. A server that
    /// cannot be reached is marked `Unavailable`; its Tools stay.
    pub async fn refresh_server(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<McpServer, EngineError> {
        crate::rules::may_in(
            by,
            namespace,
            &crate::rules::Action::Write(crate::rules::Collection::McpServers),
        )?;
        self.sync_server(namespace, name).await
    }

    /// Discovers server `name`'s tools now (joch's own sync, no principal).
    pub(crate) async fn sync_server(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<McpServer, EngineError> {
        let lock = {
            let mut syncs = self.inner.syncs.lock().unwrap_or_else(|e| e.into_inner());
            syncs
                .entry(format!("{namespace}/{name}"))
                .or_default()
                .clone()
        };
        let _one_at_a_time = lock.lock().await;
        let mut server: McpServer = self.inner.store.get_object(namespace, name).await?;
        let listed = match self.discovery() {
            Some(discovery) => discovery.list_tools(&server).await,
            None => Err(CallError::new(
                ErrorCode::BackendUnavailable,
                "this joch has no MCP backend",
            )),
        };
        let at = now();
        server.status.last_refresh_at = Some(at);
        match listed {
            Err(error) => {
                server.status.phase = Some("Unavailable".to_owned());
                server.status.message = Some(error.message);
                server.status.failures = server.status.failures.saturating_add(1);
            }
            Ok(definitions) => {
                server.status.phase = Some("Connected".to_owned());
                server.status.failures = 0;
                server.status.tools_ttl_ms =
                    self.discovery().and_then(|d| d.listed_ttl_ms(&server));
                server.status.message = self.adopt_listing(&mut server, definitions).await?;
            }
        }
        match self
            .inner
            .store
            .update_object(&mut server, Durability::Sync)
            .await
        {
            Ok(()) => Ok(server),
            // Replaced while it was being listed: the replacement lists it again.
            Err(joch_store::StoreError::Conflict { .. }) => {
                Ok(self.inner.store.get_object(namespace, name).await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Creates (`replacing: None`) or replaces the McpServer named
    /// `replacing`, and lists its tools at once. A server whose tools would take the name of a Tool
    /// that is not its own (another server's, or one defined directly) is
    /// refused before anything is stored, naming both; a server that cannot
    /// be reached yet is stored, and any such clash shows in its status
    /// once it is.
    pub async fn apply_server(
        &self,
        by: &Principal,
        namespace: &str,
        replacing: Option<&str>,
        server: McpServer,
    ) -> Result<McpServer, EngineError> {
        crate::rules::may_in(
            by,
            namespace,
            &crate::rules::Action::Write(crate::rules::Collection::McpServers),
        )?;
        let mut candidate = server.clone();
        // Checked before anything is started or asked upstream.
        crate::resources::admit(namespace, &mut candidate, replacing)?;
        candidate.check()?;
        crate::identity::may_use_host(by, &self.inner.host_access, &candidate.host_uses())?;
        if let Some(Ok(definitions)) = match self.discovery() {
            Some(discovery) => Some(discovery.list_tools(&candidate).await),
            None => None,
        } {
            self.refuse_collisions(&candidate, &definitions).await?;
        }
        let stored = match replacing {
            None => self.inner.resources.create(by, namespace, server).await?,
            Some(name) => {
                self.inner
                    .resources
                    .replace(by, namespace, name, server)
                    .await?
            }
        };
        if replacing.is_some() {
            self.mcp_server_changed(namespace, &stored.metadata.name)
                .await;
        }
        self.sync_server(namespace, &stored.metadata.name).await
    }

    /// Adopts the held-back definitions of `tool` (every held tool when
    /// `None`) and lifts their quarantine.
    /// Only an admin may (see `rules.rs`).
    pub async fn accept_tools(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        tool: Option<&str>,
    ) -> Result<McpServer, EngineError> {
        crate::rules::may_in(by, namespace, &crate::rules::Action::AcceptToolChange)?;
        let mut server: McpServer = self.inner.store.get_object(namespace, name).await?;
        if let Some(tool) = tool {
            if !server.status.tools.contains_key(tool) {
                return Err(EngineError::NotFound {
                    kind: crate::NotFoundKind::UpstreamTool,
                    name: server.tool_name(tool),
                });
            }
        }
        let held: Vec<(String, Option<Value>)> = server
            .status
            .tools
            .iter()
            .filter(|(upstream, _)| tool.is_none_or(|t| t == upstream.as_str()))
            .map(|(upstream, state)| (upstream.clone(), state.pending_definition.clone()))
            .collect();
        for (upstream, pending) in held {
            if let Some(definition) = &pending {
                if let Err(problem) = self.put_upstream_tool(&server, definition).await? {
                    return Err(EngineError::Invalid(ValidationError::field(
                        format!("status.tools.{upstream}.pendingDefinition"),
                        problem,
                    )));
                }
            }
            if let Some(state) = server.status.tools.get_mut(&upstream) {
                if pending.is_some() {
                    state.accepted_hash = state.discovered_hash.clone();
                }
                state.quarantined = false;
                state.pending_definition = None;
                state.drift_detected_at = None;
            }
        }
        self.inner
            .store
            .update_object(&mut server, Durability::Sync)
            .await?;
        Ok(server)
    }

    /// Deletes a server and the Tools made from it.
    pub async fn delete_server(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
    ) -> Result<McpServer, EngineError> {
        let server: McpServer = self
            .inner
            .resources
            .delete(by, namespace, name, resource_version)
            .await?;
        for upstream in server.status.tools.keys() {
            self.remove_upstream_tool(&server, upstream).await?;
        }
        self.mcp_server_changed(namespace, name).await;
        Ok(server)
    }
}

/// True when `tool` was made by joch from `server`'s listing.
fn made_from(tool: &Tool, server: &McpServer) -> bool {
    tool.metadata.labels.get(SERVER_LABEL) == Some(&server.metadata.name)
        && matches!(&tool.spec.backend, Backend::Mcp(b) if b.server == server.metadata.name)
}

/// The refusal of a server whose tool `upstream` would be named `name`,
/// which `owner` already is.
fn collision(server: &McpServer, upstream: &str, name: &str, owner: &str) -> EngineError {
    EngineError::Conflict(format!(
        "McpServer {:?}'s tool {upstream:?} would be named {name:?}, which is {owner}; \
         set spec.toolPrefix to tell them apart",
        server.metadata.name
    ))
}

/// 250 ms after the first failure, doubling up to 30 s.
fn backoff(failures: u32) -> Duration {
    let shift = failures.saturating_sub(1).min(7);
    (Duration::from_millis(250) * (1u32 << shift)).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(1), Duration::from_millis(250));
        assert_eq!(backoff(2), Duration::from_millis(500));
        assert_eq!(backoff(4), Duration::from_secs(2));
        assert_eq!(backoff(100), MAX_BACKOFF);
    }
}
