//! A session's `tools/call` stream that dropped, resumed with
//! `Last-Event-ID` (Streamable HTTP resumability; 2025-11-25 SSE polling,
//! SEP-1699), on any replica.
//!
//! The stream of a call starts with a priming event: an id and a `retry`
//! hint, no data. A client that loses the stream before the answer
//! reconnects with `GET` and that id as `Last-Event-ID`, and the answer
//! comes on the new stream. The id names the call (its ToolCall, whose
//! name the front mints before the handler records the call, see
//! [`PresetName`]) and the request's JSON-RPC id, signed with the
//! session's key (`joch_engine::StreamSigner`):
//! `jc1.<call>.<position>.<request id>.<signature>`.
//!
//! The answer is read from the call's record once it settles
//! (`Calls::outcome_within`): nothing runs again, and any replica can
//! answer, the session's worker here or not. A call served by the
//! session's worker (rmcp's) on this replica resumes there first, so
//! what it still sends (progress, a question to the client) comes too.
//!
//! Bounds: nothing is kept for a dropped stream but what rmcp's worker
//! keeps anyway; a resumed stream waits at most [`RESUME_WAIT`] for the
//! call, then ends with the same id and a `retry` hint, and the client
//! polls again; at most [`MAX_WAITING`] resumed streams wait per replica,
//! beyond which one ends at once the same way. An id that does not
//! verify for the session (made up, altered, another session's) is
//! answered `404 unknown_event_id`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use joch_engine::{Engine, EngineError, MintedName, Principal, StreamSigner};
use rmcp::model::{NumberOrString, RequestId};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::convert::{call_result, is_mcp_tool};

/// The `retry` hint of a call's stream: how long a client waits before
/// it reconnects (rmcp's own default).
pub(crate) const RETRY: Duration = Duration::from_secs(3);
/// How long a resumed stream waits for its call before it ends, to be
/// polled again.
pub(crate) const RESUME_WAIT: Duration = Duration::from_secs(25);
/// Most resumed streams waiting for their call at once on one replica.
pub(crate) const MAX_WAITING: usize = 256;
/// What joch's event ids of a call's stream start with.
const PREFIX: &str = "jc1";
/// Longest JSON-RPC request id (string) a resumable stream carries.
const MAX_REQUEST_ID: usize = 128;

/// The ToolCall name the front minted for a `tools/call`, put in the
/// request's extensions: the handler records the call under it, so that
/// the stream's event ids can name the call before it is recorded.
#[derive(Clone)]
pub(crate) struct PresetName(Arc<Mutex<Option<MintedName>>>);

impl PresetName {
    pub(crate) fn new(name: MintedName) -> Self {
        Self(Arc::new(Mutex::new(Some(name))))
    }

    /// The name, once.
    pub(crate) fn take(&self) -> Option<MintedName> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// The name the handler records a call under: the front's, if it minted
/// one for the stream's event ids, else a fresh one.
pub(crate) fn call_name(engine: &Engine, extensions: &rmcp::model::Extensions) -> MintedName {
    extensions
        .get::<PresetName>()
        .and_then(PresetName::take)
        .unwrap_or_else(|| engine.calls().mint_name("mcp-"))
}

/// Makes the event ids of one call's stream.
#[derive(Clone)]
pub(crate) struct Ids {
    signer: StreamSigner,
    call: String,
    request: String,
}

impl Ids {
    /// For call `call`, answering request `id`; `None` when the id is too
    /// long to carry (the stream is then not resumable).
    pub(crate) fn new(signer: StreamSigner, call: &str, id: &RequestId) -> Option<Self> {
        let request = match id {
            NumberOrString::Number(n) => format!("n{n}"),
            NumberOrString::String(s) if s.len() <= MAX_REQUEST_ID => format!("s{}", hex(s)),
            NumberOrString::String(_) => return None,
        };
        Some(Self {
            signer,
            call: call.to_owned(),
            request,
        })
    }

    /// The id of the event at `position`: `d` for the priming event of a
    /// call served directly, `w<rmcp's id>` for one of the session's worker.
    fn id(&self, position: &str) -> String {
        let text = format!("{}.{position}.{}", self.call, self.request);
        let tag = self.signer.sign(&text);
        format!("{PREFIX}.{text}.{tag}")
    }

    /// The priming event of a call served directly.
    pub(crate) fn priming(&self) -> ServerSseMessage {
        ServerSseMessage::priming(self.id("d"), RETRY)
    }

    /// An event of the session's worker, its id (`index/stream`, rmcp's)
    /// made one of joch's.
    pub(crate) fn worker(&self, mut message: ServerSseMessage) -> ServerSseMessage {
        if let Some(id) = message.event_id.take() {
            message.event_id = Some(self.id(&format!("w{id}")));
        }
        message
    }
}

/// For a `tools/call` of a session that signs with `signer`: mints the
/// call's name for the handler ([`PresetName`]) and gives its stream's
/// ids; `None` (and nothing minted) for another request, or one whose
/// stream cannot be resumed.
pub(crate) fn tag_call(
    engine: &Engine,
    signer: Option<StreamSigner>,
    request: &mut rmcp::model::JsonRpcRequest<rmcp::model::ClientRequest>,
) -> Option<Ids> {
    use rmcp::model::{ClientRequest, GetExtensions};
    if !matches!(request.request, ClientRequest::CallToolRequest(_)) {
        return None;
    }
    let signer = signer?;
    let name = engine.calls().mint_name("mcp-");
    let ids = Ids::new(signer, name.as_str(), &request.id)?;
    request
        .request
        .extensions_mut()
        .insert(PresetName::new(name));
    Some(ids)
}

/// What a `Last-Event-ID` of joch's says, not yet verified.
#[derive(Debug, PartialEq)]
pub(crate) struct Parsed {
    pub(crate) call: String,
    /// rmcp's own id of the event, if the session's worker sent it.
    pub(crate) worker: Option<String>,
    pub(crate) request: RequestId,
    request_text: String,
    text: String,
    tag: String,
}

/// A `Last-Event-ID` of joch's call streams: `Some(None)` when it looks
/// like one but does not parse, `None` when it is none of them (the
/// session's notification stream's, rmcp's).
pub(crate) fn parse(id: &str) -> Option<Option<Parsed>> {
    let rest = id.strip_prefix(PREFIX)?.strip_prefix('.')?;
    Some(parse_rest(rest))
}

fn parse_rest(rest: &str) -> Option<Parsed> {
    let (text, tag) = rest.rsplit_once('.')?;
    let mut parts = text.split('.');
    let (call, position, request) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || call.is_empty() {
        return None;
    }
    let worker = match position {
        "d" => None,
        p => Some(p.strip_prefix('w')?.to_owned()),
    };
    let request_text = request.to_owned();
    let request = match request.split_at_checked(1)? {
        ("n", n) => NumberOrString::Number(n.parse().ok()?),
        ("s", s) => NumberOrString::String(unhex(s)?.into()),
        _ => return None,
    };
    Some(Parsed {
        call: call.to_owned(),
        worker,
        request,
        request_text,
        text: text.to_owned(),
        tag: tag.to_owned(),
    })
}

impl Parsed {
    /// The ids of its stream, if the session `signer` signs for gave it.
    pub(crate) fn verified(&self, signer: &StreamSigner) -> Option<Ids> {
        signer.verifies(&self.text, &self.tag).then(|| Ids {
            signer: signer.clone(),
            call: self.call.clone(),
            request: self.request_text.clone(),
        })
    }
}

/// A string request id, as the id of an event carries it.
fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<String> {
    if text.len() % 2 != 0 || text.len() > 2 * MAX_REQUEST_ID {
        return None;
    }
    let bytes = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// The resumed streams waiting on this replica.
pub(crate) struct Waiting(Arc<Semaphore>);

impl Default for Waiting {
    fn default() -> Self {
        Self(Arc::new(Semaphore::new(MAX_WAITING)))
    }
}

/// The answer of a resumed stream: the priming event again (its id is
/// the client's to come back with), then what `rest` sends.
pub(crate) fn respond(
    last: &str,
    rest: impl Stream<Item = ServerSseMessage> + Send + 'static,
) -> Response {
    let priming = ServerSseMessage::priming(last.to_owned(), RETRY);
    let events = futures_util::stream::iter([priming])
        .chain(rest)
        .map(|m| Ok::<_, std::convert::Infallible>(event(m)));
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn event(message: ServerSseMessage) -> Event {
    let mut event = Event::default();
    if let Some(id) = message.event_id {
        event = event.id(id);
    }
    if let Some(retry) = message.retry {
        event = event.retry(retry);
    }
    if let Some(message) = message.message {
        event = event
            .event("message")
            .data(serde_json::to_string(&*message).unwrap_or_default());
    }
    event
}

/// The call's answer from its record: once it settles within
/// [`RESUME_WAIT`], else nothing (the stream ends; the client polls again).
pub(crate) fn from_record(
    engine: Engine,
    waiting: &Waiting,
    by: Principal,
    namespace: String,
    parsed: Parsed,
) -> impl Stream<Item = ServerSseMessage> + Send + 'static {
    // Beyond the cap, the stream ends at once: the client comes back after `retry`.
    let permit = waiting.0.clone().try_acquire_owned().ok();
    futures_util::stream::once(async move {
        let _permit = permit?;
        let outcome = engine
            .calls()
            .outcome_within(&by, &namespace, &parsed.call, RESUME_WAIT)
            .await;
        let answer = match outcome {
            Ok(Some(call)) => {
                let tool = engine
                    .resources()
                    .cached_tool(&by, &namespace, call.tool_name())
                    .await;
                let is_mcp = tool.is_ok_and(|t| is_mcp_tool(&t));
                let mut result = call_result(&call, is_mcp);
                // As rmcp words it for a session's protocol versions.
                if let Some(result) = result.as_object_mut() {
                    result.remove("resultType");
                }
                json!({"jsonrpc": "2.0", "id": parsed.request, "result": result})
            }
            Ok(None) => return None,
            Err(EngineError::NotFound { .. }) => not_on_record(&parsed),
            Err(e) => {
                tracing::warn!(error = %e, call = %parsed.call, "cannot read a resumed stream's call");
                return None;
            }
        };
        let message = serde_json::from_value(answer).ok()?;
        Some(ServerSseMessage::from_message(message))
    })
    .filter_map(std::future::ready)
}

/// The JSON-RPC error for a call that is not on record: refused before it
/// was recorded, or answered from an earlier call with its idempotency key.
fn not_on_record(parsed: &Parsed) -> Value {
    json!({"jsonrpc": "2.0", "id": parsed.request, "error": {
        "code": -32603,
        "message": format!(
            "call {} of this stream is not on record (refused before it was recorded, or answered by an earlier call with the same idempotency key): retry the call, with its joch.dev/idempotencyKey if it had one",
            parsed.call
        ),
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_are_not_jochs_are_left_to_rmcp() {
        assert_eq!(parse("3"), None);
        assert_eq!(parse("0/1"), None);
        assert_eq!(parse("jc1x"), None);
        assert_eq!(parse("jc1.garbage"), Some(None));
        assert_eq!(
            parse("jc1.call.x.n1.tag"),
            Some(None),
            "an unknown position"
        );
        assert_eq!(
            parse("jc1.call.d.q1.tag"),
            Some(None),
            "an unknown request id"
        );
        assert_eq!(parse("jc1.call.d.n1.extra.tag"), Some(None));
    }

    fn signer(key: &str) -> StreamSigner {
        let session: joch_engine::McpSession = serde_json::from_value(json!({
            "namespace": "default", "principal": "p", "client": {}, "lastSeenMs": 0,
            "streamKey": key,
        }))
        .expect("a session record");
        session.stream_signer().expect("a keyed session")
    }

    #[test]
    fn an_id_verifies_for_the_session_that_gave_it_only() {
        let request = NumberOrString::String("req.1".into());
        let ids = Ids::new(signer("k"), "mcp-1", &request).expect("resumable");
        let priming = ids.priming();
        assert_eq!(priming.retry, Some(RETRY));
        let id = priming.event_id.expect("an id");
        let parsed = parse(&id).flatten().expect("parses");
        assert_eq!((parsed.call.as_str(), &parsed.request), ("mcp-1", &request));
        assert_eq!(parsed.worker, None);
        assert!(parsed.verified(&signer("k")).is_some());
        assert!(parsed.verified(&signer("another")).is_none());

        let numbered = ids.worker(ServerSseMessage::priming("2/0", RETRY));
        let parsed = parse(&numbered.event_id.expect("an id"))
            .flatten()
            .expect("parses");
        assert_eq!(parsed.worker.as_deref(), Some("2/0"));
        assert!(parsed.verified(&signer("k")).is_some());

        let long = NumberOrString::String("x".repeat(MAX_REQUEST_ID + 1).into());
        assert!(
            Ids::new(signer("k"), "mcp-1", &long).is_none(),
            "too long to carry"
        );
    }

    #[test]
    fn an_id_carries_its_call_position_and_request() {
        let parsed = parse("jc1.mcp-0190.w2/0.n42.abc")
            .flatten()
            .expect("parses");
        assert_eq!(parsed.call, "mcp-0190");
        assert_eq!(parsed.worker.as_deref(), Some("2/0"));
        assert_eq!(parsed.request, NumberOrString::Number(42));
        let parsed = parse(&format!("jc1.c.d.s{}.t", hex("a.b")))
            .flatten()
            .expect("parses");
        assert_eq!(parsed.request, NumberOrString::String("a.b".into()));
        assert_eq!(parsed.worker, None);
    }
}
