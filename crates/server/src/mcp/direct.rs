//! One hop from an HTTP request to the handler, for the hot methods.
//!
//! rmcp serves a request through its own tasks: the streamable-HTTP
//! service, a session's worker, the service loop and a task per handler,
//! each hop waking another thread and back. For `tools/call` and
//! `tools/list`, the MCP front's hot methods, joch calls the same handler
//! (`rmcp::Service::handle_request`, so its dispatch and error words are
//! rmcp's) in the HTTP request's own task, after rmcp (sessions) or the
//! front (stateless) has checked the request as before.
//!
//! Only requests that need nothing sent to the client beside their answer
//! are served so (see [`eligible`]): no `progressToken`, not run as a task,
//! not a call of an upstream MCP tool that could ask a client that declared
//! sampling or elicitation, and, on a session, a client that did not declare
//! elicitation (a call deferred to a person is put to such a client on the
//! call's own stream, which only rmcp's worker has). Everything else goes
//! through rmcp as before.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;

use futures_util::Stream;
use rmcp::Service;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, GetExtensions, GetMeta,
    JsonRpcRequest, RequestId, ServerJsonRpcMessage,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use tokio_util::sync::CancellationToken;

use super::convert::is_mcp_tool;
use super::handler::JochMcp;

/// What serves a session's requests directly: its handler and its client.
#[derive(Clone)]
pub(crate) struct Served {
    pub(crate) mcp: JochMcp,
    pub(crate) peer: Peer<RoleServer>,
}

/// A request the direct path takes, or the message back for rmcp.
pub(crate) fn hot_request(
    message: ClientJsonRpcMessage,
) -> Result<JsonRpcRequest<ClientRequest>, ClientJsonRpcMessage> {
    match message {
        ClientJsonRpcMessage::Request(request)
            if matches!(
                request.request,
                ClientRequest::CallToolRequest(_) | ClientRequest::ListToolsRequest(_)
            ) =>
        {
            Ok(request)
        }
        other => Err(other),
    }
}

/// Whether `request` needs nothing sent to its client but its answer, so
/// that it may skip rmcp's tasks. `session`: the request is of an HTTP
/// session, whose client is asked on the call's stream when a person
/// must decide.
pub(crate) async fn eligible(
    served: &Served,
    request: &JsonRpcRequest<ClientRequest>,
    session: bool,
) -> bool {
    let ClientRequest::CallToolRequest(call) = &request.request else {
        return true;
    };
    let meta = request.request.get_meta();
    if meta.get_progress_token().is_some() {
        return false;
    }
    let info = served.peer.peer_info();
    let capabilities = meta
        .client_capabilities()
        .or_else(|| info.as_ref().map(|i| i.capabilities.clone()));
    if capabilities.as_ref().is_some_and(|c| c.supports_tasks()) {
        return false;
    }
    if session && !served.peer.supported_elicitation_modes().is_empty() {
        return false;
    }
    let may_ask = capabilities
        .as_ref()
        .is_some_and(|c| c.sampling.is_some() || c.elicitation.is_some());
    if !may_ask {
        return true;
    }
    // An upstream MCP tool may ask this client something during the call.
    let extensions = request.request.extensions();
    let (Ok(by), Ok(namespace)) = (
        served.mcp.principal(extensions),
        served.mcp.namespace(extensions),
    ) else {
        return false;
    };
    let tool = served
        .mcp
        .engine
        .resources()
        .cached_tool(&by, &namespace, call.params.name.as_ref())
        .await;
    tool.is_ok_and(|tool| !is_mcp_tool(&tool))
}

/// Serves `request` with `served`'s handler in this task: the JSON-RPC
/// message rmcp would answer. `ct` is cancelled when the client cancels.
pub(crate) async fn answer(
    served: Served,
    request: JsonRpcRequest<ClientRequest>,
    ct: CancellationToken,
) -> ServerJsonRpcMessage {
    let JsonRpcRequest {
        id, mut request, ..
    } = request;
    let mut context = RequestContext::new(id.clone(), served.peer);
    context.ct = ct;
    context.meta = std::mem::take(request.get_meta_mut());
    context.extensions = std::mem::take(request.extensions_mut());
    match Service::handle_request(&served.mcp, request, context).await {
        Ok(result) => ServerJsonRpcMessage::response(result, id),
        Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
    }
}

/// The direct calls of sessions in flight, so that a client's
/// `notifications/cancelled` naming one cancels it.
#[derive(Default)]
pub(crate) struct InFlight(Mutex<HashMap<(String, RequestId), CancellationToken>>);

impl InFlight {
    fn lock(&self) -> MutexGuard<'_, HashMap<(String, RequestId), CancellationToken>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A token for request `id` of `session`, cancelled by [`Self::cancel`]
    /// until the guard is dropped.
    pub(crate) fn start(self: &Arc<Self>, session: &str, id: RequestId) -> Call {
        let ct = CancellationToken::new();
        let key = (session.to_owned(), id);
        self.lock().insert(key.clone(), ct.clone());
        Call {
            in_flight: self.clone(),
            key,
            ct,
        }
    }

    /// Cancels request `id` of `session` if it is served directly.
    pub(crate) fn cancel(&self, session: &str, id: RequestId) -> bool {
        match self.lock().remove(&(session.to_owned(), id)) {
            Some(ct) => {
                ct.cancel();
                true
            }
            None => false,
        }
    }
}

/// One direct call in flight: forgotten when dropped.
pub(crate) struct Call {
    in_flight: Arc<InFlight>,
    key: (String, RequestId),
    pub(crate) ct: CancellationToken,
}

impl Drop for Call {
    fn drop(&mut self) {
        self.in_flight.lock().remove(&self.key);
    }
}

/// The request a client's `notifications/cancelled` names.
pub(crate) fn cancelled(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    let ClientJsonRpcMessage::Notification(notification) = message else {
        return None;
    };
    match &notification.notification {
        ClientNotification::CancelledNotification(n) => n.params.request_id.clone(),
        _ => None,
    }
}

/// A message that tells a session's worker a request came, and nothing
/// else: the cancellation of a request it never had (`id`, served
/// directly), which its service ignores.
pub(crate) fn keep_alive(id: &RequestId) -> ClientJsonRpcMessage {
    serde_json::from_value(serde_json::json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "served by joch directly"},
    }))
    .expect("a cancellation is a client message")
}

/// A stream of `future`'s one output. rmcp wants `Sync` streams, which a
/// handler's future is not; a lock nobody contends makes it so.
pub(crate) fn once<T, F>(future: F) -> impl Stream<Item = T> + Send + Sync + 'static
where
    F: Future<Output = T> + Send + 'static,
{
    let slot: Mutex<Option<Pin<Box<F>>>> = Mutex::new(Some(Box::pin(future)));
    futures_util::stream::poll_fn(move |cx| {
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        let Some(future) = slot.as_mut() else {
            return Poll::Ready(None);
        };
        let item = std::task::ready!(future.as_mut().poll(cx));
        *slot = None;
        Poll::Ready(Some(item))
    })
}
