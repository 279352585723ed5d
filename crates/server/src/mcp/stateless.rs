//! Requests of protocol 2026-07-28 and later (no session) that the front
//! serves in their own task (`direct.rs`), answered in JSON as rmcp's
//! stateless JSON mode answers them.
//!
//! rmcp checks a request's headers before its handler sees it; the front
//! takes a request directly only when those checks would surely pass
//! ([`plain`], [`consistent`]), and leaves every other one to rmcp, so
//! that what a client is refused, and how it is worded, stays rmcp's.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header, request::Parts};
use axum::response::Response;
use futures_util::{Stream, StreamExt};
use rmcp::model::{
    ClientRequest, ErrorCode, GetExtensions, GetMeta, JsonRpcRequest, ProtocolVersion,
    ServerJsonRpcMessage,
};

use super::direct::Served;
use super::handler::JochMcp;
use super::outbox::Outbox;

const VERSION_HEADER: &str = "mcp-protocol-version";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";
const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";

/// Whether rmcp would let a POST with these headers through to its body:
/// it accepts JSON and an event stream and sends JSON (its `Host` was
/// checked at the edge).
pub(super) fn plain(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for accept in headers.get_all(header::ACCEPT) {
        let Ok(accept) = accept.to_str() else {
            return false;
        };
        for range in accept.split(',').map(str::trim) {
            // Weights and parameters: rmcp's parser decides.
            if range.contains(';') {
                return false;
            }
            json |= range.eq_ignore_ascii_case(JSON);
            sse |= range.eq_ignore_ascii_case(EVENT_STREAM);
        }
    }
    let sends_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case(JSON)
        });
    json && sse && sends_json
}

/// Whether the request's protocol version, `_meta` and SEP-2243 headers
/// agree as rmcp requires, in their plainest form.
pub(super) fn consistent(headers: &HeaderMap, request: &JsonRpcRequest<ClientRequest>) -> bool {
    let one = |name: &str| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().ok(),
            _ => None,
        }
    };
    let version = ProtocolVersion::V_2026_07_28;
    let meta = request.request.get_meta();
    if one(VERSION_HEADER) != Some(version.as_str())
        || meta.protocol_version().as_ref() != Some(&version)
        || !meta.missing_required_keys(&version).is_empty()
    {
        return false;
    }
    match &request.request {
        ClientRequest::CallToolRequest(call) => {
            let name = call.params.name.as_ref();
            one(METHOD_HEADER) == Some("tools/call")
                && one(NAME_HEADER) == Some(name)
                && !name.starts_with("=?")
        }
        ClientRequest::ListToolsRequest(_) => one(METHOD_HEADER) == Some("tools/list"),
        _ => false,
    }
}

/// The answer as rmcp's stateless JSON mode gives it, with its status.
pub(super) fn json_answer(answer: &ServerJsonRpcMessage) -> Response {
    let status = match answer {
        ServerJsonRpcMessage::Error(e) => match e.error.code {
            ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
            | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
            ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            _ => StatusCode::OK,
        },
        _ => StatusCode::OK,
    };
    let mut response = Response::new(Body::from(encoded(answer)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    response
}

/// A message as JSON; one that cannot be encoded (a handler's value no
/// JSON holds) is answered as an internal error naming the request.
fn encoded(message: &ServerJsonRpcMessage) -> String {
    serde_json::to_string(message).unwrap_or_else(|e| {
        let id = match message {
            ServerJsonRpcMessage::Response(r) => serde_json::to_value(&r.id).ok(),
            ServerJsonRpcMessage::Error(e) => serde_json::to_value(&e.id).ok(),
            _ => None,
        };
        serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": ErrorCode::INTERNAL_ERROR.0,
            "message": format!("the answer could not be encoded: {e}"),
        }})
        .to_string()
    })
}

/// The handler and outbox of stateless requests served directly.
pub(crate) struct Stateless {
    mcp: JochMcp,
    served: OnceLock<Served>,
}

impl Stateless {
    pub(super) fn new(mcp: JochMcp) -> Self {
        Self {
            mcp,
            served: OnceLock::new(),
        }
    }

    /// Its outbox starts at the first request, inside the runtime.
    pub(super) fn served(&self) -> Served {
        self.served
            .get_or_init(|| Served {
                mcp: self.mcp.clone(),
                outbox: Arc::new(Outbox::new(self.mcp.clone(), None)),
            })
            .clone()
    }
}

/// Takes `parts` back from a request the front does not serve directly.
pub(super) fn parts_of(request: &mut JsonRpcRequest<ClientRequest>) -> Option<Parts> {
    request.request.extensions_mut().remove::<Parts>()
}

/// What the direct path answers: JSON when the answer is its first
/// message, else an event stream of them all, as rmcp's JSON mode does.
pub(super) async fn respond(
    messages: impl Stream<Item = ServerJsonRpcMessage> + Send + Sync + 'static,
) -> Response {
    let mut messages = Box::pin(messages);
    let Some(first) = messages.next().await else {
        return json_answer(&ServerJsonRpcMessage::error(
            rmcp::ErrorData::internal_error("no answer", None),
            None,
        ));
    };
    if matches!(
        first,
        ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_)
    ) {
        return json_answer(&first);
    }
    let events = futures_util::stream::once(std::future::ready(first))
        .chain(messages)
        .map(|message| {
            let data = encoded(&message);
            Ok::<_, std::convert::Infallible>(format!("data: {data}\n\n"))
        });
    let mut response = Response::new(Body::from_stream(events));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
