//! The MCP front's reach into upstream servers beyond tools.
//!
//! - Resource reads and prompt gets are calls of a server's surface tool
//!   (`<server>:resource`, `<server>:prompt`, see `joch_core::mcp_surface`):
//!   the catalog (`Catalog::resolve_tool`) makes that tool from the `McpServer`,
//!   and the call then takes the ordinary path (admission, policies,
//!   record, metrics, audit).
//! - Listing, completion, subscriptions and the log level are not calls:
//!   [`Mcp::request`](crate::Mcp::request) checks the caller acts in the namespace and
//!   passes them on.
//! - During a call, what the upstream asks the caller (sampling,
//!   elicitation) goes to the client attached to the call
//!   ([`Mcp::attach_client`](crate::Mcp::attach_client)) through [`RecordedClient`], which records
//!   every exchange as an `mcp_exchange` event, redacted as the tool's
//!   `observability` says, and refuses what the client cannot answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use joch_core::mcp_surface::{
    CallClient, ClientCapabilities, McpOperation, McpSurface, UpstreamNotices,
};
use joch_core::redact::recorded_value;
use joch_core::{
    CallError, ErrorCode, EventKind, McpServer, Observability, Principal, Tool, ToolCall,
};
use joch_store::ListQuery;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use super::Mcp;
use crate::EngineError;
use crate::rules;

/// Notices kept for a slow front session before it misses some.
const NOTICE_QUEUE: usize = 256;

/// What the engine keeps for the MCP front: the clients attached to
/// running calls and the channel of upstream notifications.
#[derive(Default)]
pub(crate) struct Relays {
    /// By `namespace/call`.
    clients: Mutex<HashMap<String, Arc<dyn CallClient>>>,
    notices: OnceLock<broadcast::Sender<UpstreamNotice>>,
}

/// A notification of an upstream server, for the front's sessions.
#[derive(Debug, Clone)]
pub struct UpstreamNotice {
    /// The server's namespace.
    pub namespace: String,
    /// The `McpServer`'s name.
    pub server: String,
    /// e.g. `notifications/resources/updated`.
    pub method: String,
    /// As the server sent them.
    pub params: Value,
}

struct Broadcast(broadcast::Sender<UpstreamNotice>);

impl UpstreamNotices for Broadcast {
    fn notice(&self, namespace: &str, server: &str, method: &str, params: Value) {
        let _ = self.0.send(UpstreamNotice {
            namespace: namespace.to_owned(),
            server: server.to_owned(),
            method: method.to_owned(),
            params,
        });
    }
}

/// The client attached to a call while this lives.
pub struct AttachedClient {
    engine: Mcp,
    key: String,
}

impl Drop for AttachedClient {
    fn drop(&mut self) {
        self.engine.relays().remove(&self.key);
    }
}

impl Mcp {
    fn relays(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<dyn CallClient>>> {
        self.inner
            .relays
            .clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn surface(&self) -> Result<&dyn McpSurface, CallError> {
        self.inner
            .backends
            .get("mcp")
            .and_then(|b| b.surface())
            .ok_or_else(|| {
                CallError::new(
                    ErrorCode::BackendUnavailable,
                    "this joch has no MCP backend",
                )
            })
    }

    /// The client an MCP tool's backend talks to during `call`: the
    /// attached one (if any), recording each exchange. It cancels the call
    /// when that client does or when `cancelled` turns true (a cancel mark,
    /// from any replica).
    pub(crate) fn call_client(
        &self,
        call: &ToolCall,
        tool: &Tool,
        cancelled: watch::Receiver<bool>,
    ) -> Arc<dyn CallClient> {
        let key = format!("{}/{}", call.metadata.namespace, call.metadata.name);
        let inner = self.relays().get(&key).cloned();
        Arc::new(RecordedClient {
            recorder: Arc::new(Recorder {
                engine: self.clone(),
                namespace: call.metadata.namespace.clone(),
                name: call.metadata.name.clone(),
                // A call outside an execution is its own timeline.
                timeline: call
                    .spec
                    .execution_ref
                    .as_ref()
                    .map_or_else(|| call.metadata.name.clone(), |e| e.name.clone()),
                tool: call.tool_name().to_owned(),
                observability: tool.spec.observability.clone(),
            }),
            inner,
            cancelled,
        })
    }

    fn resync_on_tool_changes(&self, mut notices: broadcast::Receiver<UpstreamNotice>) {
        let engine = self.clone();
        tokio::spawn(async move {
            loop {
                let notice = match notices.recv().await {
                    Ok(notice) => notice,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                if notice.method == "notifications/tools/list_changed" {
                    let (ns, server) = (&notice.namespace, &notice.server);
                    // A server being applied is listed before it is stored.
                    let synced = engine.sync_server(ns, server).await;
                    if let Some(e) = synced
                        .as_ref()
                        .err()
                        .filter(|e| !matches!(e, EngineError::NotFound { .. }))
                    {
                        tracing::warn!(namespace = %ns, server = %server, error = %e, "MCP server refresh failed");
                    }
                }
            }
        });
    }
}

impl Mcp {
    /// Attaches `client` to the call `name` about to run in this process:
    /// what its upstream asks during the call goes to the client, until the
    /// returned guard is dropped.
    pub fn attach_client(
        &self,
        namespace: &str,
        name: &str,
        client: Arc<dyn CallClient>,
    ) -> AttachedClient {
        let key = format!("{namespace}/{name}");
        self.relays().insert(key.clone(), client);
        AttachedClient {
            engine: self.clone(),
            key,
        }
    }

    /// Upstream notifications from now on (every server, every namespace).
    /// The first call also starts re-listing a server's tools whenever it
    /// says they changed (the front's sessions hear of it from the Tools).
    pub fn upstream_notices(&self) -> broadcast::Receiver<UpstreamNotice> {
        let sender = self.inner.relays.notices.get_or_init(|| {
            let (sender, _) = broadcast::channel(NOTICE_QUEUE);
            if let Ok(surface) = self.surface() {
                surface.set_notices(Arc::new(Broadcast(sender.clone())));
            }
            self.resync_on_tool_changes(sender.subscribe());
            sender
        });
        sender.subscribe()
    }

    /// The namespace's upstream servers, in name order.
    pub async fn servers(
        &self,
        by: &Principal,
        namespace: &str,
    ) -> Result<Vec<McpServer>, EngineError> {
        rules::acts_in(by, namespace)?;
        let query = ListQuery {
            namespace: namespace.to_owned(),
            limit: 10_000,
            ..ListQuery::default()
        };
        let mut servers = self
            .inner
            .store
            .list_objects::<McpServer>(query)
            .await?
            .items;
        servers.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(servers)
    }

    /// Sends an ungoverned request of the server surface (`resources/list`,
    /// `resources/templates/list`, `prompts/list`, `completion/complete`,
    /// `resources/subscribe`, `resources/unsubscribe`, `logging/setLevel`)
    /// to `server`, for a caller that acts in its namespace.
    pub async fn request(
        &self,
        by: &Principal,
        server: &McpServer,
        method: &str,
        params: Value,
    ) -> Result<Value, CallError> {
        rules::acts_in(by, &server.metadata.namespace)
            .map_err(|e| CallError::new(ErrorCode::Forbidden, e.to_string()))?;
        // A caller limited to some tools sees a server's resources and
        // prompts only if it may read or get them.
        let surface_tool =
            surface_operation(method, &params).and_then(|op| server.surface_tool(op));
        if let Some(tool) = surface_tool.filter(|tool| !rules::sees(by, tool)) {
            return Err(CallError::new(
                ErrorCode::Forbidden,
                format!("this token may not use {}", tool.metadata.name),
            ));
        }
        self.surface()?.request(server, method, params).await
    }

    /// The McpServer `name` of `namespace`, if there is one (for
    /// notifications already bound to a session of that namespace).
    pub async fn get_server(&self, namespace: &str, name: &str) -> Option<McpServer> {
        self.inner.store.get_object(namespace, name).await.ok()
    }

    /// What `server` declared it can do (its `initialize` capabilities).
    pub async fn capabilities(&self, server: &McpServer) -> Result<Value, CallError> {
        self.surface()?.capabilities(server).await
    }
}

/// The operation whose surface tool a caller must see to send `method`.
fn surface_operation(method: &str, params: &Value) -> Option<McpOperation> {
    let by_ref = params.pointer("/ref/type").and_then(Value::as_str);
    match method {
        "completion/complete" if by_ref == Some("ref/resource") => Some(McpOperation::ReadResource),
        "completion/complete" => Some(McpOperation::GetPrompt),
        m if m.starts_with("resources/") => Some(McpOperation::ReadResource),
        m if m.starts_with("prompts/") => Some(McpOperation::GetPrompt),
        _ => None,
    }
}

/// The attached client as a call's backend sees it: every request is
/// recorded on the call's timeline, and one the client cannot answer (or
/// with no client at all) is refused, never answered in its name.
pub(crate) struct RecordedClient {
    recorder: Arc<Recorder>,
    inner: Option<Arc<dyn CallClient>>,
    /// Turns true when the call is cancelled through the engine.
    cancelled: watch::Receiver<bool>,
}

/// Writes a call's exchanges to its timeline.
struct Recorder {
    engine: Mcp,
    namespace: String,
    name: String,
    timeline: String,
    tool: String,
    observability: Observability,
}

/// Records a request the upstream withdrew before the client answered
/// (the request's future is dropped), unless disarmed.
struct Withdrawal {
    recorder: Arc<Recorder>,
    method: String,
    params: Option<Value>,
}

impl Drop for Withdrawal {
    fn drop(&mut self) {
        let Some(params) = self.params.take() else {
            return;
        };
        let (recorder, method) = (self.recorder.clone(), std::mem::take(&mut self.method));
        let withdrawn = Err(CallError::new(
            ErrorCode::Withdrawn,
            "the server withdrew its request before the client answered",
        ));
        tokio::spawn(async move { recorder.record(&method, &params, &withdrawn).await });
    }
}

impl std::fmt::Debug for RecordedClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordedClient")
            .field("call", &self.recorder.name)
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    async fn record(&self, method: &str, params: &Value, outcome: &Result<Value, CallError>) {
        let o = &self.observability;
        let mut data = json!({
            "method": method,
            "request": recorded_value(params.clone(), o.log_args, &o.redact_fields),
            "relayed": outcome.as_ref().map_or_else(|e| e.code != ErrorCode::ClientIncapable.as_str(), |_| true),
        });
        match outcome {
            Ok(answer) => {
                data["response"] = recorded_value(answer.clone(), o.log_result, &o.redact_fields);
            }
            Err(error) => data["error"] = json!(error),
        }
        data["tool_name"] = json!(self.tool);
        data["tool_call_id"] = json!(self.name);
        let written = self
            .engine
            .inner
            .events
            .emit(
                &self.namespace,
                &self.timeline,
                EventKind::McpExchange,
                data,
            )
            .await;
        if let Err(e) = written {
            tracing::warn!(call = %self.name, error = %e, "cannot record an MCP exchange");
        }
    }
}

#[async_trait]
impl CallClient for RecordedClient {
    fn capabilities(&self) -> ClientCapabilities {
        self.inner
            .as_ref()
            .map(|c| c.capabilities())
            .unwrap_or_default()
    }

    async fn request(&self, method: &str, params: Value) -> Result<Value, CallError> {
        let mut withdrawal = Withdrawal {
            recorder: self.recorder.clone(),
            method: method.to_owned(),
            params: Some(params.clone()),
        };
        let outcome = match &self.inner {
            Some(client) if client.capabilities().allows(method, &params) => {
                client.request(method, params.clone()).await
            }
            Some(_) => Err(CallError::new(
                ErrorCode::ClientIncapable,
                format!("the client that made the call did not declare it can answer {method}"),
            )),
            None => Err(CallError::new(
                ErrorCode::ClientIncapable,
                format!("the call has no MCP client that could answer {method}"),
            )),
        };
        withdrawal.params = None;
        self.recorder.record(method, &params, &outcome).await;
        outcome
    }

    fn notify(&self, method: &str, params: Value) {
        if let Some(client) = &self.inner {
            client.notify(method, params);
        }
    }

    async fn cancelled(&self) {
        let by_client = async {
            match &self.inner {
                Some(client) => client.cancelled().await,
                None => std::future::pending().await,
            }
        };
        let mut marked = self.cancelled.clone();
        let by_mark = async move {
            if marked.wait_for(|c| *c).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = by_client => {}
            () = by_mark => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_method_needs_the_surface_tool_of_its_kind() {
        let resource = json!({"ref": {"type": "ref/resource", "uri": "x"}});
        let prompt = json!({"ref": {"type": "ref/prompt", "name": "x"}});
        for (method, params, wanted) in [
            (
                "resources/list",
                json!({}),
                Some(McpOperation::ReadResource),
            ),
            (
                "resources/templates/list",
                json!({}),
                Some(McpOperation::ReadResource),
            ),
            (
                "resources/subscribe",
                json!({}),
                Some(McpOperation::ReadResource),
            ),
            ("prompts/list", json!({}), Some(McpOperation::GetPrompt)),
            (
                "completion/complete",
                resource,
                Some(McpOperation::ReadResource),
            ),
            ("completion/complete", prompt, Some(McpOperation::GetPrompt)),
            ("logging/setLevel", json!({"level": "info"}), None),
        ] {
            assert_eq!(
                surface_operation(method, &params),
                wanted,
                "{method} {params}"
            );
        }
    }
}
