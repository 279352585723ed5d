//! joch as an MCP server: `tools/list` shows a namespace's Tools and
//! `tools/call` goes through the engine's call path, exactly like a POST to
//! `/toolcalls`: recorded, decided on, possibly approved, then run.

use std::time::Duration;

use joch_core::names::{validate_name, validate_namespace};
use joch_core::{ObjectRef, Phase, Tool, ToolCall};
use joch_engine::{ChunkFollower, Engine, EngineError, ListParams, MintedName, Principal};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, Extensions, GetExtensions, ProgressNotificationParam, ProgressToken,
    ServerRequest,
};
use rmcp::service::{OriginatingRequestId, Peer, PeerRequestOptions, RequestContext, RoleServer};
use serde_json::Value;

use super::elicit;

/// Header naming the namespace when the endpoint is `/mcp`.
pub const NAMESPACE_HEADER: &str = "joch-namespace";

/// `params._meta` keys a client may send with `tools/call`.
const META_AGENT: &str = "joch.dev/agent";
const META_EXECUTION: &str = "joch.dev/execution";
const META_CALLER: &str = "joch.dev/caller";
const META_IDEMPOTENCY_KEY: &str = "joch.dev/idempotencyKey";

/// One MCP session's view of joch.
#[derive(Clone)]
pub struct JochMcp {
    pub(super) engine: Engine,
    /// Set for stdio, where there is no URL to name the namespace.
    namespace: Option<String>,
    /// Execution for calls of a stdio session (HTTP sessions use their
    /// `Mcp-Session-Id`).
    session: Option<String>,
    /// How often a call waiting for approval tells the client so.
    progress_every: Duration,
    /// Set for stdio, where no request carries one; over HTTP, each
    /// request's principal comes from the authentication middleware.
    principal: Option<Principal>,
    /// What the session subscribed to and its log level.
    pub(super) surface: super::surface::SharedSurface,
    /// joch's external URL, for links given to clients (none over stdio).
    pub(super) public_url: Option<std::sync::Arc<str>>,
    /// The HTTP sessions running here, told once this one is initialized
    /// (`direct.rs`); none over stdio.
    running: Option<std::sync::Arc<super::sessions::Running>>,
}

impl JochMcp {
    /// A session over HTTP: the namespace comes from each request's URL or header.
    pub fn for_http(engine: Engine, progress_every: Duration) -> Self {
        Self {
            engine,
            namespace: None,
            session: None,
            progress_every,
            principal: None,
            surface: Default::default(),
            public_url: None,
            running: None,
        }
    }

    /// Links given to clients start with `url` (no trailing slash).
    pub fn with_public_url(mut self, url: std::sync::Arc<str>) -> Self {
        self.public_url = Some(url);
        self
    }

    /// Requests of this session, once initialized, are served without
    /// rmcp's tasks where they may be (`direct.rs`).
    pub(super) fn serving_directly(
        mut self,
        running: std::sync::Arc<super::sessions::Running>,
    ) -> Self {
        self.running = Some(running);
        self
    }

    /// Tells the sessions running here that this one, initialized, may be
    /// served directly through `peer`.
    pub(super) fn serve_directly(&self, extensions: &Extensions, peer: &Peer<RoleServer>) {
        if let (Some(running), Some(id)) = (&self.running, self.session_id(extensions)) {
            let outbox = super::outbox::Outbox::new(self.clone(), Some(peer.clone()));
            let served = super::direct::Served {
                mcp: self.clone(),
                outbox: std::sync::Arc::new(outbox),
            };
            running.serve(&id, served);
        }
    }

    /// A session over stdio, fixed to one namespace, acting as `principal`
    /// (`Principal::local()` for `joch mcp --db`, which has no authentication).
    pub fn for_stdio(
        engine: Engine,
        namespace: String,
        principal: Principal,
        progress_every: Duration,
    ) -> Self {
        Self {
            engine,
            namespace: Some(namespace),
            session: Some(format!("mcp-{}", uuid::Uuid::now_v7().simple())),
            progress_every,
            principal: Some(principal),
            surface: Default::default(),
            public_url: None,
            running: None,
        }
    }

    /// Who is asking: the stdio session's principal, or the one the
    /// authentication middleware put on the HTTP request. None is an
    /// error, never a silent local caller.
    pub(super) fn principal(&self, extensions: &Extensions) -> Result<Principal, ErrorData> {
        self.principal
            .clone()
            .or_else(|| {
                extensions
                    .get::<axum::http::request::Parts>()
                    .and_then(|p| p.extensions.get::<Principal>())
                    .cloned()
            })
            .ok_or_else(|| ErrorData::invalid_request("no authenticated principal", None))
    }

    /// `/v1/namespaces/{ns}/mcp`, else the `Joch-Namespace` header, else `default`.
    pub(super) fn namespace(&self, extensions: &Extensions) -> Result<String, ErrorData> {
        if let Some(ns) = &self.namespace {
            return Ok(ns.clone());
        }
        let parts = extensions.get::<axum::http::request::Parts>();
        let from_path = parts.and_then(|p| {
            p.uri
                .path()
                .strip_prefix("/v1/namespaces/")
                .and_then(|rest| rest.split('/').next())
                .map(str::to_owned)
        });
        let from_header = || {
            parts
                .and_then(|p| p.headers.get(NAMESPACE_HEADER))
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let ns = from_path
            .or_else(from_header)
            .unwrap_or_else(|| "default".to_owned());
        validate_namespace(&ns).map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        Ok(ns)
    }

    fn session(&self, extensions: &Extensions) -> Option<String> {
        self.session
            .clone()
            .or_else(|| self.session_id(extensions).map(|id| format!("mcp-{id}")))
    }

    /// An HTTP session's `Mcp-Session-Id` (none over stdio).
    pub(super) fn session_id(&self, extensions: &Extensions) -> Option<String> {
        if self.session.is_some() {
            return None;
        }
        extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// The execution a request's calls belong to: `_meta`'s, else the session's.
    pub(super) fn execution(
        &self,
        meta: &rmcp::model::RequestMetaObject,
        extensions: &Extensions,
    ) -> Option<String> {
        meta.get(META_EXECUTION)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| self.session(extensions))
            .map(|name| sanitize(name.as_str()))
            .filter(|name| validate_name("spec.executionRef.name", name).is_ok())
    }

    pub(super) async fn all_tools(
        &self,
        by: &Principal,
        namespace: &str,
    ) -> Result<Vec<Tool>, EngineError> {
        let mut tools = Vec::new();
        let mut continue_token = None;
        loop {
            let page = self
                .engine
                .resources()
                .list_tools(
                    by,
                    namespace,
                    ListParams {
                        limit: Some(1000),
                        continue_token,
                        ..ListParams::default()
                    },
                )
                .await?;
            tools.extend(page.items);
            match page.continue_token {
                Some(token) => continue_token = Some(token),
                None => break,
            }
        }
        tools.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(tools)
    }

    /// The ToolCall a `tools/call` asks for, with what the session and
    /// `_meta` say about who is calling, under a name joch minted (held
    /// while the call is made, see [`MintedName`]).
    pub(super) fn call_for(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> (ToolCall, MintedName) {
        let input = Value::Object(request.arguments.clone().unwrap_or_default());
        self.call_named(request.name.as_ref(), input, context)
    }

    /// A call of `tool` with `input`, with what the session and `_meta`
    /// say about who is calling, and the name joch minted for it.
    pub(super) fn call_named(
        &self,
        tool: &str,
        input: Value,
        context: &RequestContext<RoleServer>,
    ) -> (ToolCall, MintedName) {
        let meta = &context.meta;
        let text = |key: &str| meta.get(key).and_then(Value::as_str).map(str::to_owned);
        let agent = text(META_AGENT).or_else(|| context.client_info().map(|c| c.name));
        let execution = self.execution(meta, &context.extensions);
        let as_ref = |name: Option<String>, field: &str| {
            name.map(|n| sanitize(&n))
                .filter(|n| validate_name(field, n).is_ok())
                .map(ObjectRef::new)
        };
        let name = super::resume::call_name(&self.engine, &context.extensions);
        let mut call = ToolCall::of(name.as_str(), tool, input);
        call.spec.execution_ref = as_ref(execution, "spec.executionRef.name");
        call.spec.agent_ref = as_ref(agent, "spec.agentRef.name");
        call.spec.caller_id = text(META_CALLER);
        call.spec.traceparent = meta.get_traceparent().map(str::to_owned);
        if let Some(key) = text(META_IDEMPOTENCY_KEY) {
            call.spec.side_effects = Some(joch_core::CallSideEffects {
                idempotency_key: Some(key),
                ..Default::default()
            });
        }
        (call, name)
    }

    /// Runs the call; while it waits for a person, tells a client that
    /// asked for progress (`_meta.progressToken`) every `progress_every`,
    /// and asks the client's user through elicitation when the client and
    /// the approval allow it (`elicit.rs`). With `defer` (protocol
    /// 2026-07-28, which has no session to ask on), a call that waits for a
    /// person ends the request at once with its Approval: the client is
    /// answered `input_required`, and the call runs only when it retries
    /// (`deferred.rs`).
    pub(super) async fn run_call(
        &self,
        by_principal: &Principal,
        namespace: &str,
        mut call: ToolCall,
        tool: Option<&Tool>,
        context: &RequestContext<RoleServer>,
        defer: bool,
    ) -> Result<Ran, EngineError> {
        if defer {
            // The client may never come back: approved, the call waits for it.
            call.spec.runs_on = joch_core::RunsOn::Retry;
        }
        let name = call.metadata.name.clone();
        let by = elicit::decider_name(&call);
        let engine = self.engine.clone();
        let ns = namespace.to_owned();
        let (paused_tx, paused_rx) = tokio::sync::oneshot::channel();
        let mut paused = (defer || elicit::client_can_answer(&context.peer)).then_some(paused_rx);
        let paused_tx = paused.is_some().then_some(paused_tx);
        let caller = by_principal.clone();
        let token = context.meta.get_progress_token();
        // What the tool reports while it runs goes to the client's token too.
        let mut chunks = token
            .is_some()
            .then(|| self.engine.calls().follow_chunks(namespace, &name));
        // What the upstream asks during the call goes to this client.
        let (cancel, cancelled) = tokio::sync::watch::channel(false);
        let client = super::relay::FrontClient::of(context, cancelled);
        let _attached =
            self.engine
                .mcp()
                .attach_client(namespace, &name, std::sync::Arc::new(client));
        let mut cancel = Some(cancel);
        // The call runs to its end even if the client goes away: it is
        // recorded (the engine's own task outlives this one).
        let mut running = Box::pin(async move {
            engine
                .calls()
                .call_reporting_pause(&caller, &ns, call, paused_tx)
                .await
        });
        let mut asking: Option<elicit::Asking> = None;
        let mut next_pause: Option<elicit::NextPause> = None;
        // Its first tick one period from now: awaiting an interval's
        // immediate first tick waits for the timer's next turn (up to a
        // millisecond), which a fast call would pay in full.
        let mut ticker = tokio::time::interval_at(
            tokio::time::Instant::now() + self.progress_every,
            self.progress_every,
        );
        let mut reported = 0u32;
        let mut keepalive = self.keepalive(defer);
        loop {
            tokio::select! {
                done = &mut running => {
                    if let Some(asking) = asking {
                        asking.withdraw(&context.peer).await;
                    }
                    // What the tool reported before it ended reaches the
                    // client before its result does.
                    while let (Some(chunk), Some(token)) =
                        (chunks.as_mut().and_then(ChunkFollower::try_next), &token)
                    {
                        notify(context, token, &mut reported, progress_message(&chunk)).await;
                    }
                    return Ok(Ran::Settled(Box::new(done?.into_response())));
                }
                approval = until_some(paused.as_mut()), if paused.is_some() => {
                    paused = None;
                    if let (true, Ok(approval)) = (defer, &approval) {
                        // The call is recorded and its Approval written:
                        // the engine's task would only wait for the decision.
                        return Ok(Ran::Deferred(Box::new(approval.clone())));
                    }
                    // Asked from this task, so that it rides this request's stream.
                    if let Ok(approval) = approval {
                        let engine = &self.engine;
                        let asked = elicit::on_pause(&context.peer, engine, by_principal, approval, tool, &mut asking);
                        next_pause = Some(asked.await);
                    }
                }
                // Paused again (a consent after a person's approval): asked again.
                approval = until_some(next_pause.as_mut()), if next_pause.is_some() => {
                    next_pause = None;
                    if let Some(approval) = approval {
                        let engine = &self.engine;
                        let asked = elicit::on_pause(&context.peer, engine, by_principal, approval, tool, &mut asking);
                        next_pause = Some(asked.await);
                    }
                }
                answer = until_some(asking.as_mut().map(elicit::Asking::answered)), if asking.is_some() => {
                    if let Some(asking) = asking.take() {
                        asking.decide(&self.engine, answer, by.clone(), by_principal.clone());
                    }
                }
                chunk = until_some(chunks.as_mut().map(|c| c.next())), if chunks.is_some() => {
                    match (chunk, &token) {
                        (Some(chunk), Some(token)) => {
                            notify(context, token, &mut reported, progress_message(&chunk)).await;
                        }
                        _ => chunks = None,
                    }
                }
                () = context.ct.cancelled(), if cancel.is_some() => {
                    // An upstream call is told and ends; what still runs after
                    // a grace is cancelled as REST would, from a task of its
                    // own (this one may be dropped once its client cancels).
                    if let Some(cancel) = cancel.take() {
                        let _ = cancel.send(true);
                    }
                    super::tasks::cancel_after_grace(&self.engine, by_principal, namespace, &name);
                }
                _ = until_some(keepalive.as_mut().map(tokio::time::Interval::tick)), if keepalive.is_some() => {
                    ping(context);
                }
                _ = ticker.tick(), if token.is_some() => {
                    if let Some(token) = &token {
                        self.report_waiting(by_principal, namespace, &name, token, &mut reported, context).await;
                    }
                }
            }
        }
    }

    async fn report_waiting(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        token: &ProgressToken,
        reported: &mut u32,
        context: &RequestContext<RoleServer>,
    ) {
        let Ok(call) = self.engine.calls().get(by, namespace, name).await else {
            return;
        };
        if call.status.phase != Phase::AwaitingApproval {
            return;
        }
        let waiting = format!(
            "call {name} is waiting for approval (GET /v1/namespaces/{namespace}/approvals/{name})"
        );
        notify(context, token, reported, waiting).await;
    }

    /// Tells the client whenever the namespace's tool list changes, until
    /// the session ends.
    pub(super) fn watch_tools(&self, by: Principal, namespace: String, peer: Peer<RoleServer>) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut changes = this.engine.resources().tool_changes();
            let mut seen = this.fingerprint(&by, &namespace).await;
            loop {
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { return },
                    _ = tokio::time::sleep(Duration::from_secs(30)) => {}
                }
                if peer.is_transport_closed() {
                    return;
                }
                let now = this.fingerprint(&by, &namespace).await;
                if now != seen {
                    seen = now;
                    if peer.notify_tool_list_changed().await.is_err() {
                        return;
                    }
                }
            }
        });
    }

    pub(super) async fn fingerprint(
        &self,
        by: &Principal,
        namespace: &str,
    ) -> Vec<(String, String)> {
        self.all_tools(by, namespace)
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|t| (t.metadata.name, t.metadata.resource_version))
            .collect()
    }
}

impl JochMcp {
    /// For a request on an HTTP session: a session's worker and record end
    /// after a quiet spell (`sessions::HOT_IDLE`, the session idle time),
    /// which a long call would outlast, losing its answer; so the call
    /// pings its client three times per spell, whose answers keep both.
    fn keepalive(&self, defer: bool) -> Option<tokio::time::Interval> {
        if defer || self.namespace.is_some() {
            return None;
        }
        let idle = self.engine.mcp().session_limits().idle;
        let every = super::sessions::HOT_IDLE.min(idle) / 3;
        let first = tokio::time::Instant::now() + every;
        Some(tokio::time::interval_at(first, every))
    }
}

/// Sends the client a `ping` on the request's stream, not waiting for it.
fn ping(context: &RequestContext<RoleServer>) {
    let Ok(mut request) =
        serde_json::from_value::<ServerRequest>(serde_json::json!({"method": "ping"}))
    else {
        return;
    };
    request
        .extensions_mut()
        .insert(OriginatingRequestId(context.id.clone()));
    let peer = context.peer.clone();
    tokio::spawn(async move {
        let options = PeerRequestOptions::no_options();
        if let Ok(handle) = peer.send_request_with_option(request, options).await {
            let _ = tokio::time::timeout(Duration::from_secs(10), handle.await_response()).await;
        }
    });
}

/// How [`JochMcp::run_call`] ended.
pub(super) enum Ran {
    Settled(Box<ToolCall>),
    /// The call waits for a person, who decides its Approval.
    Deferred(Box<joch_core::Approval>),
}

/// `future`'s output, or never: a `select!` branch over something that may
/// not be there.
async fn until_some<F: std::future::Future>(future: Option<F>) -> F::Output {
    match future {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

/// Tells the client one more step of the call's progress, numbered by
/// joch (`reported`), so that it only ever increases.
/// A call served directly (`direct.rs`) holds its answer until they are out.
async fn notify(
    context: &RequestContext<RoleServer>,
    token: &ProgressToken,
    reported: &mut u32,
    message: String,
) {
    *reported += 1;
    let progress =
        ProgressNotificationParam::new(token.clone(), f64::from(*reported)).with_message(message);
    if context.peer.notify_progress(progress).await.is_ok()
        && let Some(sent) = context.extensions.get::<super::outbox::Sent>()
    {
        sent.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// What a client is told of one chunk of a running call: an upstream's
/// own progress (`{progress, total, message}`) as `3/10: message`, any
/// other chunk as its text, bounded. Progress values the client sees are
/// joch's own count, so that they only ever increase, as MCP requires,
/// across the wait for approval and the run.
fn progress_message(chunk: &Value) -> String {
    let mut text = match (chunk.get("progress"), chunk.get("message")) {
        (Some(progress), message) => {
            // 3.0 reads as 3.
            let number = |v: &Value| match v.as_f64() {
                Some(n) if n.fract() == 0.0 && n.abs() < 1e15 => format!("{}", n as i64),
                _ => v.to_string(),
            };
            let progress = number(progress);
            let of = chunk
                .get("total")
                .map(|t| format!("/{}", number(t)))
                .unwrap_or_default();
            let said = message
                .and_then(Value::as_str)
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            format!("{progress}{of}{said}")
        }
        _ => match chunk {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        },
    };
    if text.len() > 1024 {
        let mut end = 1024;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// A name joch accepts, from free text such as an MCP client's name.
fn sanitize(text: &str) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    cleaned
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// Time-ordered, like the engine's own call names.
#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn client_names_become_valid_names() {
        assert_eq!(sanitize("Claude Code"), "Claude-Code");
        assert_eq!(sanitize("openai-agents/0.24"), "openai-agents-0.24");
        assert_eq!(sanitize("  "), "");
    }
}
