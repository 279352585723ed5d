//! Trace spans of the call path, with OpenTelemetry's GenAI attributes:
//! one `execute_tool {tool}` span per call (its parent the caller's
//! `traceparent`, when given), and children for policy evaluation, the
//! wait for a person and the backend. Whoever embeds the engine decides
//! where spans go (the `joch` binary exports them over OTLP when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set). Arguments and results are put on
//! spans only when `EngineConfig::trace_content` says so.

use joch_core::{Backend, Tool, ToolCall};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The span of one call in `namespace`, child of the caller's trace when
/// it sent one. A call joch names gets its id once admission minted it
/// ([`record_call_id`]).
pub(crate) fn call_span(namespace: &str, call: &ToolCall) -> Span {
    let tool = call.tool_name();
    let id = Some(call.metadata.name.as_str()).filter(|n| !n.is_empty());
    let span = tracing::info_span!(
        "execute_tool",
        otel.name = %format!("execute_tool {tool}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %tool,
        gen_ai.tool.call.id = id,
        gen_ai.tool.type = tracing::field::Empty,
        gen_ai.tool.call.arguments = tracing::field::Empty,
        gen_ai.tool.call.result = tracing::field::Empty,
        error.type = tracing::field::Empty,
        joch.namespace = %namespace,
        traceparent = call.spec.traceparent.as_deref(),
    );
    if let Some(parent) = call.spec.traceparent.as_deref().and_then(remote_parent) {
        let _ = span.set_parent(parent);
    }
    span
}

/// Puts a minted call id on the current call span.
pub(crate) fn record_call_id(name: &str) {
    Span::current().record("gen_ai.tool.call.id", name);
}

/// What kind of tool it is, in GenAI terms: `extension` for tools that live
/// in another service (webhook, MCP server), `function` otherwise.
pub(crate) fn record_tool(tool: &Tool) {
    let kind = match tool.spec.backend {
        Backend::Rest(_) | Backend::Mcp(_) => "extension",
        Backend::Actions(_) | Backend::Agent {} | Backend::Noop {} => "function",
    };
    Span::current().record("gen_ai.tool.type", kind);
}

/// Why the call did not succeed, as `error.type`.
pub(crate) fn record_error(code: &str) {
    Span::current().record("error.type", code);
}

/// Arguments and result, for deployments that opted in.
pub(crate) fn record_content(field: &'static str, value: &serde_json::Value) {
    Span::current().record(field, value.to_string());
}

/// The OpenTelemetry context of a W3C `traceparent` (already validated).
fn remote_parent(traceparent: &str) -> Option<opentelemetry::Context> {
    let mut parts = traceparent.split('-');
    let (_version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let context = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    Some(opentelemetry::Context::new().with_remote_span_context(context))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_becomes_the_remote_parent() {
        let cx = remote_parent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let span = cx.as_ref().map(|cx| cx.span().span_context().clone());
        assert_eq!(
            span.as_ref().map(|s| (
                s.trace_id().to_string(),
                s.span_id().to_string(),
                s.is_sampled(),
                s.is_remote()
            )),
            Some((
                "4bf92f3577b34da6a3ce929d0e0e4736".to_owned(),
                "00f067aa0ba902b7".to_owned(),
                true,
                true
            ))
        );
        assert!(remote_parent("garbage").is_none());
    }
}
