//! An upstream MCP server's surface beyond tools, as joch's MCP front
//! relays it: resources, prompts, completion, logging, and the requests an
//! upstream sends back during a call (sampling, elicitation).
//!
//! Reading a resource and getting a prompt are governed and recorded as
//! calls: a ToolCall with `spec.operation` `resources/read` or `prompts/get`
//! of the server's *surface tool*, `<server>:resource` or `<server>:prompt`,
//! which joch makes from the `McpServer` when a call names it (it is never
//! stored). Policies match those names (`appliesTo.tools`) and the input
//! (`input.uri`, `input.name`) like any other call's.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::mcp::{McpBackend, SERVER_LABEL};
use crate::tool::{Observability, SideEffectLevel, SideEffects, ToolSpec};
use crate::{Backend, CallError, McpServer, Object, ObjectMeta, Tool};

/// What a ToolCall asks of its tool: run it (the default), or, for an
/// upstream MCP server's surface tool, read a resource or get a prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum McpOperation {
    /// `tools/call`: run the tool.
    #[default]
    #[serde(rename = "tools/call")]
    CallTool,
    /// `resources/read`: read the resource at `input.uri`.
    #[serde(rename = "resources/read")]
    ReadResource,
    /// `prompts/get`: get the prompt `input.name` with `input.arguments`.
    #[serde(rename = "prompts/get")]
    GetPrompt,
}

impl McpOperation {
    /// True for the default, `tools/call`.
    pub fn is_call_tool(&self) -> bool {
        *self == McpOperation::CallTool
    }

    /// The MCP method, which is also how the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            McpOperation::CallTool => "tools/call",
            McpOperation::ReadResource => "resources/read",
            McpOperation::GetPrompt => "prompts/get",
        }
    }

    /// The suffix of a server's surface tool for this operation.
    fn suffix(self) -> Option<&'static str> {
        match self {
            McpOperation::CallTool => None,
            McpOperation::ReadResource => Some(":resource"),
            McpOperation::GetPrompt => Some(":prompt"),
        }
    }
}

/// The surface tool of `server` for `operation` (`docs:resource`), or
/// `None` for `tools/call`.
pub fn surface_tool_name(server: &str, operation: McpOperation) -> Option<String> {
    operation.suffix().map(|suffix| format!("{server}{suffix}"))
}

/// The server a surface tool's name names, if it is one of `operation`'s.
pub fn surface_server(tool: &str, operation: McpOperation) -> Option<&str> {
    tool.strip_suffix(operation.suffix()?)
        .filter(|server| !server.is_empty())
}

impl McpServer {
    /// The surface tool for `operation`: read-only, idempotent, its input
    /// `{uri}` or `{name, arguments}`, trusted as the server's tools are,
    /// its result always inline and never enveloped.
    /// `None` for `tools/call`.
    pub fn surface_tool(&self, operation: McpOperation) -> Option<Tool> {
        let name = surface_tool_name(&self.metadata.name, operation)?;
        let (description, input_schema) = match operation {
            McpOperation::ReadResource => (
                "Reads a resource of this MCP server",
                json!({"type": "object", "required": ["uri"],
                       "properties": {"uri": {"type": "string"}}}),
            ),
            _ => (
                "Gets a prompt of this MCP server",
                json!({"type": "object", "required": ["name"],
                       "properties": {"name": {"type": "string"},
                                      "arguments": {"type": "object"}}}),
            ),
        };
        let mut metadata = ObjectMeta {
            name,
            namespace: self.metadata.namespace.clone(),
            // Caches (compiled schemas) key tools by uid and version.
            uid: format!(
                "{}{}",
                self.metadata.uid,
                operation.suffix().unwrap_or_default()
            ),
            resource_version: self.metadata.resource_version.clone(),
            ..ObjectMeta::default()
        };
        metadata
            .labels
            .insert(SERVER_LABEL.to_owned(), self.metadata.name.clone());
        Some(Tool {
            api_version: crate::API_VERSION.to_owned(),
            kind: Tool::KIND.to_owned(),
            metadata,
            spec: ToolSpec {
                description: description.to_owned(),
                input_schema,
                output_schema: None,
                side_effects: SideEffects {
                    level: SideEffectLevel::ReadOnly,
                    idempotent: true,
                    ..SideEffects::default()
                },
                observability: Observability::default(),
                backend: Backend::Mcp(McpBackend {
                    server: self.metadata.name.clone(),
                    tool: String::new(),
                    operation,
                }),
                cost: None,
                // The result is an MCP structure the client parses: never
                // a handle, never an envelope (see docs/mcp.md).
                inline: None,
                max_inline_bytes: Some(u64::MAX),
                trust: self.spec.trust,
                output_envelope: Some(crate::envelope::OutputEnvelope::None),
            },
        })
    }

    /// The prefix the front puts before this server's prompt names and
    /// resource URIs: `spec.toolPrefix`, `<server>.` by default.
    pub fn surface_prefix(&self) -> String {
        self.tool_name("")
    }
}

/// What a client of joch's MCP front declared it can answer, so that an
/// upstream's request during a call can be passed on to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ClientCapabilities {
    /// `sampling/createMessage`.
    pub sampling: bool,
    /// `elicitation/create` in form mode.
    pub elicitation_form: bool,
    /// `elicitation/create` in URL mode.
    pub elicitation_url: bool,
    /// `roots/list`.
    pub roots: bool,
    /// The client answers by retrying the call (protocol 2026-07-28, no
    /// session): an upstream's `input_required` goes to it as the call's
    /// own (see [`InputRound`]), not as requests during the call.
    pub rounds: bool,
}

impl ClientCapabilities {
    /// Whether a request `method` with `params` can go to this client.
    pub fn allows(&self, method: &str, params: &Value) -> bool {
        match method {
            "sampling/createMessage" => self.sampling,
            "elicitation/create" => match params.get("mode").and_then(Value::as_str) {
                Some("url") => self.elicitation_url,
                _ => self.elicitation_form,
            },
            "roots/list" => self.roots,
            _ => false,
        }
    }

    /// What a client must declare to be asked `method` with `params`: a
    /// `ClientCapabilities` object of MCP (`{"sampling": {}}`), as a
    /// `-32021` error's `data.requiredCapabilities` names it.
    pub fn required(method: &str, params: &Value) -> Value {
        match method {
            "sampling/createMessage" => json!({"sampling": {}}),
            "elicitation/create" => match params.get("mode").and_then(Value::as_str) {
                Some("url") => json!({"elicitation": {"url": {}}}),
                _ => json!({"elicitation": {"form": {}}}),
            },
            "roots/list" => json!({"roots": {}}),
            other => json!({"experimental": {other: {}}}),
        }
    }

    /// True when nothing can be passed on.
    pub fn is_empty(&self) -> bool {
        *self == ClientCapabilities::default()
    }
}

/// An upstream's `input_required` (SEP-2322) that a call waits on, for a
/// client that answers by retrying the call (`ToolCall.status.inputRequired`).
/// The client is given the questions and joch's own `requestState`, naming
/// the call and the round; the upstream's `requestState` stays here, bound
/// to the call, and goes back upstream with the client's answers once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InputRound {
    /// 1 for the upstream's first questions in the call, one more each time
    /// it asks again.
    pub round: u32,
    /// The upstream's `inputRequests`, as it sent them.
    pub requests: Value,
    /// The upstream's `requestState`, which the client never sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// When the upstream asked.
    pub asked_at: crate::Time,
    /// When the client's answers were taken (once: the round then runs on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_at: Option<crate::Time>,
    /// The client's `inputResponses`: as sent while the round runs on, then
    /// as the tool's `observability` keeps arguments (redacted, or withheld).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responses: Option<Value>,
}

/// The client that made a call, as the backend of an upstream MCP tool
/// sees it while the call runs: what the upstream asks during the call
/// goes to it, and it may cancel the call.
#[async_trait]
pub trait CallClient: Send + Sync + std::fmt::Debug {
    /// What it declared it can answer.
    fn capabilities(&self) -> ClientCapabilities;

    /// Passes the upstream's request `method` (`sampling/createMessage`,
    /// `elicitation/create`) on and returns the answer. A request the client
    /// cannot answer is an error, never an answer nobody gave. Dropping the
    /// future (the upstream cancelled its request) tells the client so.
    async fn request(&self, method: &str, params: Value) -> Result<Value, CallError>;

    /// Passes a notification about the call on (`notifications/message`).
    fn notify(&self, method: &str, params: Value);

    /// Resolves when the client cancels the call (`notifications/cancelled`).
    async fn cancelled(&self);
}

/// What an upstream sends that is not about one call: list changes,
/// resource updates, log messages. Reported, never waited on.
pub trait UpstreamNotices: Send + Sync {
    /// `server` (in `namespace`) sent notification `method` with `params`.
    fn notice(&self, namespace: &str, server: &str, method: &str, params: Value);
}

/// The requests of an upstream's surface that are not calls: listing
/// resources, templates and prompts, completion, subscriptions, log level.
#[async_trait]
pub trait McpSurface: Send + Sync {
    /// Sends `method` with `params` to `server`, returns its result.
    async fn request(
        &self,
        server: &McpServer,
        method: &str,
        params: Value,
    ) -> Result<Value, CallError>;

    /// The server's capabilities as it declared them in `initialize`.
    async fn capabilities(&self, server: &McpServer) -> Result<Value, CallError>;

    /// Where notifications of every upstream go from now on.
    fn set_notices(&self, notices: std::sync::Arc<dyn UpstreamNotices>);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surface_names_round_trip() {
        let name = surface_tool_name("docs", McpOperation::ReadResource).unwrap();
        assert_eq!(name, "docs:resource");
        assert_eq!(
            surface_server(&name, McpOperation::ReadResource),
            Some("docs")
        );
        assert_eq!(surface_server(&name, McpOperation::GetPrompt), None);
        assert_eq!(surface_server(":prompt", McpOperation::GetPrompt), None);
        assert_eq!(surface_tool_name("docs", McpOperation::CallTool), None);
    }

    #[test]
    fn capabilities_follow_the_elicitation_mode() {
        let form = ClientCapabilities {
            elicitation_form: true,
            ..ClientCapabilities::default()
        };
        assert!(form.allows("elicitation/create", &json!({"message": "?"})));
        assert!(!form.allows("elicitation/create", &json!({"mode": "url"})));
        assert!(!form.allows("sampling/createMessage", &json!({})));
    }
}
