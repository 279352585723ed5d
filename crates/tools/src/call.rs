//! The shapes an agent loop deals in: the call it makes (seed 004), the
//! tools it may call, and what a call came to.

use std::collections::BTreeMap;
use std::path::PathBuf;

use joch_core::{CallError, Phase};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// A structured tool invocation from the model (seed 004), dispatched to
/// [`ToolExecutor::execute_tool_call`](crate::ToolExecutor::execute_tool_call).
///
/// ```
/// use joch_tools::{ExecutionContext, ToolCall};
///
/// let call = ToolCall {
///     tool_id: "bash".to_owned(),
///     params: {
///         let mut m = serde_json::Map::new();
///         m.insert("command".to_owned(), serde_json::Value::String("echo hello".to_owned()));
///         m
///     },
///     caller_id: Some("user-42".to_owned()),
///     context: Some(ExecutionContext::new().with_name("repo")),
///     tool_call_id: String::new(),
///     skill_name: None,
/// };
/// assert_eq!(call.tool_id, "bash");
/// assert_eq!(call.params, ToolCall::new("bash").with_param("command", "echo hello").params);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCall {
    /// The tool, as named by [`ToolExecutor::tool_definitions`](crate::ToolExecutor::tool_definitions).
    pub tool_id: String,
    /// The arguments.
    pub params: Map<String, Value>,
    /// Opaque caller (user or session) id; `None` for system-initiated calls.
    pub caller_id: Option<String>,
    /// Per-turn execution environment; `None` means the executor's default.
    pub context: Option<ExecutionContext>,
    /// The model's id for this call, correlating its output with it. When
    /// set, it is the call's idempotency key: the same call sent again (a
    /// retry, a replayed turn) returns the first one's outcome without
    /// running the tool again.
    pub tool_call_id: String,
    /// Skills active in the turn that issued the call (turn-level attribution).
    pub skill_name: Option<Vec<String>>,
}

impl ToolCall {
    /// A call of `tool` with no arguments.
    pub fn new(tool: impl Into<String>) -> Self {
        Self {
            tool_id: tool.into(),
            ..Self::default()
        }
    }

    /// Sets an argument.
    pub fn with_param(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.params.insert(name.into(), value.into());
        self
    }

    /// Sets the model's call id (and so the idempotency key).
    pub fn with_tool_call_id(mut self, id: impl Into<String>) -> Self {
        self.tool_call_id = id.into();
        self
    }

    /// The ToolCall manifest joch records for this call.
    pub(crate) fn manifest(&self, agent: Option<&str>, execution: Option<&str>) -> Value {
        let mut spec = json!({
            "toolRef": {"name": self.tool_id},
            "input": Value::Object(self.params.clone()),
        });
        let fields = [
            ("agentRef", agent.map(|name| json!({"name": name}))),
            ("executionRef", execution.map(|name| json!({"name": name}))),
            ("callerId", self.caller_id.as_ref().map(|id| json!(id))),
            (
                "skillNames",
                self.skill_name.as_ref().map(|names| json!(names)),
            ),
            ("context", self.context.as_ref().map(|c| json!(c))),
            (
                "sideEffects",
                (!self.tool_call_id.is_empty())
                    .then(|| json!({"idempotencyKey": self.tool_call_id})),
            ),
        ];
        for (field, value) in fields {
            if let Some(value) = value {
                spec[field] = value;
            }
        }
        json!({"apiVersion": joch_core::API_VERSION, "kind": "ToolCall", "spec": spec})
    }
}

/// Where and how a turn's tools run: working directory, environment, a
/// name. Recorded on the call as reported; joch's own backends (webhooks,
/// declarative actions, MCP servers) do not run in it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionContext {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    working_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
}

impl ExecutionContext {
    /// The executor's defaults: nothing set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names the environment (a repository, a sandbox).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets the working directory.
    pub fn with_working_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// Adds an environment variable.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// The name, if set.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The working directory, if set.
    pub fn working_dir(&self) -> Option<&std::path::Path> {
        self.working_dir.as_deref()
    }

    /// The environment variables set.
    pub fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }
}

/// A tool the model may call: what to put in its tool list.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    /// The name to call it by.
    pub name: String,
    /// For the model.
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
}

impl From<&joch_core::Tool> for ToolDefinition {
    fn from(tool: &joch_core::Tool) -> Self {
        Self {
            name: tool.metadata.name.clone(),
            description: tool.spec.description.clone(),
            input_schema: tool.spec.input_schema.clone(),
        }
    }
}

/// What a call came to, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The model's id for the call, as given.
    pub tool_call_id: String,
    /// The name of joch's record of it (`GET .../toolcalls/{name}`).
    pub record: String,
    /// `Succeeded`, `Failed`, `Denied`, `TimedOut`, ...
    pub phase: Phase,
    /// The tool's result, when it succeeded.
    pub output: Option<Value>,
    /// Why it did not succeed: for a denial, the policy's message for the model.
    pub error: Option<CallError>,
    /// True when this is the outcome of an earlier call with the same
    /// `tool_call_id`: nothing ran this time.
    pub replayed: bool,
}

impl ToolOutput {
    /// Whether the tool ran and succeeded.
    pub fn succeeded(&self) -> bool {
        self.phase == Phase::Succeeded
    }

    pub(crate) fn of(call: &ToolCall, record: joch_core::ToolCall, replayed: bool) -> Self {
        Self {
            tool_call_id: call.tool_call_id.clone(),
            record: record.metadata.name,
            phase: record.status.phase,
            output: record.status.output,
            error: record.status.error,
            replayed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_carries_every_field_the_model_gave() {
        let call = ToolCall {
            tool_id: "bash".into(),
            params: [("command".to_owned(), json!("echo hello"))]
                .into_iter()
                .collect(),
            caller_id: Some("user-42".into()),
            context: Some(ExecutionContext::new().with_name("repo").with_env("A", "1")),
            tool_call_id: "call_1".into(),
            skill_name: Some(vec!["shell".into()]),
        };
        let manifest = call.manifest(Some("agent-a"), None);
        let record: joch_core::ToolCall = serde_json::from_value(manifest).unwrap();
        assert_eq!(record.spec.tool_ref.name, "bash");
        assert_eq!(record.spec.input, json!({"command": "echo hello"}));
        assert_eq!(record.spec.caller_id.as_deref(), Some("user-42"));
        assert_eq!(record.spec.skill_names, ["shell"]);
        assert_eq!(
            record.spec.context,
            Some(json!({"name": "repo", "env": {"A": "1"}}))
        );
        assert_eq!(record.spec.agent_ref.unwrap().name, "agent-a");
        assert_eq!(
            record.spec.side_effects.unwrap().idempotency_key.as_deref(),
            Some("call_1")
        );
    }

    #[test]
    fn a_call_without_an_id_has_no_idempotency_key() {
        let record: joch_core::ToolCall =
            serde_json::from_value(ToolCall::new("t").manifest(None, None)).unwrap();
        assert!(record.spec.side_effects.is_none());
        assert!(record.spec.execution_ref.is_none());
    }
}
