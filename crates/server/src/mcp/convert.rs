//! joch's records in MCP's shapes: a Tool as an MCP tool definition, a
//! settled ToolCall as a `CallToolResult`. Pure functions over JSON.

use joch_core::{Backend, Phase, SideEffectLevel, Tool, ToolCall};
use serde_json::{Map, Value, json};

/// The MCP definition of a Tool: what `tools/list` shows a model.
pub(crate) fn tool_definition(tool: &Tool) -> Value {
    let mut input_schema = match &tool.spec.input_schema {
        Value::Object(schema) => schema.clone(),
        _ => Map::new(),
    };
    // MCP requires an object schema; joch's may leave `type` implicit.
    input_schema
        .entry("type")
        .or_insert_with(|| json!("object"));
    let mut definition = json!({
        "name": tool.metadata.name,
        "description": tool.spec.description,
        "inputSchema": input_schema,
    });
    // A declared output schema obliges joch to send matching structured
    // content, which it can only do for object outputs.
    if let Some(schema) = &tool.spec.output_schema {
        if schema.get("type").and_then(Value::as_str) == Some("object") {
            definition["outputSchema"] = schema.clone();
        }
    }
    if let Some(annotations) = annotations(tool) {
        definition["annotations"] = annotations;
    }
    definition
}

/// MCP's behaviour hints for a tool's side effects; none for `unknown`, so
/// that clients assume the worst.
fn annotations(tool: &Tool) -> Option<Value> {
    let effects = &tool.spec.side_effects;
    let (read_only, destructive, open_world) = match effects.level {
        SideEffectLevel::Unknown => return None,
        SideEffectLevel::ReadOnly => (true, false, false),
        SideEffectLevel::LocalWrite => (false, true, false),
        _ => (false, true, true),
    };
    Some(json!({
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": effects.idempotent || read_only,
        "openWorldHint": open_world,
    }))
}

/// The `CallToolResult` for a settled call (`call` carries the full output,
/// as [`joch_engine::CallOutcome::into_response`] gives it).
///
/// A call that did not succeed is a result with `isError: true` whose text
/// is the JSON the model should see (a denial says why, per seed 003),
/// never a JSON-RPC error: several agent SDKs hide those from the model.
pub(crate) fn call_result(call: &ToolCall, tool_is_mcp: bool) -> Value {
    let output = call.status.output.as_ref();
    if call.status.phase == Phase::Succeeded {
        // Media (from an MCP tool or a webhook) goes back as MCP content.
        let media = call
            .status
            .artifacts
            .iter()
            .any(|a| a.role == joch_core::ArtifactRole::Media);
        if let Some(result) = output.filter(|o| (tool_is_mcp || media) && is_tool_result(o)) {
            return with_result_type(result.clone(), false);
        }
        let output = output.cloned().unwrap_or(Value::Null);
        let mut result = json!({"content": [text_block(&output)], "isError": false});
        if output.is_object() {
            result["structuredContent"] = output;
        }
        return with_result_type(result, false);
    }
    // An upstream MCP tool's own error result goes back as it came.
    if let Some(details) = call.status.error.as_ref().and_then(|e| e.details.as_ref()) {
        if tool_is_mcp && is_tool_result(details) {
            return with_result_type(details.clone(), true);
        }
    }
    let answer = output.cloned().unwrap_or_else(|| {
        let (code, message) = call
            .status
            .error
            .as_ref()
            .map(|e| (e.code.as_str(), e.message.as_str()))
            .unwrap_or(("not_settled", "the call did not finish"));
        json!({
            "success": false,
            "error": code,
            "reason": message,
            "tool_call_id": call.metadata.name,
            "phase": call.status.phase.as_str(),
        })
    });
    with_result_type(json!({"content": [text_block(&answer)]}), true)
}

/// The result for a call that could not even be recorded (an unknown tool,
/// invalid arguments): the model reads why, as for any other refusal.
pub(crate) fn refused(code: &str, message: &str) -> Value {
    let answer = json!({"success": false, "error": code, "reason": message});
    with_result_type(json!({"content": [text_block(&answer)]}), true)
}

fn text_block(value: &Value) -> Value {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    json!({"type": "text", "text": text})
}

fn is_tool_result(value: &Value) -> bool {
    value.get("content").is_some_and(Value::is_array)
}

fn with_result_type(mut result: Value, is_error: bool) -> Value {
    result["isError"] = json!(is_error);
    // rmcp drops it for clients of protocol versions that predate it.
    result["resultType"] = json!("complete");
    result
}

/// True for a Tool that forwards to an upstream MCP server (its output is
/// already a `CallToolResult`).
pub(crate) fn is_mcp_tool(tool: &Tool) -> bool {
    matches!(tool.spec.backend, Backend::Mcp(_))
}

#[cfg(test)]
mod tests {
    use joch_core::{CallError, ErrorCode, ToolCallStatus};

    use super::*;

    fn tool(level: &str, idempotent: bool) -> Tool {
        serde_json::from_value(json!({
            "metadata": {"name": "crm.lookup"},
            "spec": {
                "description": "Look a customer up.",
                "inputSchema": {"properties": {"id": {"type": "string"}}},
                "outputSchema": {"type": "object"},
                "sideEffects": {"level": level, "idempotent": idempotent},
                "backend": {"type": "noop"}
            }
        }))
        .unwrap_or_else(|e| panic!("tool: {e}"))
    }

    fn call(phase: Phase, output: Option<Value>, error: Option<CallError>) -> ToolCall {
        let mut call = ToolCall::of("call-1", "crm.lookup", json!({}));
        call.status = ToolCallStatus {
            phase,
            output,
            error,
            ..ToolCallStatus::default()
        };
        call
    }

    #[test]
    fn definitions_carry_schema_type_and_hints() {
        let read = tool_definition(&tool("read_only", false));
        assert_eq!(read["inputSchema"]["type"], "object");
        assert_eq!(read["outputSchema"], json!({"type": "object"}));
        assert_eq!(read["annotations"]["readOnlyHint"], true);
        assert_eq!(read["annotations"]["idempotentHint"], true);

        let write = tool_definition(&tool("external_write", false));
        assert_eq!(write["annotations"]["destructiveHint"], true);
        assert_eq!(write["annotations"]["idempotentHint"], false);

        assert!(
            tool_definition(&tool("unknown", false))
                .get("annotations")
                .is_none()
        );
    }

    #[test]
    fn success_is_text_plus_structured_content() {
        let result = call_result(&call(Phase::Succeeded, Some(json!({"n": 1})), None), false);
        assert_eq!(result["isError"], false);
        assert_eq!(result["structuredContent"], json!({"n": 1}));
        assert_eq!(result["content"][0]["text"], r#"{"n":1}"#);
    }

    #[test]
    fn an_enveloped_output_is_the_text_content_as_it_is() {
        let envelope = joch_core::envelope::Envelope {
            nonce: "n0",
            call_id: "call-1",
            checksum: "c",
        };
        let output = envelope.wrap(json!({"n": "</joch-output>"}));
        let result = call_result(&call(Phase::Succeeded, Some(output.clone()), None), false);
        assert_eq!(result["content"][0]["text"], output);
        assert!(result.get("structuredContent").is_none());
        assert_eq!(
            joch_core::envelope::markers_in(output.as_str().unwrap_or_default()),
            2
        );
    }

    #[test]
    fn an_upstream_result_passes_through_with_its_media() {
        let upstream =
            json!({"content": [{"type": "image", "data": "aGk=", "mimeType": "image/png"}]});
        let result = call_result(&call(Phase::Succeeded, Some(upstream), None), true);
        assert_eq!(result["content"][0]["type"], "image");
        assert_eq!(result["isError"], false);
    }

    #[test]
    fn a_denial_is_an_error_result_carrying_the_denial_json() {
        let denial = json!({"success": false, "error": "Denied by policy", "reason": "no", "tool_call_id": "call-1"});
        let result = call_result(&call(Phase::Denied, Some(denial.clone()), None), false);
        assert_eq!(result["isError"], true);
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        assert_eq!(serde_json::from_str::<Value>(text).ok(), Some(denial));
    }

    #[test]
    fn a_failure_without_an_answer_names_its_cause() {
        let error = CallError::new(ErrorCode::BackendTimeout, "no answer");
        let result = call_result(&call(Phase::Failed, None, Some(error)), false);
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        let answer: Value = serde_json::from_str(text).unwrap_or_default();
        assert_eq!(answer["error"], "backend_timeout");
        assert_eq!(answer["phase"], "Failed");
    }
}
