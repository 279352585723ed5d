//! The seam between the engine and whatever executes a tool.
//!
//! The engine looks up the `ToolBackend` registered under a tool's
//! `spec.backend.type` and hands it an [`Invocation`]. A backend only
//! executes: recording, policy, approvals and idempotency happen around it in
//! the engine, identically for every backend (webhook, declarative actions,
//! upstream MCP server).

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::{CallError, Tool};

/// Everything a backend needs to execute one call.
#[derive(Debug, Clone, Copy)]
pub struct Invocation<'a> {
    /// The tenant.
    pub namespace: &'a str,
    /// The call id (`ToolCall.metadata.name`).
    pub call_id: &'a str,
    /// The tool, as it is at this resourceVersion.
    pub tool: &'a Tool,
    /// The normalised, validated arguments.
    pub args: &'a Map<String, Value>,
    /// `ToolCall.status.checksum`.
    pub checksum: &'a str,
    /// 1 for the first invocation of this call.
    pub attempt: u32,
    /// The call's idempotency key, forwarded to backends that can pass it on
    /// (a webhook gets it as the `Idempotency-Key` header).
    pub idempotency_key: Option<&'a str>,
    /// What a declarative tool reads: its Endpoints and its context. `None`
    /// for other backends.
    pub actions: Option<&'a ActionInputs>,
    /// The upstream server of an MCP tool, as stored. `None` for other backends.
    pub mcp_server: Option<&'a crate::McpServer>,
    /// Where to report output while the tool runs (a streamed response's
    /// lines), before the final result; `None` when nobody listens.
    pub chunks: Option<&'a dyn OutputChunks>,
    /// The client that made the call, when the upstream of an MCP tool may
    /// ask it something during the call (`sampling/createMessage`,
    /// `elicitation/create`) or it may cancel the call. Always given by
    /// the engine, which records each exchange.
    pub client: Option<&'a std::sync::Arc<dyn crate::mcp_surface::CallClient>>,
    /// The end user whose own upstream token an MCP tool's server takes
    /// (the call's `status.upstreamUser`), for servers with per-user auth.
    pub upstream_user: Option<&'a str>,
    /// The round of an upstream's `input_required` the call's client has
    /// just answered (`status.inputRequired`, its `responses` set): the
    /// call is sent again with the answers and the upstream's
    /// `requestState`. `None` for every first sending.
    pub input: Option<&'a crate::mcp_surface::InputRound>,
}

/// Takes a running tool's output as it is produced. Reporting never blocks
/// and never fails the call: chunks are for watchers, and the final result,
/// assembled from the same output, is what is recorded.
pub trait OutputChunks: Send + Sync + std::fmt::Debug {
    /// One piece of output, in order.
    fn chunk(&self, data: Value);
}

/// The resources and state a declarative tool runs with, loaded by the engine.
#[derive(Debug, Clone, Default)]
pub struct ActionInputs {
    /// The namespace's Endpoints the tool names, by name.
    pub endpoints: std::collections::BTreeMap<String, crate::endpoint::EndpointSpec>,
    /// `{user, workflow, agents, flags}`: the execution's context, with `user` filled in.
    pub context: Map<String, Value>,
    /// The end user whose own upstream tokens the call uses (the call's
    /// `status.upstreamUser`), for Endpoints with per-user `oauth2`.
    pub upstream_user: Option<String>,
}

/// A tool that ran and failed, or could not be reached: recorded as the
/// call's `status.error`, never lost.
pub type ToolFailure = CallError;

/// What a backend answered: JSON, or a body that is not JSON (text such
/// as JSON lines, or media such as an image), with its media type.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutput {
    /// A JSON value (the usual case).
    Json(Value),
    /// Bytes and their `Content-Type`.
    Bytes {
        /// IANA media type, e.g. `image/png` or `application/x-ndjson`.
        media_type: String,
        /// The body.
        bytes: Vec<u8>,
    },
}

/// Executes tools of one `spec.backend.type`.
#[async_trait]
pub trait ToolBackend: Send + Sync {
    /// The `spec.backend.type` this backend serves, e.g. `rest`.
    fn kind(&self) -> &'static str;

    /// Runs the tool once. `Ok` is the tool's output; `Err` is a failure that
    /// the engine records as a Failed call. Must not retry a tool that is not
    /// idempotent.
    async fn invoke(&self, invocation: Invocation<'_>) -> Result<Value, ToolFailure>;

    /// Like [`ToolBackend::invoke`], for backends whose tools may answer
    /// bytes that are not JSON (a webhook's image or text body); the engine
    /// calls this one. The default wraps `invoke`.
    async fn invoke_output(&self, invocation: Invocation<'_>) -> Result<ToolOutput, ToolFailure> {
        self.invoke(invocation).await.map(ToolOutput::Json)
    }

    /// The backend's way to list a server's tools, if it has servers.
    fn discovery(&self) -> Option<&dyn ToolDiscovery> {
        None
    }

    /// The backend's way to reach a server's resources, prompts,
    /// completion and logging, if it has servers.
    fn surface(&self) -> Option<&dyn crate::mcp_surface::McpSurface> {
        None
    }
}

/// Lists the tools an upstream server offers.
#[async_trait]
pub trait ToolDiscovery: Send + Sync {
    /// The server's tool definitions, each as the server sent it (MCP's
    /// `Tool` shape: `name`, `description`, `inputSchema`, `annotations`...).
    async fn list_tools(&self, server: &crate::McpServer) -> Result<Vec<Value>, ToolFailure>;

    /// The `ttlMs` (SEP-2549) of the last successful [`Self::list_tools`]
    /// of `server` here, if it gave one.
    fn listed_ttl_ms(&self, _server: &crate::McpServer) -> Option<u64> {
        None
    }

    /// The McpServer `namespace/name` was written or deleted, here or on
    /// another replica; `current` is what is stored now (`None`: it was
    /// deleted). What this process holds open for anything else (its
    /// connections, sessions, streams) is closed.
    async fn server_changed(
        &self,
        _namespace: &str,
        _name: &str,
        _current: Option<&crate::McpServer>,
    ) {
    }
}
