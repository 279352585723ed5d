//! The `Tool` resource: what a tool is, what it may touch, and how to run it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::envelope::{OutputEnvelope, Trust};
use crate::limits::{self, APPROVAL_TIMEOUT_SECONDS, IDEMPOTENCY_WINDOW_SECONDS, INLINE_BYTES};
use crate::names::validate_name;
use crate::object::{Object, check_type};
use crate::{FieldError, ObjectMeta, ValidationError};

/// A tool an agent may call through joch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tool {
    /// Always `joch.dev/v1alpha1`; may be omitted in requests.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `Tool`; may be omitted in requests.
    #[serde(default = "tool_kind")]
    pub kind: String,
    /// Name (dots allowed, e.g. `zendesk.create_ticket`), namespace, labels.
    pub metadata: ObjectMeta,
    /// What the tool is and how it runs.
    pub spec: ToolSpec,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn tool_kind() -> String {
    Tool::KIND.to_owned()
}

/// `Tool.spec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "ToolSpecManifest")]
pub struct ToolSpec {
    /// Shown to the model.
    pub description: String,
    /// JSON Schema the call's input must satisfy.
    pub input_schema: Value,
    /// JSON Schema the backend's output must satisfy, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// What calling the tool may change in the world.
    pub side_effects: SideEffects,
    /// What of a call is kept in records and logs.
    pub observability: Observability,
    /// How the tool is executed.
    pub backend: Backend,
    /// What a call costs, recorded on each call that runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::cost::ToolCost>,
    /// `false`: results go back as a handle to an artifact instead of
    /// inline (default: inline, unless over `maxInlineBytes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inline: Option<bool>,
    /// Results larger than this many bytes go back as a handle (default:
    /// the namespace's `maxInlineBytes`, else no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_inline_bytes: Option<u64>,
    /// Whether its output may reach the model as it is (default: untrusted
    /// for webhooks, declarative tools and MCP upstreams; trusted for
    /// `noop` and `agent`). See [`Tool::trust`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trust: Option<Trust>,
    /// How the model-facing output of an untrusted call is framed
    /// (default: the namespace's `outputEnvelope`, else `none`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_envelope: Option<OutputEnvelope>,
}

/// How a Tool's side effects are classified. Anything not `read_only` is a
/// side effect that must never run twice unless the tool is `idempotent`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SideEffects {
    /// The kind of effect; `unknown` (the default) is treated as risky.
    #[serde(default)]
    pub level: SideEffectLevel,
    /// Running the tool twice with the same input has the effect of running it once.
    #[serde(default)]
    pub idempotent: bool,
    /// Every call needs a person's approval before it runs.
    #[serde(default)]
    pub requires_approval: bool,
    /// Derives an idempotency key from the call when the caller gives none,
    /// e.g. `zendesk-{{ input.subject | hash }}` (MiniJinja syntax; `input`,
    /// `tool`, `agent`, `execution` and `caller` are in scope).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key_template: Option<String>,
    /// How long a key collapses repeats, in seconds (default: the server's, 24 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_window_seconds: Option<u64>,
    /// How long a call of this tool waits for approval when the deferring
    /// policy sets no deadline (default: the server's, 300 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_timeout_seconds: Option<u64>,
}

impl SideEffects {
    /// True when running the tool again cannot cause a second, different effect:
    /// a read, or an idempotent write. Such calls may skip the disk sync before
    /// running, and may be replayed freely.
    pub fn is_repeatable(&self) -> bool {
        self.level == SideEffectLevel::ReadOnly || self.idempotent
    }

    /// Field errors, under `at`, for a window or a deadline out of its range.
    pub fn problems(&self, at: &str) -> Vec<FieldError> {
        limits::problems(&[
            (
                &format!("{at}.idempotencyWindowSeconds"),
                IDEMPOTENCY_WINDOW_SECONDS,
                self.idempotency_window_seconds,
            ),
            (
                &format!("{at}.approvalTimeoutSeconds"),
                APPROVAL_TIMEOUT_SECONDS,
                self.approval_timeout_seconds,
            ),
        ])
    }
}

/// The level of `sideEffects`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SideEffectLevel {
    /// Reads only.
    ReadOnly,
    /// Writes local state (files, caches) only.
    LocalWrite,
    /// Writes to another system.
    ExternalWrite,
    /// Moves money.
    Financial,
    /// Sends a message to a person.
    Communication,
    /// Runs code.
    CodeExecution,
    /// Changes permissions or credentials.
    Privileged,
    /// Not classified: treated as risky.
    #[default]
    Unknown,
}

/// What of a call is kept in records and logs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Observability {
    /// Keep the input in the record (default true).
    #[serde(default = "yes")]
    pub log_args: bool,
    /// Keep the output in the record (default true).
    #[serde(default = "yes")]
    pub log_result: bool,
    /// Dotted paths of input and output fields replaced by `[REDACTED]` in records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact_fields: Vec<String>,
}

impl Default for Observability {
    fn default() -> Self {
        Self {
            log_args: true,
            log_result: true,
            redact_fields: Vec::new(),
        }
    }
}

fn yes() -> bool {
    true
}

/// How a tool is executed. The `type` field picks the variant; each variant is
/// served by the `ToolBackend` registered under the same name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Backend {
    /// An HTTP endpoint (a webhook): the input is the JSON body, a 2xx JSON
    /// response is the output.
    Rest(RestBackend),
    /// Declarative actions (seed 002).
    Actions(crate::actions::ActionsBackend),
    /// A tool of an upstream MCP server (made by joch from an `McpServer`).
    Mcp(crate::mcp::McpBackend),
    /// Run by the agent in its own process (a shell, a file editor): joch
    /// governs and records its calls in hook mode but cannot run it.
    Agent {},
    /// Does nothing and returns `{}`: a built-in tool for measuring joch itself.
    Noop {},
}

impl Backend {
    /// The `type` name, which is also the registry key of its `ToolBackend`.
    pub fn kind(&self) -> &'static str {
        match self {
            Backend::Rest(_) => "rest",
            Backend::Actions(_) => "actions",
            Backend::Mcp(_) => "mcp",
            Backend::Agent {} => "agent",
            Backend::Noop {} => "noop",
        }
    }
}

/// `backend` of `type: rest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestBackend {
    /// Where and how to send the call.
    pub endpoint: RestEndpoint,
}

/// An HTTP endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestEndpoint {
    /// HTTP method, default `POST`.
    #[serde(default = "post")]
    pub method: String,
    /// `http://` or `https://` URL.
    pub url: String,
    /// Extra request headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Give up after this long (default 30 000 ms); the call is then Failed.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

impl RestEndpoint {
    /// What is wrong with the endpoint, as fields under `at`.
    pub fn problems(&self, at: &str) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            errors.push(field(
                &format!("{at}.url"),
                "must be an http:// or https:// URL",
            ));
        }
        if !METHODS.contains(&self.method.as_str()) {
            errors.push(field(
                &format!("{at}.method"),
                &format!("must be one of {}", METHODS.join(", ")),
            ));
        }
        let timeout = Some(self.timeout_ms);
        errors.extend(limits::HTTP_TIMEOUT_MS.check(&format!("{at}.timeoutMs"), timeout));
        errors
    }
}

pub(crate) fn post() -> String {
    "POST".to_owned()
}

pub(crate) fn default_timeout_ms() -> u64 {
    30_000
}

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

impl Object for Tool {
    const KIND: &'static str = "Tool";
    const PLURAL: &'static str = "tools";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    /// Seed 002's shape: `{name, description, parameters, actions,
    /// on_success, on_failure}` at the top level, as a declarative Tool.
    fn upgrade(manifest: Value) -> Value {
        if !is_seed_shape(&manifest) {
            return manifest;
        }
        let mut backend = Map::new();
        backend.insert("type".to_owned(), json!("actions"));
        let mut spec = Map::new();
        let mut name = Value::Null;
        if let Value::Object(fields) = manifest {
            for (key, value) in fields {
                match key.as_str() {
                    "name" => name = value,
                    "actions" | "on_success" | "on_failure" | "onSuccess" | "onFailure" => {
                        backend.insert(key, value);
                    }
                    _ => {
                        spec.insert(key, value);
                    }
                }
            }
        }
        spec.insert("backend".to_owned(), Value::Object(backend));
        json!({"apiVersion": crate::API_VERSION, "kind": "Tool", "metadata": {"name": name}, "spec": spec})
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<Tool>(&self.api_version, &self.kind)?;
        validate_name("metadata.name", &self.metadata.name)?;
        let mut errors = Vec::new();
        if !self.spec.input_schema.is_object() {
            errors.push(field("spec.inputSchema", "must be a JSON Schema object"));
        }
        if self
            .spec
            .output_schema
            .as_ref()
            .is_some_and(|s| !s.is_object())
        {
            errors.push(field("spec.outputSchema", "must be a JSON Schema object"));
        }
        match &self.spec.backend {
            Backend::Rest(rest) => errors.extend(rest.endpoint.problems("spec.backend.endpoint")),
            Backend::Actions(actions) if actions.actions.is_empty() => {
                errors.push(field(
                    "spec.backend.actions",
                    "a declarative tool needs at least one action",
                ));
            }
            Backend::Mcp(mcp) if mcp.server.is_empty() || mcp.tool.is_empty() => {
                errors.push(field(
                    "spec.backend",
                    "an MCP tool names its server and the tool on it",
                ));
            }
            Backend::Actions(_) | Backend::Mcp(_) | Backend::Agent {} | Backend::Noop {} => {}
        }
        if let Some(cost) = &self.spec.cost {
            errors.extend(cost.problems("spec.cost"));
        }
        errors.extend(self.spec.side_effects.problems("spec.sideEffects"));
        let inline = self.spec.max_inline_bytes;
        errors.extend(INLINE_BYTES.check("spec.maxInlineBytes", inline));
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationError(errors))
        }
    }
}

impl Tool {
    /// What joch records a hook-mode call against when the namespace has no
    /// Tool of that name: any input, side effects `unknown`, run by the agent.
    pub fn unregistered(namespace: &str, name: &str) -> Tool {
        Tool {
            api_version: crate::API_VERSION.to_owned(),
            kind: Tool::KIND.to_owned(),
            metadata: ObjectMeta {
                name: name.to_owned(),
                namespace: namespace.to_owned(),
                ..ObjectMeta::default()
            },
            spec: ToolSpec {
                description: String::new(),
                input_schema: json!({}),
                output_schema: None,
                side_effects: SideEffects::default(),
                observability: Observability::default(),
                backend: Backend::Agent {},
                cost: None,
                inline: None,
                max_inline_bytes: None,
                trust: None,
                output_envelope: None,
            },
        }
    }

    /// `spec.trust`, or the backend's default: what joch did not write
    /// (a webhook, a declarative tool's webhooks, an MCP upstream) is
    /// untrusted.
    pub fn trust(&self) -> Trust {
        self.spec.trust.unwrap_or(match self.spec.backend {
            Backend::Rest(_) | Backend::Actions(_) | Backend::Mcp(_) => Trust::Untrusted,
            Backend::Agent {} | Backend::Noop {} => Trust::Trusted,
        })
    }
}

/// True for seed 002's tool JSON: actions at the top level, no `spec`.
pub fn is_seed_shape(manifest: &Value) -> bool {
    manifest.get("actions").is_some()
        && manifest.get("spec").is_none()
        && manifest.get("name").is_some()
}

fn field(field: &str, message: &str) -> FieldError {
    FieldError {
        field: field.to_owned(),
        message: message.to_owned(),
    }
}

/// `Tool.spec` as written in a manifest: the input may be given as
/// `inputSchema` or as seed 002's `parameters` list, which is converted.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ToolSpecManifest {
    #[serde(default)]
    description: String,
    input_schema: Option<Value>,
    parameters: Option<Vec<Parameter>>,
    output_schema: Option<Value>,
    #[serde(default)]
    side_effects: SideEffects,
    #[serde(default)]
    observability: Observability,
    backend: Backend,
    #[serde(default)]
    cost: Option<crate::cost::ToolCost>,
    #[serde(default)]
    inline: Option<bool>,
    #[serde(default)]
    max_inline_bytes: Option<u64>,
    #[serde(default)]
    trust: Option<Trust>,
    #[serde(default)]
    output_envelope: Option<OutputEnvelope>,
}

/// One entry of seed 002's `parameters` list.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Parameter {
    name: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    description: Option<String>,
    #[serde(rename = "enum")]
    allowed: Option<Vec<Value>>,
    #[serde(default)]
    required: bool,
    items: Option<Value>,
    default: Option<Value>,
}

impl TryFrom<ToolSpecManifest> for ToolSpec {
    type Error = String;

    fn try_from(m: ToolSpecManifest) -> Result<Self, String> {
        let input_schema = match (m.input_schema, m.parameters) {
            (Some(_), Some(_)) => {
                return Err("give either inputSchema or parameters, not both".to_owned());
            }
            (Some(schema), None) => schema,
            (None, Some(parameters)) => parameters_to_schema(parameters)?,
            (None, None) => json!({"type": "object"}),
        };
        Ok(ToolSpec {
            description: m.description,
            input_schema,
            output_schema: m.output_schema,
            side_effects: m.side_effects,
            observability: m.observability,
            backend: m.backend,
            cost: m.cost,
            inline: m.inline,
            max_inline_bytes: m.max_inline_bytes,
            trust: m.trust,
            output_envelope: m.output_envelope,
        })
    }
}

/// Seed 002's parameter list as a JSON Schema object.
fn parameters_to_schema(parameters: Vec<Parameter>) -> Result<Value, String> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for p in parameters {
        if p.name.is_empty() {
            return Err("a parameter has an empty name".to_owned());
        }
        let mut schema = Map::new();
        let optional = [
            ("type", p.kind.map(Value::String)),
            ("description", p.description.map(Value::String)),
            ("enum", p.allowed.map(Value::Array)),
            ("items", p.items),
            ("default", p.default),
        ];
        schema.extend(
            optional
                .into_iter()
                .filter_map(|(k, v)| Some((k.to_owned(), v?))),
        );
        if p.required {
            required.push(Value::String(p.name.clone()));
        }
        if properties
            .insert(p.name.clone(), Value::Object(schema))
            .is_some()
        {
            return Err(format!("parameter {:?} is declared twice", p.name));
        }
    }
    Ok(json!({"type": "object", "properties": properties, "required": required}))
}

#[cfg(test)]
mod tests;
