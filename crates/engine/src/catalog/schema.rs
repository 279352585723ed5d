//! JSON Schema checks of tool inputs and outputs, compiled once per tool version.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use joch_core::{CallError, ErrorCode, Tool, ValidationError};
use jsonschema::Validator;
use serde_json::{Value, json};

/// Compiled schemas of the tools recently called, keyed by tool uid and
/// version so a replaced tool is recompiled on its next call.
#[derive(Default)]
pub(crate) struct SchemaCache {
    compiled: Mutex<HashMap<String, Arc<Compiled>>>,
}

pub(crate) struct Compiled {
    input: Validator,
    output: Option<Validator>,
}

/// Most tool versions kept compiled; the cache is simply emptied past it.
const MAX_ENTRIES: usize = 4096;

impl SchemaCache {
    pub(crate) fn get(&self, tool: &Tool) -> Result<Arc<Compiled>, ValidationError> {
        let key = format!("{}@{}", tool.metadata.uid, tool.metadata.resource_version);
        if let Some(hit) = self.lock().get(&key) {
            return Ok(Arc::clone(hit));
        }
        let compiled = Arc::new(compile(tool)?);
        let mut map = self.lock();
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(key, Arc::clone(&compiled));
        Ok(compiled)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Compiled>>> {
        self.compiled
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Compiles a tool's schemas, naming the field whose schema is invalid.
pub(crate) fn compile(tool: &Tool) -> Result<Compiled, ValidationError> {
    let input = jsonschema::validator_for(&tool.spec.input_schema).map_err(|e| {
        ValidationError::field("spec.inputSchema", format!("not a valid JSON Schema: {e}"))
    })?;
    let output = match &tool.spec.output_schema {
        Some(schema) => Some(jsonschema::validator_for(schema).map_err(|e| {
            ValidationError::field("spec.outputSchema", format!("not a valid JSON Schema: {e}"))
        })?),
        None => None,
    };
    Ok(Compiled { input, output })
}

impl Compiled {
    /// Checks call arguments; the error lists every violation.
    pub(crate) fn check_input(&self, args: &Value) -> Result<(), CallError> {
        check(
            &self.input,
            args,
            ErrorCode::InputSchemaViolation,
            "input does not match the tool's inputSchema",
        )
    }

    /// Checks a backend's output, when the tool declares an outputSchema.
    /// An MCP tool's schema describes its result's `structuredContent`, as
    /// the MCP specification says, not the whole result; a result without
    /// one (text only) has nothing to check.
    pub(crate) fn check_output(&self, output: &Value, mcp: bool) -> Result<(), CallError> {
        let checked = match mcp {
            true => output.get("structuredContent"),
            false => Some(output),
        };
        match (&self.output, checked) {
            (Some(v), Some(checked)) => check(
                v,
                checked,
                ErrorCode::OutputSchemaViolation,
                "output does not match the tool's outputSchema",
            ),
            _ => Ok(()),
        }
    }
}

/// At most this many violations are told to the model...
const MAX_TOLD: usize = 10;
/// ...each message cut to this many bytes, so that a huge payload cannot
/// flood the model's context.
const MAX_TOLD_BYTES: usize = 300;

/// What the model reads when its arguments do not fit the tool's schema:
/// which ones, by JSON pointer, and why, so that it can fix its call.
pub(crate) fn invalid_arguments_answer(call_name: &str, error: &CallError) -> Value {
    let all = error
        .details
        .as_ref()
        .and_then(|d| d["violations"].as_array())
        .map_or(&[][..], Vec::as_slice);
    let told: Vec<Value> = all
        .iter()
        .take(MAX_TOLD)
        .map(|v| {
            let mut message = v["message"].as_str().unwrap_or_default().to_owned();
            if message.len() > MAX_TOLD_BYTES {
                let mut end = MAX_TOLD_BYTES;
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                message.truncate(end);
                message.push('…');
            }
            json!({"path": v["path"], "message": message})
        })
        .collect();
    let mut answer = json!({
        "success": false,
        "error": "Invalid arguments",
        "reason": format!("{}: fix these arguments and call again", error.message),
        "violations": told,
        "tool_call_id": call_name,
    });
    if all.len() > MAX_TOLD {
        answer["moreViolations"] = json!(all.len() - MAX_TOLD);
    }
    answer
}

fn check(
    validator: &Validator,
    value: &Value,
    code: ErrorCode,
    message: &str,
) -> Result<(), CallError> {
    let violations: Vec<Value> = validator
        .iter_errors(value)
        .map(|e| json!({"path": e.instance_path().to_string(), "message": e.to_string()}))
        .collect();
    if violations.is_empty() {
        return Ok(());
    }
    Err(CallError {
        code: code.as_str().to_owned(),
        message: message.to_owned(),
        details: Some(json!({"violations": violations})),
    })
}
