//! What a recorded call needs before its backend may run: the backend
//! itself, a declarative tool's endpoints and context, the MCP server it
//! reaches, and the namespace's leave to go where it goes. A call that
//! lacks one settles `Failed` with the reason, without running.

use std::sync::Arc;

use joch_core::{
    ActionInputs, Backend, CallError, ErrorCode, McpServer, Tool, ToolBackend, ToolCall,
};

use crate::calls::context::missing_endpoints;
use crate::{Calls, EngineError};

/// A call ready to run.
pub(in crate::calls) struct Prepared {
    pub(in crate::calls) kind: &'static str,
    pub(in crate::calls) backend: Arc<dyn ToolBackend>,
    /// A declarative tool's endpoints and execution context.
    pub(in crate::calls) actions: Option<ActionInputs>,
    /// The server an MCP tool's call goes to.
    pub(in crate::calls) mcp_server: Option<McpServer>,
}

impl Calls {
    /// What `call` of `tool` needs to run, or why it cannot (`Ok(Err(..))`).
    pub(in crate::calls) async fn prepare(
        &self,
        tool: &Tool,
        call: &ToolCall,
    ) -> Result<Result<Prepared, CallError>, EngineError> {
        if let Backend::Agent {} = tool.spec.backend {
            return Ok(Err(CallError::new(
                ErrorCode::RunByAgent,
                format!(
                    "tool {:?} is run by the agent itself: report its calls through /v1/hooks/aos or /v1/hooks/claude",
                    tool.metadata.name
                ),
            )));
        }
        let kind = tool.spec.backend.kind();
        let Some(backend) = self.inner.backends.get(kind).cloned() else {
            return Ok(Err(CallError::new(
                ErrorCode::BackendUnavailable,
                format!("no {kind:?} backend is configured"),
            )));
        };
        let actions = match &tool.spec.backend {
            Backend::Actions(actions) => {
                let inputs = self.action_inputs(call, actions).await?;
                if let Some(error) = missing_endpoints(actions, &inputs) {
                    return Ok(Err(error));
                }
                Some(inputs)
            }
            _ => None,
        };
        let mcp_server = match &tool.spec.backend {
            Backend::Mcp(mcp) => match self.mcp_server(call, &mcp.server).await? {
                Ok(server) => Some(server),
                Err(missing) => return Ok(Err(missing)),
            },
            _ => None,
        };
        let prepared = Prepared {
            kind,
            backend,
            actions,
            mcp_server,
        };
        if let Some(error) = self.outbound_refusal(call, tool, &prepared).await? {
            return Ok(Err(error));
        }
        Ok(Ok(prepared))
    }

    async fn mcp_server(
        &self,
        call: &ToolCall,
        name: &str,
    ) -> Result<Result<McpServer, CallError>, EngineError> {
        let namespace = &call.metadata.namespace;
        match self.inner.catalog.mcp_server(namespace, name).await {
            Ok(server) => Ok(Ok(McpServer::clone(&server))),
            Err(joch_store::StoreError::NotFound { .. }) => Ok(Err(CallError::new(
                ErrorCode::McpServerMissing,
                format!("McpServer {name:?} no longer exists"),
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// Why the call may not go where its tool sends it, under the
    /// namespace's `outbound.allowedHosts`.
    async fn outbound_refusal(
        &self,
        call: &ToolCall,
        tool: &Tool,
        prepared: &Prepared,
    ) -> Result<Option<CallError>, EngineError> {
        let urls: Vec<&str> = match &tool.spec.backend {
            Backend::Rest(rest) => vec![rest.endpoint.url.as_str()],
            Backend::Mcp(_) => (prepared.mcp_server.as_ref())
                .and_then(|s| s.spec.http.as_ref())
                .map(|h| vec![h.url.as_str()])
                .unwrap_or_default(),
            Backend::Actions(_) => (prepared.actions.as_ref())
                .map(|a| a.endpoints.values().map(|e| e.url.as_str()).collect())
                .unwrap_or_default(),
            Backend::Agent {} | Backend::Noop {} => Vec::new(),
        };
        if urls.is_empty() {
            return Ok(None);
        }
        let settings = self
            .inner
            .catalog
            .namespace(&call.metadata.namespace)
            .await?;
        let Some(outbound) = &settings.spec.outbound else {
            return Ok(None);
        };
        Ok(urls
            .into_iter()
            .find_map(|url| outbound.allows(url).err())
            .map(|reason| CallError::new(ErrorCode::OutboundNotAllowed, reason)))
    }
}
