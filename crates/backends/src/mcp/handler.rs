//! The client side of every upstream connection: what the server sends
//! joch. Progress goes to the call whose token it carries; a request the
//! server makes during a call (sampling, elicitation, roots) goes to the client
//! that made the call; list changes, resource updates and log messages not
//! tied to one call go to the front's sessions.
//!
//! A connection declares upstream exactly the capabilities of the clients
//! whose calls it carries (connections are kept per capability set), so a
//! server is never told joch can do what the caller cannot.

// Sampling and logging are deprecated by SEP-2577 (protocol 2026-07-28)
// but are part of 2025-11-25, which joch's front serves.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use joch_core::mcp_surface::{CallClient, ClientCapabilities, UpstreamNotices};
use joch_core::{CallError, ErrorCode};
use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities as McpCapabilities, ClientConfig, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationCapability,
    FormElicitationCapability, Implementation, ListRootsResult, LoggingMessageNotificationParam,
    ProgressNotificationParam, RequestId, ResourceUpdatedNotificationParam, RootsCapabilities,
    SamplingCapability, TASKS_EXTENSION_ID, UrlElicitationCapability,
};
use rmcp::service::{
    InboundStreamOrigin, NotificationContext, RequestContext, RoleClient, RunningService,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::progress::ProgressRoutes;

/// Calls in flight on one connection, by the id of their `tools/call`.
pub(super) type CallRoutes = Arc<Mutex<HashMap<String, Arc<dyn CallClient>>>>;

/// Where notifications of every connection go, once the engine says.
pub(super) type NoticeSink = Arc<Mutex<Option<Arc<dyn UpstreamNotices>>>>;

/// One connection's handler.
#[derive(Clone)]
pub(super) struct Upstream {
    pub progress: ProgressRoutes,
    pub calls: CallRoutes,
    pub capabilities: ClientCapabilities,
    /// Declares the tasks extension (SEP-2663): the server may answer a
    /// call with its own task, which joch follows (`tasks.rs`).
    pub tasks: bool,
    pub notices: NoticeSink,
    /// The server's namespace and name, for notices.
    pub server: (String, String),
    /// The user whose token the connection carries (per-user servers).
    pub user: Option<String>,
    /// The `Authorization` it was opened with, to name the token refused
    /// when the server answers 401 mid-session (never logged).
    pub authorization: Option<String>,
    /// Set once the connection listed the server's tools (see
    /// [`learn_param_headers`]).
    pub listed: Arc<tokio::sync::OnceCell<()>>,
}

/// SEP-2243: rmcp sends the arguments a tool's input schema marks with
/// `x-mcp-header` as `Mcp-Param-*` headers once its connection has seen
/// the tool in a `tools/list` answer (it keeps the schemas per
/// connection). A call may go over a connection that never listed (one
/// per set of client capabilities, one per user): it lists once, first,
/// when `schema` has such a mark. A listing that fails leaves the call to
/// go without the headers, for the server to judge (after a second try),
/// and the connection unmarked, so that its next call lists again.
pub(super) async fn learn_param_headers(
    client: &RunningService<RoleClient, Upstream>,
    schema: &Value,
    timeout: std::time::Duration,
) {
    if !marks_headers(schema) {
        return;
    }
    let listed = client.service().listed.clone();
    let listing = listed.get_or_try_init(|| async {
        // Twice, within the call's time: a listing failed on a loaded
        // machine once, and its call then went without the headers.
        let twice = async {
            match client.list_all_tools().await {
                Ok(_) => Ok(()),
                Err(first) => {
                    tracing::debug!(error = %first, "listing tools for Mcp-Param headers again");
                    client
                        .list_all_tools()
                        .await
                        .map(drop)
                        .map_err(|e| e.to_string())
                }
            }
        };
        match tokio::time::timeout(timeout, twice).await {
            Ok(listed) => listed,
            Err(_) => Err("no answer in time".to_owned()),
        }
    });
    if let Err(error) = listing.await {
        tracing::warn!(%error, "tools not listed for Mcp-Param headers: the call goes without them");
    }
}

/// The JSON-RPC error of a request whose standard headers do not match
/// its body (SEP-2243), sent before the server acts on it.
pub(super) const HEADER_MISMATCH: i32 = -32020;

/// Lists the tools on `client` again, after the server refused a call's
/// `Mcp-Param-*` headers ([`HEADER_MISMATCH`]).
pub(super) async fn relearn_param_headers(
    client: &RunningService<RoleClient, Upstream>,
    timeout: std::time::Duration,
) {
    match tokio::time::timeout(timeout, client.list_all_tools()).await {
        Ok(Ok(_)) => tracing::warn!("a call's Mcp-Param headers were refused: tools listed again"),
        Ok(Err(e)) => tracing::warn!(error = %e, "tools not listed again for Mcp-Param headers"),
        Err(_) => tracing::warn!("tools not listed again for Mcp-Param headers in time"),
    }
}

/// Whether a JSON schema holds an `x-mcp-header` mark anywhere.
fn marks_headers(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map.contains_key("x-mcp-header") || map.values().any(marks_headers),
        Value::Array(items) => items.iter().any(marks_headers),
        _ => false,
    }
}

/// A registered call; dropping it stops routing to its client.
pub(super) struct CallRoute {
    calls: CallRoutes,
    id: String,
}

impl Drop for CallRoute {
    fn drop(&mut self) {
        lock(&self.calls).remove(&self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The key of a request id.
pub(super) fn id_key(id: &RequestId) -> String {
    match id {
        rmcp::model::NumberOrString::String(s) => s.to_string(),
        rmcp::model::NumberOrString::Number(n) => n.to_string(),
    }
}

impl Upstream {
    /// Routes what the server asks while the request `id` runs to `client`.
    pub(super) fn route(&self, id: &RequestId, client: Arc<dyn CallClient>) -> CallRoute {
        let id = id_key(id);
        lock(&self.calls).insert(id.clone(), client);
        CallRoute {
            calls: self.calls.clone(),
            id,
        }
    }

    /// The call a server request belongs to: the one whose response stream
    /// carried it (streamable HTTP), else the only call in flight.
    fn call_of(&self, context: &RequestContext<RoleClient>) -> Option<Arc<dyn CallClient>> {
        let calls = lock(&self.calls);
        match context.extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => calls.get(&id_key(id)).cloned(),
            _ if calls.len() == 1 => calls.values().next().cloned(),
            _ => None,
        }
    }

    pub(super) fn notice(&self, method: &str, params: Value) {
        let sink = lock(&self.notices).clone();
        if let Some(sink) = sink {
            sink.notice(&self.server.0, &self.server.1, method, params);
        }
    }

    /// Passes `params` of `method` to the call's client and reads its answer.
    async fn relay<P: Serialize, A: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
        context: RequestContext<RoleClient>,
    ) -> Result<A, rmcp::ErrorData> {
        let mut client = self.call_of(&context);
        // The request may overtake the registration of the call it is
        // about (its id is known once the call is sent): wait a moment.
        for _ in 0..20 {
            if client.is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            client = self.call_of(&context);
        }
        let Some(client) = client else {
            return Err(refusal(&CallError::new(
                ErrorCode::NoCall,
                format!("joch cannot tell which call this {method} belongs to"),
            )));
        };
        let params = serde_json::to_value(params)
            .map_err(|e| rmcp::ErrorData::invalid_params(e.to_string(), None))?;
        // The upstream's cancellation (context.ct) drops the relay, which
        // tells the client its request is withdrawn.
        let answer = tokio::select! {
            answer = client.request(method, params) => answer,
            () = context.ct.cancelled() => Err(CallError::new(ErrorCode::Cancelled, "the server cancelled its request")),
        };
        let answer = answer.map_err(|e| refusal(&e))?;
        serde_json::from_value(answer).map_err(|e| {
            rmcp::ErrorData::internal_error(
                format!("the client's answer cannot be read: {e}"),
                None,
            )
        })
    }
}

/// What the upstream is told when its request is not answered.
fn refusal(error: &CallError) -> rmcp::ErrorData {
    rmcp::ErrorData::new(
        rmcp::model::ErrorCode::INTERNAL_ERROR,
        error.message.clone(),
        Some(serde_json::json!({"code": error.code})),
    )
}

impl ClientHandler for Upstream {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = McpCapabilities::default();
        let c = self.capabilities;
        if c.sampling {
            capabilities.sampling = Some(SamplingCapability::default());
        }
        if c.elicitation_form || c.elicitation_url {
            let mut elicitation = ElicitationCapability::default();
            elicitation.form = c.elicitation_form.then(FormElicitationCapability::default);
            elicitation.url = c.elicitation_url.then(UrlElicitationCapability::default);
            capabilities.elicitation = Some(elicitation);
        }
        if c.roots {
            capabilities.roots = Some(RootsCapabilities::default());
        }
        if self.tasks {
            let extensions = capabilities.extensions.get_or_insert_with(Default::default);
            extensions.insert(TASKS_EXTENSION_ID.to_owned(), Default::default());
        }
        ClientConfig::new(
            capabilities,
            Implementation::new("joch", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, rmcp::ErrorData> {
        self.relay("sampling/createMessage", &params, context).await
    }

    /// Relayed to the caller; a caller that cannot answer makes this an
    /// error, never a `decline` that nobody gave, which the upstream tool
    /// would act on as a user's refusal.
    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        self.relay("elicitation/create", &params, context).await
    }

    /// Relayed to the caller, like a question: never an empty list nobody gave.
    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, rmcp::ErrorData> {
        self.relay("roots/list", &Value::Null, context).await
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        self.progress.on_progress(params, context);
    }

    /// To the one call in flight, on its stream; else to the sessions.
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        let params = serde_json::to_value(&params).unwrap_or_default();
        let only = {
            let calls = lock(&self.calls);
            (calls.len() == 1)
                .then(|| calls.values().next().cloned())
                .flatten()
        };
        match only {
            Some(client) => client.notify("notifications/message", params),
            None => self.notice("notifications/message", params),
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        if !of_a_dropped_stream(&context) {
            let params = serde_json::to_value(&params).unwrap_or_default();
            self.notice("notifications/resources/updated", params);
        }
    }

    async fn on_resource_list_changed(&self, context: NotificationContext<RoleClient>) {
        if !of_a_dropped_stream(&context) {
            self.notice("notifications/resources/list_changed", Value::Null);
        }
    }

    async fn on_prompt_list_changed(&self, context: NotificationContext<RoleClient>) {
        if !of_a_dropped_stream(&context) {
            self.notice("notifications/prompts/list_changed", Value::Null);
        }
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        if !of_a_dropped_stream(&context) {
            self.notice("notifications/tools/list_changed", Value::Null);
        }
    }
}

/// A notification naming a `subscriptions/listen` stream reaches the
/// handler only once joch dropped that stream for one with a new filter
/// (`listen.rs`), which carries the same: passing it on too would say it
/// twice.
fn of_a_dropped_stream(context: &NotificationContext<RoleClient>) -> bool {
    context.meta.subscription_id().is_some()
}
