//! What a handler sends its client during a call served directly
//! (`direct.rs`): progress, pings and questions ride the call's own
//! stream, as they ride rmcp's, and the client's answers come back.
//!
//! The handler is given a client (`Peer`) of a service with no connection
//! (one per session, one for all stateless requests) whose transport
//! routes each message to its call. A direct call runs under a request id
//! and progress token of joch's own, unique across clients sharing the
//! outbox, which the messages the client sees carry back as it sent them;
//! the questions put to a client are numbered `joch-N`, apart from those
//! of the session's own worker.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, GetExtensions, GetMeta, JsonRpcRequest, NumberOrString,
    ProgressToken, RequestId, ServerJsonRpcMessage, ServerNotification,
};
use rmcp::service::{
    OriginatingRequestId, Peer, RoleServer, RunningService, RxJsonRpcMessage, TxJsonRpcMessage,
    serve_directly,
};
use rmcp::transport::Transport;
use tokio::sync::mpsc;

use super::handler::JochMcp;

/// How many progress notifications the handler has sent for a call (put
/// in its request's extensions): its answer waits until they are out.
#[derive(Clone, Default)]
pub(crate) struct Sent(pub(crate) Arc<AtomicU32>);

/// One session's outbox, or the stateless requests'.
pub(crate) struct Outbox {
    peer: Peer<RoleServer>,
    routes: Arc<Routes>,
    _service: RunningService<RoleServer, JochMcp>,
}

struct Routes {
    state: Mutex<State>,
    next: AtomicU64,
    /// The session's own client, for what is not of one call (none:
    /// stateless requests, whose list changes a client learns by listening).
    session: Option<Peer<RoleServer>>,
    /// Answers to the questions put to clients, for the service.
    answers: mpsc::UnboundedSender<ClientJsonRpcMessage>,
}

#[derive(Default)]
struct State {
    /// Calls in flight, by joch's id for them.
    calls: HashMap<RequestId, Route>,
    /// joch's progress tokens, to joch's call ids.
    tokens: HashMap<ProgressToken, RequestId>,
    /// Questions put to clients, by the id they see: the service's id
    /// for it and joch's call id.
    asked: HashMap<RequestId, (RequestId, RequestId)>,
}

struct Route {
    to: mpsc::UnboundedSender<ServerJsonRpcMessage>,
    /// The client's progress token.
    token: Option<ProgressToken>,
}

impl Routes {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fresh(&self, prefix: &str) -> NumberOrString {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        NumberOrString::String(format!("{prefix}-{n}").into())
    }

    /// Sends `message` where it belongs; what belongs nowhere is dropped.
    fn route(&self, message: ServerJsonRpcMessage) -> Option<impl Future<Output = ()> + use<>> {
        tracing::trace!(?message, "outbox: to route");
        let mut state = self.lock();
        match message {
            ServerJsonRpcMessage::Notification(mut n) => match &mut n.notification {
                ServerNotification::ProgressNotification(p) => {
                    let call = state.tokens.get(&p.params.progress_token)?;
                    let route = state.calls.get(call)?;
                    p.params.progress_token = route.token.clone()?;
                    let _ = route.to.send(ServerJsonRpcMessage::Notification(n));
                    None
                }
                ServerNotification::CancelledNotification(c) => {
                    // A question withdrawn: named as the client knows it.
                    let asked = c.params.request_id.as_ref()?;
                    let (seen, (_, call)) =
                        state.asked.iter().find(|(_, (ours, _))| ours == asked)?;
                    let (seen, call) = (seen.clone(), call.clone());
                    state.asked.remove(&seen);
                    c.params.request_id = Some(seen);
                    let _ = state
                        .calls
                        .get(&call)?
                        .to
                        .send(ServerJsonRpcMessage::Notification(n));
                    None
                }
                _ => {
                    let peer = self.session.clone()?;
                    Some(async move {
                        let _ = peer.send_notification(n.notification).await;
                    })
                }
            },
            ServerJsonRpcMessage::Request(mut r) => {
                let call = r
                    .request
                    .extensions()
                    .get::<OriginatingRequestId>()?
                    .0
                    .clone();
                let seen = self.fresh("joch");
                let route = state.calls.get(&call)?;
                let to = route.to.clone();
                state.asked.insert(seen.clone(), (r.id.clone(), call));
                r.id = seen;
                let _ = to.send(ServerJsonRpcMessage::Request(r));
                None
            }
            ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_) => None,
        }
    }
}

impl Outbox {
    /// `session`: the session's own client, whose declared capabilities
    /// the handler sees; none for stateless requests.
    pub(crate) fn new(mcp: JochMcp, session: Option<Peer<RoleServer>>) -> Self {
        let (answers, inbox) = mpsc::unbounded_channel();
        let info = session
            .as_ref()
            .and_then(Peer::peer_info)
            .map(|info| (*info).clone());
        let routes = Arc::new(Routes {
            state: Mutex::default(),
            next: AtomicU64::new(0),
            session,
            answers,
        });
        let wire = Wire {
            routes: routes.clone(),
            inbox,
        };
        let service = serve_directly(mcp, wire, info);
        Self {
            peer: service.peer().clone(),
            routes,
            _service: service,
        }
    }

    /// The client the handler of a direct call is given.
    pub(crate) fn peer(&self) -> &Peer<RoleServer> {
        &self.peer
    }

    /// Routes what the handler sends for `request` to the receiver
    /// returned, renaming the request's id and progress token to joch's.
    pub(crate) fn open(&self, request: &mut JsonRpcRequest<ClientRequest>) -> Opened {
        let (to, from) = mpsc::unbounded_channel();
        let id = self.routes.fresh("call");
        let meta = request.request.get_meta_mut();
        let token = meta.get_progress_token();
        let mut state = self.routes.lock();
        let ours = token
            .as_ref()
            .map(|_| ProgressToken(self.routes.fresh("progress")));
        if let Some(ours) = &ours {
            meta.set_progress_token(ours.clone());
            state.tokens.insert(ours.clone(), id.clone());
        }
        state.calls.insert(id.clone(), Route { to, token });
        let client_id = std::mem::replace(&mut request.id, id.clone());
        Opened {
            routes: self.routes.clone(),
            id,
            token: ours,
            client_id,
            from,
        }
    }

    /// Takes a client's answer to a question a direct call put, or gives
    /// the message back.
    // The message handed back is no error, and moved, not copied.
    #[allow(clippy::result_large_err)]
    pub(crate) fn answer(&self, message: ClientJsonRpcMessage) -> Result<(), ClientJsonRpcMessage> {
        let seen = match &message {
            ClientJsonRpcMessage::Response(r) => Some(&r.id),
            ClientJsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => None,
        };
        let Some((ours, _)) = seen.and_then(|seen| self.routes.lock().asked.remove(seen)) else {
            tracing::trace!(?message, "outbox: not an answer of ours");
            return Err(message);
        };
        tracing::trace!(?message, "outbox: an answer");
        let message = match message {
            ClientJsonRpcMessage::Response(mut r) => {
                r.id = ours;
                ClientJsonRpcMessage::Response(r)
            }
            ClientJsonRpcMessage::Error(mut e) => {
                e.id = Some(ours);
                ClientJsonRpcMessage::Error(e)
            }
            other => other,
        };
        let _ = self.routes.answers.send(message);
        Ok(())
    }
}

/// One direct call's messages; its routes go when it is dropped.
pub(crate) struct Opened {
    routes: Arc<Routes>,
    id: RequestId,
    token: Option<ProgressToken>,
    /// The request's id as the client sent it.
    pub(crate) client_id: RequestId,
    pub(crate) from: mpsc::UnboundedReceiver<ServerJsonRpcMessage>,
}

impl Drop for Opened {
    fn drop(&mut self) {
        let mut state = self.routes.lock();
        state.calls.remove(&self.id);
        if let Some(token) = &self.token {
            state.tokens.remove(token);
        }
        state.asked.retain(|_, (_, call)| *call != self.id);
    }
}

/// The outbox service's transport: what it sends is routed, what it
/// receives is the clients' answers.
struct Wire {
    routes: Arc<Routes>,
    inbox: mpsc::UnboundedReceiver<ClientJsonRpcMessage>,
}

impl Transport<RoleServer> for Wire {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let forward = self.routes.route(item);
        async move {
            if let Some(forward) = forward {
                forward.await;
            }
            Ok(())
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.inbox.recv()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        std::future::ready(Ok(()))
    }
}
