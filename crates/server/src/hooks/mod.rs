//! Hook mode's HTTP surfaces: agents that run their tools themselves ask
//! joch before each call and report after it. Both speak their own
//! protocol and make the same two engine calls, `hook_request` and
//! `hook_result`.
//!
//! Namespace: `/v1/namespaces/{ns}/hooks/...`, or `/v1/hooks/...` with a
//! `Joch-Namespace` header (default `default`).

pub(crate) mod aos;
pub(crate) mod claude;

use axum::http::HeaderMap;
use joch_core::ObjectRef;
use joch_core::names::validate_name;

use crate::mcp::NAMESPACE_HEADER;

/// The namespace of a hook request: the path's, else the header's, else `default`.
pub(crate) fn namespace(path: Option<String>, headers: &HeaderMap) -> String {
    path.or_else(|| {
        headers
            .get(NAMESPACE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    })
    .unwrap_or_else(|| "default".to_owned())
}

/// A reference from free text (an agent's or session's id), when it makes a
/// valid name.
pub(crate) fn reference(field: &str, text: Option<&str>) -> Option<ObjectRef> {
    let text = text?.trim();
    validate_name(field, text)
        .ok()
        .map(|()| ObjectRef::new(text))
}
