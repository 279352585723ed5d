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
//! What the handler sends its client meanwhile (progress, pings, an
//! upstream's questions) goes through an outbox (`outbox.rs`) to the
//! call's own stream. Requests whose messages the outbox cannot carry as
//! rmcp would are left to rmcp (see [`eligible`]), as is every other method.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;

use futures_util::Stream;
use rmcp::Service;
use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientJsonRpcMessage, ClientNotification,
    ClientRequest, GetExtensions, GetMeta, JsonRpcRequest, RequestId, ServerJsonRpcMessage,
    ServerNotification,
};
use rmcp::service::RequestContext;
use tokio_util::sync::CancellationToken;

use super::convert::is_mcp_tool;
use super::handler::JochMcp;
use super::outbox::{Outbox, Sent};

/// What serves a session's requests directly, or the stateless ones:
/// the handler, and the outbox its messages to the client go through.
#[derive(Clone)]
pub(crate) struct Served {
    pub(crate) mcp: JochMcp,
    pub(crate) outbox: Arc<Outbox>,
}

/// A request the direct path takes, or the message back for rmcp.
// The message handed back is no error, and moved, not copied.
#[allow(clippy::result_large_err)]
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

/// Whether `request` may skip rmcp's tasks: all it sends its client goes
/// through the outbox, on its own stream. Not so for a call run as a task
/// (it outlives its request), one on a session whose client takes
/// elicitation (joch's questions ride the request's stream by rmcp's own
/// bookkeeping), nor, on a session, one of an upstream MCP tool for a
/// client that declared sampling, elicitation or roots (an upstream's sampling
/// request relayed through the outbox did not reach joch's own stdio proxy
/// in `tests/interop/test_ts_client.py`). Without a session (protocol
/// 2026-07-28) nothing is asked during a call: an upstream's questions
/// become the call's `input_required` (`rounds.rs`).
pub(crate) async fn eligible(
    served: &Served,
    request: &JsonRpcRequest<ClientRequest>,
    session: bool,
) -> bool {
    let ClientRequest::CallToolRequest(call) = &request.request else {
        return true;
    };
    let peer = served.outbox.peer();
    let capabilities = request
        .request
        .get_meta()
        .client_capabilities()
        .or_else(|| peer.peer_info().map(|i| i.capabilities.clone()));
    if capabilities.as_ref().is_some_and(|c| c.supports_tasks()) {
        return false;
    }
    if !session {
        return true;
    }
    if !peer.supported_elicitation_modes().is_empty() {
        return false;
    }
    let may_ask = capabilities
        .as_ref()
        .is_some_and(|c| c.sampling.is_some() || c.elicitation.is_some() || c.roots.is_some());
    if !may_ask {
        return true;
    }
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

/// What a client's disconnect means for a request served directly.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Disconnect {
    /// Nothing: its handler runs on to the answer, as in rmcp's session
    /// worker, so that a call is recorded and carried out and the client
    /// that resumes the stream gets its answer (a session's request; the
    /// session's `notifications/cancelled` cancels it while its stream is
    /// open).
    Finishes,
    /// The request is cancelled, and its handler runs on to see it (a
    /// request without a session, as rmcp serves one).
    Cancels,
}

/// Serves `request` with `served`'s handler in the task that polls the
/// stream: what the handler sends the client on the way, then the
/// JSON-RPC answer rmcp would give. `ct` is cancelled when the client
/// cancels, or drops the stream before its answer if `disconnect` says so.
pub(crate) fn serve(
    served: Served,
    mut request: JsonRpcRequest<ClientRequest>,
    ct: CancellationToken,
    disconnect: Disconnect,
) -> impl Stream<Item = ServerJsonRpcMessage> + Send + Sync + 'static {
    tracing::trace!(id = %request.id, "served directly");
    let mut opened = served.outbox.open(&mut request);
    let sent = Sent::default();
    let counted = sent.clone();
    let client_id = opened.client_id.clone();
    let on_disconnect = match disconnect {
        Disconnect::Cancels => Some(Some(ct.clone())),
        Disconnect::Finishes => Some(None),
    };
    let answer = async move {
        let JsonRpcRequest {
            id, mut request, ..
        } = request;
        let mut context = RequestContext::new(id, served.outbox.peer().clone());
        context.ct = ct;
        context.meta = std::mem::take(request.get_meta_mut());
        context.extensions = std::mem::take(request.extensions_mut());
        context.extensions.insert(sent);
        match Service::handle_request(&served.mcp, request, context).await {
            Ok(result) => ServerJsonRpcMessage::response(result, client_id),
            Err(error) => ServerJsonRpcMessage::error(error, Some(client_id)),
        }
    };
    let mut answer = Unanswered {
        answer: Some(Box::pin(answer)),
        on_disconnect,
    };
    let mut last: Option<ServerJsonRpcMessage> = None;
    let mut delivered = 0u32;
    let state = Mutex::new(move |cx: &mut std::task::Context<'_>| {
        // What the handler sent comes first, its progress all before the answer.
        if let Poll::Ready(Some(message)) = opened.from.poll_recv(cx) {
            if is_progress(&message) {
                delivered += 1;
            }
            return Poll::Ready(Some(message));
        }
        if let Some(future) = answer.answer.as_mut()
            && let Poll::Ready(message) = future.as_mut().poll(cx)
        {
            answer.answer = None;
            last = Some(message);
        }
        match last.take() {
            Some(message) if delivered >= counted.0.load(Ordering::SeqCst) => {
                Poll::Ready(Some(message))
            }
            Some(message) => {
                last = Some(message);
                Poll::Pending
            }
            None if answer.answer.is_none() => Poll::Ready(None),
            None => Poll::Pending,
        }
    });
    futures_util::stream::poll_fn(move |cx| {
        let mut next = state.lock().unwrap_or_else(|e| e.into_inner());
        (*next)(cx)
    })
}

/// A direct request's answer, not yet given. Dropped unanswered (its
/// client went away), its handler is left to run on to its end, after
/// the request is cancelled if `on_disconnect` holds a token: it then sees
/// the cancellation (an upstream MCP call is told, the record says
/// `cancelled`) as it would under rmcp.
struct Unanswered<F: Future<Output = ServerJsonRpcMessage> + Send + 'static> {
    answer: Option<std::pin::Pin<Box<F>>>,
    on_disconnect: Option<Option<CancellationToken>>,
}

impl<F: Future<Output = ServerJsonRpcMessage> + Send + 'static> Drop for Unanswered<F> {
    fn drop(&mut self) {
        if let (Some(answer), Some(cancel)) = (self.answer.take(), self.on_disconnect.take()) {
            if let Some(ct) = cancel {
                ct.cancel();
            }
            // Not when the runtime itself is going (nothing to run it on).
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(answer);
            }
        }
    }
}

fn is_progress(message: &ServerJsonRpcMessage) -> bool {
    matches!(
        message,
        ServerJsonRpcMessage::Notification(n)
            if matches!(n.notification, ServerNotification::ProgressNotification(_))
    )
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
    let reason = Some("served by joch directly".to_owned());
    let params = CancelledNotificationParam::new(Some(id.clone()), reason);
    let cancelled = CancelledNotification::new(params);
    ClientJsonRpcMessage::notification(ClientNotification::CancelledNotification(cancelled))
}

#[cfg(test)]
mod tests {
    use rmcp::model::{NumberOrString, RequestId};

    #[test]
    fn the_keep_alive_is_a_cancellation_of_the_direct_request() {
        let id: RequestId = NumberOrString::Number(7);
        let sent = serde_json::to_value(super::keep_alive(&id)).expect("encodes");
        let expected = serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 7, "reason": "served by joch directly"},
        });
        assert_eq!(sent, expected);
        assert_eq!(super::cancelled(&super::keep_alive(&id)), Some(id));
    }
}
