//! MCP sessions that any replica serves and that cost nothing while idle.
//!
//! A session of the protocol versions before 2026-07-28 is a record in the
//! store (`joch_engine::McpSession`: who, which namespace, the client's
//! `initialize` parameters). A replica that gets a request for it runs an
//! in-memory session worker (rmcp's local one, ~130 KiB) while the session
//! is in use, re-created from the record by replaying `initialize` (rmcp's
//! session restore), and drops it after [`HOT_IDLE`] without a request. So
//! an idle session holds no memory in any replica, and a request may reach
//! any replica, including after the one that served it before has died.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt};
use joch_engine::{Engine, McpSession};
use rmcp::model::{
    ClientCapabilities, ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcRequest,
    ServerJsonRpcMessage, ServerNotification, ToolListChangedNotification,
};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId, SessionManager, SessionState, SessionStore,
    SessionStoreError,
};

use super::direct::{self, InFlight, Served};
use super::resume;

/// How long a session's in-memory worker outlives its last request. An
/// open notification stream without events ends then too; the client
/// reconnects and the session is re-created.
pub(crate) const HOT_IDLE: Duration = Duration::from_secs(30);

/// A session this replica runs a worker for.
struct Hot {
    session: McpSession,
    /// When the store last heard the session was used.
    touched: Instant,
    /// Its handler and client, once initialized: its hot requests skip
    /// the worker (`direct.rs`).
    served: Option<Served>,
    /// When its worker last heard of a request.
    poked: Instant,
}

/// The sessions with a worker here: filled when rmcp restores one from
/// its record, emptied when the worker ends.
#[derive(Default)]
pub(crate) struct Running(Mutex<HashMap<SessionId, Hot>>);

impl Running {
    fn lock(&self) -> MutexGuard<'_, HashMap<SessionId, Hot>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session `id`'s worker is initialized: its hot requests may be
    /// served by `served` directly.
    pub(crate) fn serve(&self, id: &str, served: Served) {
        if let Some(hot) = self.lock().get_mut(id) {
            hot.served = Some(served);
        }
    }
}

/// rmcp's local session manager, for sessions in use, over the store's
/// records, for all of them.
pub(crate) struct Sessions {
    local: LocalSessionManager,
    running: Arc<Running>,
    /// Sessions whose worker is being re-created and has not yet been
    /// sent `initialize` and `initialized` again: see `has_session`.
    restoring: Mutex<std::collections::HashSet<SessionId>>,
    /// The store's idle limit: a session in use is touched every quarter of it.
    idle: Duration,
    /// Requests served directly, which the client may cancel.
    in_flight: Arc<InFlight>,
    /// Mints the names of calls whose streams are resumable (`resume.rs`).
    engine: Engine,
}

/// What the front knows of a session a request names.
pub(crate) enum Known {
    /// Running here, and the caller's.
    Hot,
    /// Not running here, or someone else's: ask the engine.
    Cold,
}

impl Sessions {
    pub(crate) fn new(engine: Engine, idle: Duration, running: Arc<Running>) -> Self {
        let mut local = LocalSessionManager::default();
        local.session_config.keep_alive = Some(HOT_IDLE.min(idle));
        Self {
            local,
            running,
            restoring: Mutex::default(),
            idle,
            in_flight: Arc::default(),
            engine,
        }
    }

    fn hot(&self) -> MutexGuard<'_, HashMap<SessionId, Hot>> {
        self.running.lock()
    }

    fn restoring(&self) -> MutexGuard<'_, std::collections::HashSet<SessionId>> {
        self.restoring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `id` runs here for `principal` in `namespace`; if so, and
    /// the store was last told long enough ago, the session to touch.
    pub(crate) fn known(
        &self,
        id: &str,
        principal: &str,
        namespace: &str,
    ) -> (Known, Option<McpSession>) {
        let mut hot = self.hot();
        match hot.get_mut(id) {
            Some(h) if h.session.principal == principal && h.session.namespace == namespace => {
                let stale = h.touched.elapsed() > self.idle / 4;
                if stale {
                    h.touched = Instant::now();
                }
                (Known::Hot, stale.then(|| h.session.clone()))
            }
            _ => (Known::Cold, None),
        }
    }

    pub(crate) fn idle(&self) -> Duration {
        self.idle
    }

    /// Serves `request` of session `id` in this task if it may be
    /// (`direct.rs`), else gives it back. The answer is computed while
    /// the response's body is read, so that the response's head goes out
    /// at once, as rmcp's stream does.
    async fn direct(
        &self,
        id: &SessionId,
        request: JsonRpcRequest<ClientRequest>,
    ) -> Result<
        impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        JsonRpcRequest<ClientRequest>,
    > {
        let every = HOT_IDLE.min(self.idle) / 3;
        let found = self.hot().get_mut(id).and_then(|hot| {
            let served = hot.served.clone()?;
            let poke = hot.poked.elapsed() > every;
            if poke {
                hot.poked = Instant::now();
            }
            Some((served, poke, hot.session.stream_signer()))
        });
        let Some((served, poke, signer)) = found else {
            return Err(request);
        };
        if !direct::eligible(&served, &request, true).await {
            return Err(request);
        }
        if poke {
            // The worker ends after a quiet spell; requests it does not
            // see would let it, taking the session's notification stream.
            let _ = self
                .local
                .accept_message(id, direct::keep_alive(&request.id))
                .await;
        }
        let mut request = request;
        // A call's stream starts with an event whose id resumes it (`resume.rs`).
        let priming =
            resume::tag_call(&served.mcp.engine, signer, &mut request).map(|ids| ids.priming());
        let call = self.in_flight.start(id, request.id.clone());
        let ct = call.ct.clone();
        let answer =
            direct::serve(served, request, ct, direct::Disconnect::Finishes).map(move |message| {
                let _in_flight = &call;
                ServerSseMessage::from_message(message)
            });
        Ok(futures_util::stream::iter(priming).chain(answer))
    }

    /// A request for rmcp's worker: a `tools/call`'s stream gets joch's
    /// event ids, which resume it here or, from its record, anywhere
    /// (`resume.rs`). Not one run as a task (its answer is the task).
    fn tag_for_worker(
        &self,
        id: &SessionId,
        message: &mut ClientJsonRpcMessage,
    ) -> Option<resume::Ids> {
        let ClientJsonRpcMessage::Request(request) = message else {
            return None;
        };
        let signer = {
            let hot = self.hot();
            let session = &hot.get(id)?.session;
            let capabilities = session.client.get("capabilities").cloned();
            let capabilities: ClientCapabilities = serde_json::from_value(capabilities?).ok()?;
            if capabilities.supports_tasks() {
                return None;
            }
            session.stream_signer()
        };
        resume::tag_call(&self.engine, signer, request)
    }

    /// Resumes, after rmcp's event `event`, the stream of a request that
    /// session `id`'s worker serves here; `None` if it does not. (rmcp's
    /// resumed stream borrows the session id it was asked with: it is
    /// read in a task that owns both.)
    pub(crate) async fn resume_worker(
        self: &Arc<Self>,
        id: &str,
        event: &str,
        ids: resume::Ids,
    ) -> Option<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static> {
        let id: SessionId = id.into();
        if !self.local.has_session(&id).await.ok()? {
            return None;
        }
        let (resumed, answer) = tokio::sync::oneshot::channel();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let (this, event) = (self.clone(), event.to_owned());
        tokio::spawn(async move {
            let stream = match through(&this.local).resume(&id, event).await {
                Ok(stream) => stream,
                Err(_) => return,
            };
            let _ = resumed.send(());
            let mut stream = std::pin::pin!(stream);
            while let Some(message) = stream.next().await {
                if tx.send(ids.worker(message)).await.is_err() {
                    return;
                }
            }
        });
        answer.await.ok()?;
        let mut rx = rx;
        Some(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }

    /// Ends the worker of a session whose record is gone (closed on
    /// another replica).
    pub(crate) async fn drop_worker(&self, id: &str) {
        let id: SessionId = id.into();
        let _ = self.close_session(&id).await;
    }
}

impl SessionManager for Sessions {
    type Error = LocalSessionManagerError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.local.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.local.initialize_session(id, message).await
    }

    /// A session being re-created is not there yet: a request that came
    /// with the one re-creating it (a client's GET beside its first POST)
    /// must wait for the re-creation (rmcp's restore serializes those that
    /// ask for one), not reach the new worker before its `initialize`,
    /// which ends the worker.
    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        if self.restoring().contains(id) {
            return Ok(false);
        }
        self.local.has_session(id).await
    }

    /// Ends the worker (idle, or a `DELETE`); the record stays until the
    /// engine closes or expires it.
    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.hot().remove(id);
        self.restoring().remove(id);
        self.local.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let message = match direct::hot_request(message) {
            Ok(request) => match self.direct(id, request).await {
                Ok(answer) => return Ok(answer.left_stream()),
                Err(request) => ClientJsonRpcMessage::Request(request),
            },
            Err(message) => message,
        };
        let mut message = message;
        let ids = self.tag_for_worker(id, &mut message);
        let stream = through(&self.local).create_stream(id, message).await?;
        let stream = stream.map(move |m| match &ids {
            Some(ids) => ids.worker(m),
            None => m,
        });
        Ok(stream.right_stream())
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        if let Some(request) = direct::cancelled(&message)
            && self.in_flight.cancel(id, request)
        {
            return Ok(());
        }
        let outbox = self
            .hot()
            .get(id)
            .and_then(|hot| Some(hot.served.as_ref()?.outbox.clone()));
        let message = match outbox {
            Some(outbox) => match outbox.answer(message) {
                Ok(()) => return Ok(()),
                Err(message) => message,
            },
            None => message,
        };
        let initialized = matches!(
            &message,
            ClientJsonRpcMessage::Notification(n)
                if matches!(n.notification, ClientNotification::InitializedNotification(_))
        );
        self.local.accept_message(id, message).await?;
        if initialized {
            self.restoring().remove(id);
        }
        Ok(())
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        through(&self.local).create_standalone_stream(id).await
    }

    /// A notification stream resumes on whichever replica the client
    /// reaches: a worker re-created here has none of the events the dead
    /// one cached, so the stream starts with `tools/list_changed`, which
    /// makes the client list again whatever it may have missed. A
    /// request's own stream cannot be resumed elsewhere (its call is
    /// recorded; a retry with its idempotency key gets the outcome).
    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let standalone = !last_event_id.contains('/');
        let stream = through(&self.local).resume(id, last_event_id).await?;
        let changed = ServerJsonRpcMessage::notification(
            ServerNotification::ToolListChangedNotification(ToolListChangedNotification::default()),
        );
        let first = standalone.then(|| ServerSseMessage::from_message(changed));
        Ok(futures_util::stream::iter(first).chain(stream))
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.restoring().insert(id.clone());
        self.local.restore_session(id).await
    }
}

/// Calls through the trait, so that the streams carry its bounds.
fn through<M: SessionManager>(manager: &M) -> &M {
    manager
}

/// The store's session records, as rmcp's restore reads them. The front
/// has checked the caller before; records are written and removed by the
/// engine, never here.
pub(crate) struct Records {
    pub(crate) engine: Engine,
    pub(crate) running: Arc<Running>,
}

#[async_trait::async_trait]
impl SessionStore for Records {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        match self.engine.mcp().open_session_by_id(session_id).await {
            Ok(session) => {
                let Ok(params) = serde_json::from_value(session.client.clone()) else {
                    return Ok(None);
                };
                // Its worker starts now: its next requests skip the store.
                let hot = Hot {
                    session,
                    touched: Instant::now(),
                    served: None,
                    poked: Instant::now(),
                };
                self.running.lock().insert(session_id.into(), hot);
                Ok(Some(SessionState::new(params)))
            }
            Err(joch_engine::EngineError::NotFound { .. }) => Ok(None),
            Err(e) => Err(Box::new(e)),
        }
    }

    async fn store(&self, _id: &str, _state: &SessionState) -> Result<(), SessionStoreError> {
        Ok(())
    }

    async fn delete(&self, _id: &str) -> Result<(), SessionStoreError> {
        Ok(())
    }
}
