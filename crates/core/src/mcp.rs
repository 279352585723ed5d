//! The `McpServer` resource: an upstream MCP server whose tools joch
//! governs. joch connects to it, lists its tools and keeps each as a `Tool`
//! named `<server>.<tool>`; a tool whose definition later changes (the "rug
//! pull") is handled as `spec.discovery.onSchemaDrift` says.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::endpoint::SecretSource;
use crate::envelope::{OutputEnvelope, Trust};
use crate::limits;
use crate::meta::parse_duration;
use crate::names::validate_name;
use crate::object::{Object, check_type};
use crate::tool::{Observability, SideEffectLevel, SideEffects, ToolSpec};
use crate::{Backend, FieldError, ObjectMeta, Time, Tool, ValidationError};

/// Label on every Tool made from an upstream server's tool: the server's name.
pub const SERVER_LABEL: &str = "joch.dev/mcp-server";

/// An upstream MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServer {
    /// Always `joch.dev/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `McpServer`.
    #[serde(default = "server_kind")]
    pub kind: String,
    /// Name (the prefix of its tools' names), namespace.
    pub metadata: ObjectMeta,
    /// How to reach it and how to treat its tools.
    pub spec: McpServerSpec,
    /// What joch last saw of it. Set by joch only.
    #[serde(default)]
    pub status: McpServerStatus,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn server_kind() -> String {
    McpServer::KIND.to_owned()
}

/// `McpServer.spec`: exactly one of `stdio` and `http`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServerSpec {
    /// A local process joch starts and speaks to over stdin/stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdio: Option<StdioTransport>,
    /// A streamable HTTP endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpTransport>,
    /// Per-tool settings that override what the server's annotations imply,
    /// by upstream tool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ToolOverride>,
    /// When to re-list tools and what a changed definition does.
    #[serde(default)]
    pub discovery: Discovery,
    /// Give up on one call after this long (default 30 000 ms).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Whether its tools' outputs may reach the model as they are (default
    /// untrusted); a tool's override takes precedence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<Trust>,
    /// How its tools' outputs are framed (default: the namespace's); a
    /// tool's override takes precedence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_envelope: Option<OutputEnvelope>,
    /// What the names of its Tools start with (default `<server name>.`;
    /// empty keeps the upstream names, so that a client moved from a
    /// direct connection to joch sees the names it had).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_prefix: Option<String>,
    /// Which protocol versions joch speaks to the server (default
    /// `auto`: 2026-07-28 if the server speaks it, else `initialize`).
    #[serde(default, skip_serializing_if = "McpProtocol::is_auto")]
    pub protocol: McpProtocol,
}

/// `spec.protocol`: how joch opens its connections to the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum McpProtocol {
    /// `initialize`: the versions before 2026-07-28, with a session
    /// (resource subscriptions, list changes and log messages are relayed).
    Legacy,
    /// `server/discover` first: 2026-07-28 when the server speaks it (a
    /// question the server asks during a call comes as `input_required`,
    /// which joch relays to the client that made the call; joch declares
    /// the tasks extension and follows a task the server answers with),
    /// else as `legacy`. Its list changes and resource updates come on a
    /// `subscriptions/listen` stream joch keeps open. The default.
    #[default]
    Auto,
}

impl McpProtocol {
    /// True for the default.
    pub fn is_auto(&self) -> bool {
        *self == McpProtocol::Auto
    }
}

fn default_timeout_ms() -> u64 {
    30_000
}

/// `spec.stdio`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StdioTransport {
    /// The program, e.g. `npx`.
    pub command: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables set for it (beside joch's own).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// `spec.http`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpTransport {
    /// `http://` or `https://` URL of the MCP endpoint.
    pub url: String,
    /// Plain headers, recorded as written.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Headers whose values are read from the environment or a file when
    /// joch connects; only the reference is stored.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_headers: BTreeMap<String, SecretSource>,
    /// How joch authenticates to it: a bearer secret or an OAuth 2.0 token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<crate::credential::UpstreamAuth>,
    /// How joch lists its tools (and reads what no call asks for) when
    /// `auth` gives each user their own token: joch's own credential
    /// (`bearer` or `client_credentials`), since a server's tool list is
    /// the server's, not one user's. Required with such an `auth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_auth: Option<crate::credential::UpstreamAuth>,
}

impl HttpTransport {
    /// The `oauth2` of `auth` when it gives each end user their own token
    /// (per-user consent or token exchange).
    pub fn per_user(&self) -> Option<&crate::credential::OAuth2> {
        self.auth
            .as_ref()
            .and_then(|a| a.oauth2.as_ref())
            .filter(|o| o.takes_user())
    }
}

impl McpServerSpec {
    /// Field errors for a timeout, an interval or an override's number out
    /// of its range.
    fn number_problems(&self) -> Vec<FieldError> {
        let timeout = limits::HTTP_TIMEOUT_MS.check("spec.timeoutMs", Some(self.timeout_ms));
        let mut errors: Vec<FieldError> = timeout.into_iter().collect();
        if let Some(text) = &self.discovery.refresh_interval {
            let at = "spec.discovery.refreshInterval";
            errors.extend(match parse_duration(text) {
                Ok(d) => limits::REFRESH_INTERVAL_MS.check_duration(at, d, text),
                Err(e) => Some(FieldError {
                    field: at.to_owned(),
                    message: e,
                }),
            });
        }
        for (name, o) in &self.tools {
            let at = format!("spec.tools.{name}");
            let effects = o.side_effects.iter();
            errors.extend(effects.flat_map(|s| s.problems(&format!("{at}.sideEffects"))));
            let inline = o.max_inline_bytes;
            errors.extend(limits::INLINE_BYTES.check(&format!("{at}.maxInlineBytes"), inline));
            let cost = o.cost.iter();
            errors.extend(cost.flat_map(|c| c.problems(&format!("{at}.cost"))));
        }
        errors
    }
}

/// `spec.tools.<name>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolOverride {
    /// Replaces the side effects derived from the tool's annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side_effects: Option<SideEffects>,
    /// What of its calls is kept in records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observability: Option<Observability>,
    /// What its calls cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::cost::ToolCost>,
    /// `false`: its results go back as handles (see `Tool.spec.inline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<bool>,
    /// Its results larger than this go back as handles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_inline_bytes: Option<u64>,
    /// See `Tool.spec.trust`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<Trust>,
    /// See `Tool.spec.outputEnvelope`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_envelope: Option<OutputEnvelope>,
}

/// `spec.discovery`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Discovery {
    /// Re-list the server's tools this often, e.g. `30s`, `5m`, `1h`
    /// (default: only when the resource changes, joch starts, or the server
    /// reconnects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_interval: Option<String>,
    /// What a changed tool definition does.
    #[serde(default)]
    pub on_schema_drift: DriftAction,
}

/// `spec.discovery.onSchemaDrift`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftAction {
    /// The tool's calls are denied from the moment its definition changes
    /// until an admin accepts the new one (`joch mcp accept`), even if the
    /// server later changes it back.
    #[default]
    Quarantine,
    /// A `warning` is recorded and the new definition is adopted.
    Alert,
    /// The tool's calls are denied while its definition differs from the
    /// accepted one; they work again if the server reverts, or once the new
    /// definition is accepted.
    Deny,
}

/// `McpServer.status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServerStatus {
    /// `Connected` after a successful listing, `Unavailable` after a failed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why the last listing failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the tools were last listed (successfully or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refresh_at: Option<Time>,
    /// Consecutive failed listings, for the reconnect backoff.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// The server's tools as joch knows them, by upstream name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, UpstreamToolState>,
    /// The `ttlMs` of the server's last tool listing (SEP-2549; the
    /// shortest of its pages), which joch's `tools/list` relays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_ttl_ms: Option<u64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What joch knows of one upstream tool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamToolState {
    /// Hash of the definition the Tool was made from.
    pub accepted_hash: String,
    /// Hash of the definition the server last listed.
    pub discovered_hash: String,
    /// Set when the definition changed under `quarantine`; cleared by accepting.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quarantined: bool,
    /// When the server's definition was first seen to differ from the accepted one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_detected_at: Option<Time>,
    /// The definition awaiting acceptance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_definition: Option<Value>,
}

impl UpstreamToolState {
    /// Why calls of this tool are denied, if they are.
    pub fn blocked(&self, action: DriftAction) -> Option<String> {
        let drifted = self.accepted_hash != self.discovered_hash;
        if self.quarantined {
            Some("the upstream tool's definition changed; it is quarantined until an admin accepts it (joch mcp accept)".to_owned())
        } else if drifted && action == DriftAction::Deny {
            Some("the upstream tool's definition differs from the accepted one".to_owned())
        } else {
            None
        }
    }
}

/// What a listing means for one tool, given what joch knew of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// New, unchanged, or changed and adopted (`alert`): make the Tool from
    /// this definition.
    Adopt {
        /// True when an earlier, different definition was replaced.
        drifted: bool,
    },
    /// Changed, not adopted: keep the Tool as it is.
    Hold {
        /// True the first time this change is seen.
        newly_drifted: bool,
    },
}

/// Folds a freshly listed definition into a tool's state.
pub fn reconcile(
    known: Option<&UpstreamToolState>,
    definition: &Value,
    action: DriftAction,
    now: Time,
) -> (UpstreamToolState, Reconciled) {
    let hash = definition_hash(definition);
    let Some(known) = known else {
        let state = UpstreamToolState {
            accepted_hash: hash.clone(),
            discovered_hash: hash,
            ..UpstreamToolState::default()
        };
        return (state, Reconciled::Adopt { drifted: false });
    };
    let mut state = known.clone();
    let newly_drifted = hash != known.discovered_hash && hash != known.accepted_hash;
    state.discovered_hash = hash.clone();
    if hash == known.accepted_hash && !known.quarantined {
        state.drift_detected_at = None;
        state.pending_definition = None;
        return (state, Reconciled::Hold { newly_drifted });
    }
    if hash == known.accepted_hash {
        return (state, Reconciled::Hold { newly_drifted });
    }
    match action {
        DriftAction::Alert => {
            state.accepted_hash = hash;
            state.drift_detected_at = None;
            state.pending_definition = None;
            (state, Reconciled::Adopt { drifted: true })
        }
        DriftAction::Quarantine | DriftAction::Deny => {
            if action == DriftAction::Quarantine {
                state.quarantined = true;
            }
            if newly_drifted || state.drift_detected_at.is_none() {
                state.drift_detected_at = Some(now);
            }
            state.pending_definition = Some(definition.clone());
            (state, Reconciled::Hold { newly_drifted })
        }
    }
}

/// Hash of what a model and a policy see of an upstream tool: its name,
/// title, description, schemas and annotations (RFC 8785, sha256).
pub fn definition_hash(definition: &Value) -> String {
    let seen = json!({
        "name": definition.get("name"),
        "title": definition.get("title"),
        "description": definition.get("description"),
        "inputSchema": definition.get("inputSchema"),
        "outputSchema": definition.get("outputSchema"),
        "annotations": definition.get("annotations"),
    });
    crate::checksum::digest(&seen).unwrap_or_default()
}

/// The side effects an upstream tool's annotations claim. MCP's defaults
/// apply to absent hints (`destructiveHint` and `openWorldHint` default to
/// true); a tool with no annotations at all is `unknown`.
pub fn side_effects_from_annotations(annotations: Option<&Value>) -> SideEffects {
    let Some(annotations) = annotations.filter(|a| a.is_object()) else {
        return SideEffects::default();
    };
    let hint = |name: &str| annotations.get(name).and_then(Value::as_bool);
    let idempotent = hint("idempotentHint").unwrap_or(false);
    let (level, idempotent) = if hint("readOnlyHint") == Some(true) {
        (SideEffectLevel::ReadOnly, true)
    } else if hint("destructiveHint").unwrap_or(true) || hint("openWorldHint").unwrap_or(true) {
        (SideEffectLevel::ExternalWrite, idempotent)
    } else {
        (SideEffectLevel::LocalWrite, idempotent)
    };
    SideEffects {
        level,
        idempotent,
        ..SideEffects::default()
    }
}

impl McpServer {
    /// The name of the Tool made from upstream tool `tool`: the
    /// `toolPrefix`, `<server>.` by default, and the upstream name.
    pub fn tool_name(&self, tool: &str) -> String {
        match &self.spec.tool_prefix {
            Some(prefix) => format!("{prefix}{tool}"),
            None => format!("{}.{tool}", self.metadata.name),
        }
    }

    /// The Tool joch keeps for an upstream definition (as the server listed it).
    pub fn tool_from(&self, definition: &Value) -> Result<Tool, String> {
        let upstream = definition
            .get("name")
            .and_then(Value::as_str)
            .ok_or("the server listed a tool without a name")?;
        let overrides = self.spec.tools.get(upstream);
        let side_effects = overrides
            .and_then(|o| o.side_effects.clone())
            .unwrap_or_else(|| side_effects_from_annotations(definition.get("annotations")));
        let mut metadata = ObjectMeta {
            name: self.tool_name(upstream),
            namespace: self.metadata.namespace.clone(),
            ..ObjectMeta::default()
        };
        metadata
            .labels
            .insert(SERVER_LABEL.to_owned(), self.metadata.name.clone());
        Ok(Tool {
            api_version: crate::API_VERSION.to_owned(),
            kind: Tool::KIND.to_owned(),
            metadata,
            spec: ToolSpec {
                description: definition
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                input_schema: definition
                    .get("inputSchema")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
                output_schema: definition.get("outputSchema").cloned(),
                side_effects,
                observability: overrides
                    .and_then(|o| o.observability.clone())
                    .unwrap_or_default(),
                backend: Backend::Mcp(McpBackend {
                    server: self.metadata.name.clone(),
                    tool: upstream.to_owned(),
                    operation: crate::mcp_surface::McpOperation::CallTool,
                }),
                cost: overrides.and_then(|o| o.cost.clone()),
                inline: overrides.and_then(|o| o.inline),
                max_inline_bytes: overrides.and_then(|o| o.max_inline_bytes),
                trust: overrides.and_then(|o| o.trust).or(self.spec.trust),
                output_envelope: overrides
                    .and_then(|o| o.output_envelope)
                    .or(self.spec.output_envelope),
            },
        })
    }

    /// How often to re-list tools, if periodically.
    pub fn refresh_interval(&self) -> Option<std::time::Duration> {
        self.spec
            .discovery
            .refresh_interval
            .as_deref()
            .and_then(|text| parse_duration(text).ok())
    }
}

/// `backend` of `type: mcp`: a tool of an upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpBackend {
    /// The `McpServer` in the tool's namespace.
    pub server: String,
    /// The tool's name on that server (empty for a surface tool).
    pub tool: String,
    /// What is asked of the server: `tools/call`, or for a surface tool
    /// `resources/read` or `prompts/get` (see `mcp_surface`).
    #[serde(
        default,
        skip_serializing_if = "crate::mcp_surface::McpOperation::is_call_tool"
    )]
    pub operation: crate::mcp_surface::McpOperation,
}

impl Object for McpServer {
    const KIND: &'static str = "McpServer";
    const PLURAL: &'static str = "mcpservers";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<McpServer>(&self.api_version, &self.kind)?;
        validate_name("metadata.name", &self.metadata.name)?;
        let mut errors = Vec::new();
        let mut problem = |field: &str, message: String| {
            errors.push(FieldError {
                field: field.to_owned(),
                message,
            })
        };
        match (&self.spec.stdio, &self.spec.http) {
            (Some(stdio), None) if stdio.command.trim().is_empty() => {
                problem("spec.stdio.command", "must not be empty".to_owned())
            }
            (None, Some(http))
                if !(http.url.starts_with("http://") || http.url.starts_with("https://")) =>
            {
                problem(
                    "spec.http.url",
                    format!("must be an http:// or https:// URL, got {:?}", http.url),
                )
            }
            (Some(_), None) | (None, Some(_)) => {}
            _ => problem("spec", "give exactly one of stdio and http".to_owned()),
        }
        if let Some(http) = &self.spec.http {
            for (header, source) in &http.secret_headers {
                if source.env.is_some() == source.file.is_some() {
                    problem(
                        &format!("spec.http.secretHeaders.{header}"),
                        "give exactly one of env or file".to_owned(),
                    );
                }
            }
            for e in http.auth.iter().flat_map(|a| a.problems("spec.http.auth")) {
                problem(&e.field, e.message);
            }
            for e in http
                .list_auth
                .iter()
                .flat_map(|a| a.problems("spec.http.listAuth"))
            {
                problem(&e.field, e.message);
            }
            let lists_per_user = http
                .list_auth
                .as_ref()
                .and_then(|a| a.oauth2.as_ref())
                .is_some_and(|o| o.takes_user());
            match (http.per_user(), &http.list_auth) {
                (Some(oauth2), None) => problem(
                    "spec.http.listAuth",
                    format!(
                        "required with grant {}: joch lists the server's tools with its own credential (bearer or client_credentials), not a user's",
                        oauth2.grant.as_str()
                    ),
                ),
                (_, Some(_)) if lists_per_user => problem(
                    "spec.http.listAuth.oauth2.grant",
                    "tools are listed without a user: use bearer or client_credentials".to_owned(),
                ),
                (None, Some(_)) => problem(
                    "spec.http.listAuth",
                    "only with a per-user auth (authorization_code or token_exchange): auth lists the tools already".to_owned(),
                ),
                _ => {}
            }
        }
        if let Some(prefix) = self.spec.tool_prefix.as_deref().filter(|p| !p.is_empty()) {
            if let Err(e) = validate_name("spec.toolPrefix", &format!("{prefix}x")) {
                problem("spec.toolPrefix", e.to_string());
            }
        }
        errors.extend(self.spec.number_problems());
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationError(errors))
        }
    }
}

#[cfg(test)]
mod tests;
