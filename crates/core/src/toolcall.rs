//! The `ToolCall` resource (seed 000, with seed 004's caller fields): one
//! concrete invocation of a Tool, recorded before and after it runs.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codes::{DecisionKind, ErrorCode};
use crate::names::validate_name;
use crate::object::{IndexFields, IndexedCost, Object, check_type};
use crate::tool::SideEffectLevel;
use crate::{IllegalTransition, ObjectMeta, ObjectRef, Phase, Time, ValidationError};

/// One invocation of a tool. `metadata.name` is the call id: the caller's
/// (e.g. a provider's `call_abc123`) kept verbatim, or one joch mints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCall {
    /// Always `joch.dev/v1alpha1`; may be omitted in requests.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `ToolCall`; may be omitted in requests.
    #[serde(default = "call_kind")]
    pub kind: String,
    /// Name (the call id), namespace, labels.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What was asked for.
    pub spec: ToolCallSpec,
    /// What happened. Set by joch only; ignored in requests.
    #[serde(default)]
    pub status: ToolCallStatus,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn call_kind() -> String {
    ToolCall::KIND.to_owned()
}

/// `ToolCall.spec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCallSpec {
    /// The agent run this call belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_ref: Option<ObjectRef>,
    /// The agent that made the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_ref: Option<ObjectRef>,
    /// The tool called.
    pub tool_ref: ObjectRef,
    /// The arguments. A JSON string is accepted and recorded as the object it holds.
    #[serde(default)]
    pub input: Value,
    /// The tool's side effects as they were when the call was made, plus the
    /// caller's idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side_effects: Option<CallSideEffects>,
    /// Whether a person must approve the call, and their decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<CallApproval>,
    /// Correlation with the agent's hook events (`aosTurnId`, `aosStepId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_context: Option<HookContext>,
    /// Opaque caller (user or session) id; absent for system-initiated calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_id: Option<String>,
    /// Skills active in the turn that issued the call (turn-level attribution).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skill_names: Vec<String>,
    /// The per-turn execution environment the caller reports (seed 004).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
    /// The call this one replays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<ObjectRef>,
    /// The caller's W3C trace context (`traceparent` header, or MCP
    /// `params._meta.traceparent`), linking the record to the agent's trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// `hook` for a call the agent runs itself and reports to joch (hook
    /// mode); absent for a call joch runs (gateway mode).
    #[serde(default, skip_serializing_if = "CallMode::is_gateway")]
    pub mode: CallMode,
    /// Whether the result goes back inline (the default) or as a handle to
    /// an artifact (`false`), as the caller or a policy's `modify` asked;
    /// absent: the tool's `spec.inline` decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<bool>,
    /// True for a call of a forged artifact tool (`artifact_grep`...): its
    /// result is a plain value, and it is never offered to another one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_artifact_tool: bool,
    /// `tools/call` (the default, not written), or `resources/read` /
    /// `prompts/get` for a read or get through an upstream MCP server's
    /// surface tool (`<server>:resource`, `<server>:prompt`).
    #[serde(
        default,
        skip_serializing_if = "crate::mcp_surface::McpOperation::is_call_tool"
    )]
    pub operation: crate::mcp_surface::McpOperation,
    /// When an approved call runs: as soon as it is approved (the default,
    /// not written), or only when its caller retries it (`retry`: set by
    /// the MCP surface for a 2026-07-28 client that does not run the call
    /// as a task, which was told `input_required` and may never come back;
    /// see docs/mcp.md, "A deferred call runs on its retry").
    #[serde(default, skip_serializing_if = "RunsOn::is_approval")]
    pub runs_on: RunsOn,
}

/// `spec.runsOn`: what starts an approved call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunsOn {
    /// The decision: joch runs the call as soon as it is approved.
    #[default]
    Approval,
    /// The caller's retry: an approved call runs only when the caller asks
    /// for it again (MCP 2026-07-28 `requestState`, `Calls::resume`), and
    /// ends `TimedOut` (`not_retried`), never run, if no retry comes by its
    /// retry deadline ([`crate::Approval::retry_deadline`]).
    Retry,
}

impl RunsOn {
    /// True for the default: an approved call runs on its approval.
    pub fn is_approval(&self) -> bool {
        *self == RunsOn::Approval
    }
}

/// Who runs the tool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallMode {
    /// joch runs it through its backend.
    #[default]
    Gateway,
    /// The agent runs it in its own process; joch decides before and
    /// records after (AOS guardian, Claude Code hooks, the Python wrapper).
    Hook,
}

impl CallMode {
    /// True for the default, gateway mode.
    pub fn is_gateway(&self) -> bool {
        *self == CallMode::Gateway
    }
}

/// `spec.sideEffects` of a call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallSideEffects {
    /// Copied from the tool when the call is recorded.
    #[serde(default)]
    pub level: SideEffectLevel,
    /// Copied from the tool when the call is recorded.
    #[serde(default)]
    pub idempotent: bool,
    /// The caller's key: identical keys collapse to one execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// `spec.approval`: the approval state of one call (the `Approval`
/// resource holds the request and its full decision).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallApproval {
    /// The call may not run until a person approves it.
    #[serde(default)]
    pub required: bool,
    /// `pending`, `approved`, `rejected` or `timed_out`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Who approved it (seed 000); absent unless `approved`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    /// When they approved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<Time>,
    /// Who rejected it; absent unless `rejected`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_by: Option<String>,
    /// When they rejected it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_at: Option<Time>,
    /// Why, in the approver's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// While the call waits for its user's consent to an upstream: the
    /// authorization URL to send the user to (as on its Approval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consent_url: Option<String>,
}

/// `spec.hookContext`: ids of the agent's hook events for this call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HookContext {
    /// AOS turn id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aos_turn_id: Option<String>,
    /// AOS step id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aos_step_id: Option<String>,
}

/// `ToolCall.status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCallStatus {
    /// Where the call is in its life.
    #[serde(default)]
    pub phase: Phase,
    /// `sha256(JCS({tool, args}))` of the normalised input.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checksum: String,
    /// The digest of what ran: `sha256(JCS({tool, toolVersion, args,
    /// principal}))` of the arguments the tool received (after every
    /// modification and edit), set when the call is handed to its tool.
    /// For an approved call it is its Approval's `spec.binding.digest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_digest: Option<String>,
    /// The `resourceVersion` of the Tool that was called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
    /// How many times the backend was invoked.
    #[serde(default)]
    pub attempts: u32,
    /// When the backend was first invoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the call settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// Backend time in milliseconds, from invocation to answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// The tool's result, as recorded (see the tool's `observability`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Why the call did not succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CallError>,
    /// Which policy decided what, before and after the call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hook_decisions: Vec<HookDecision>,
    /// The standing decision (an earlier "approve always" or "deny
    /// always") that decided the call instead of a person: its decision,
    /// who made it (`decidedBy`, `decider`) and on which approval. Set by
    /// joch at admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standing: Option<crate::approval::StandingApprovalSpec>,
    /// True when `spec.input` is not what the tool received (fields were
    /// redacted or the input withheld): such a call cannot be resumed after
    /// a crash, nor replayed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub input_withheld: bool,
    /// The input as the caller sent it, when a policy modified it (the
    /// modified input is `spec.input`, and is what ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_input: Option<Value>,
    /// How an operator settled a call whose outcome was `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Resolution>,
    /// What the call cost, by its tool's `spec.cost`; set when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::cost::CallCost>,
    /// The joch replica that admitted the call or last ran it, when several
    /// share one store: if that replica dies, another reconciles the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// The artifacts the result was stored as: a handle the caller got
    /// instead of the content, or media returned as itself. The record
    /// keeps these references, never the bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<crate::artifact::ArtifactRef>,
    /// Who made the call, as joch authenticated it (`local` when no
    /// authentication is configured). Set by joch at admission: like the
    /// rest of `status`, a value in a request is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<crate::principal::PrincipalRef>,
    /// The end user whose own upstream tokens the call uses (a JWT's
    /// `sub`, a token's name, or a trusted `callerId`); set by joch at
    /// admission, only for tools whose upstream takes per-user tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_user: Option<String>,
    /// The nonce of the envelope the caller's output came in (seed 001),
    /// when the tool is untrusted and `outputEnvelope: nonce`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_nonce: Option<String>,
    /// What the sensitive-data detectors found in the input and the
    /// output, by kind and JSON path (never the value); run only when a
    /// policy of the namespace reads detections.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detections: Vec<crate::detect::Detection>,
    /// What an upstream MCP server asked the call's client during the call
    /// (SEP-2322 `input_required`), for a client that answers by retrying
    /// (protocol 2026-07-28): the call is `Running` and waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_required: Option<crate::mcp_surface::InputRound>,
}

/// An operator's settlement of an `Unknown` call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resolution {
    /// Why the operator decided as they did.
    pub reason: String,
    /// When.
    pub resolved_at: Time,
    /// Who resolved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<crate::principal::PrincipalRef>,
}

/// Why a call failed, as data on the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallError {
    /// Stable snake_case cause, e.g. `backend_timeout`, `input_schema_violation`.
    pub code: String,
    /// For people.
    pub message: String,
    /// Structured detail, e.g. the failing schema paths or the HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl CallError {
    /// One of joch's errors, without details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::custom(code.as_str(), message)
    }

    /// An error with a code of the tool's own (an executor's, a hook
    /// caller's report), without details.
    pub fn custom(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            details: None,
        }
    }

    /// True when this is joch's `code`.
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code == code.as_str()
    }
}

/// One policy decision recorded on the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HookDecision {
    /// `steps/toolCallRequest` or `steps/toolCallResult`.
    pub hook: String,
    /// What it decided.
    pub decision: DecisionKind,
    /// The deciding policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_id: Option<String>,
    /// Its `spec.version` when it decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<String>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Made by a policy in `enforcement: shadow`: what it would have
    /// decided. It changed nothing about the call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
}

impl ToolCall {
    /// The handle artifact of this call's result, if it was not inlined.
    pub fn handle(&self) -> Option<&crate::artifact::ArtifactRef> {
        self.status
            .artifacts
            .iter()
            .find(|a| a.role == crate::artifact::ArtifactRole::Handle)
    }

    /// A call of `tool` with `input`, named `name` (empty: joch mints an id).
    pub fn of(name: impl Into<String>, tool: impl Into<String>, input: Value) -> ToolCall {
        ToolCall {
            api_version: api_version(),
            kind: call_kind(),
            metadata: ObjectMeta {
                name: name.into(),
                ..ObjectMeta::default()
            },
            spec: ToolCallSpec {
                execution_ref: None,
                agent_ref: None,
                tool_ref: ObjectRef::new(tool),
                input,
                side_effects: None,
                approval: None,
                hook_context: None,
                caller_id: None,
                skill_names: Vec::new(),
                context: None,
                replay_of: None,
                traceparent: None,
                mode: CallMode::Gateway,
                inline: None,
                from_artifact_tool: false,
                operation: crate::mcp_surface::McpOperation::CallTool,
                runs_on: RunsOn::Approval,
            },
            status: ToolCallStatus::default(),
        }
    }

    /// Moves the call to `to` if the state machine allows it.
    pub fn transition(&mut self, to: Phase) -> Result<(), IllegalTransition> {
        self.status.phase = self.status.phase.move_to(to)?;
        Ok(())
    }

    /// The tool's name.
    pub fn tool_name(&self) -> &str {
        &self.spec.tool_ref.name
    }
}

impl Object for ToolCall {
    const KIND: &'static str = "ToolCall";
    const PLURAL: &'static str = "toolcalls";

    fn audit_entry(&self, at: crate::Time) -> Option<crate::audit::AuditEntry> {
        self.status.phase.is_terminal().then(|| {
            crate::audit::AuditEntry::of(
                Self::KIND,
                &self.metadata.name,
                &self.spec,
                &self.status,
                self.status.phase.as_str(),
                at,
            )
        })
    }

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<ToolCall>(&self.api_version, &self.kind)?;
        validate_name("metadata.name", &self.metadata.name)?;
        validate_name("spec.toolRef.name", &self.spec.tool_ref.name)?;
        for (field, r) in [
            ("spec.executionRef.name", &self.spec.execution_ref),
            ("spec.agentRef.name", &self.spec.agent_ref),
        ] {
            if let Some(r) = r {
                validate_name(field, &r.name)?;
            }
        }
        if let Some(traceparent) = &self.spec.traceparent {
            if !crate::traceparent::is_traceparent(traceparent) {
                return Err(ValidationError::field(
                    "spec.traceparent",
                    format!(
                        "{traceparent:?} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn index(&self) -> IndexFields {
        IndexFields {
            tool: Some(self.spec.tool_ref.name.clone()),
            phase: Some(self.status.phase.as_str().to_owned()),
            execution: self.spec.execution_ref.as_ref().map(|r| r.name.clone()),
            checksum: Some(self.status.checksum.clone()).filter(|c| !c.is_empty()),
            agent: self.spec.agent_ref.as_ref().map(|r| r.name.clone()),
            cost: self.status.cost.as_ref().map(|cost| IndexedCost {
                micros: crate::cost::to_micros(cost.amount),
                currency: cost.currency.clone(),
                at_ms: self
                    .status
                    .completed_at
                    .or(self.metadata.creation_timestamp)
                    .map_or(0, |t| t.0.timestamp_millis()),
            }),
            created_ms: self
                .metadata
                .creation_timestamp
                .map(|t| t.0.timestamp_millis()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn seed_000_call() -> Value {
        json!({
            "apiVersion": "joch.dev/v1alpha1",
            "kind": "ToolCall",
            "metadata": {"name": "call-abc123", "namespace": "support-platform"},
            "spec": {
                "executionRef": {"name": "exec-20260510-001"},
                "agentRef": {"name": "support-triage"},
                "toolRef": {"name": "zendesk.create_ticket"},
                "input": {"subject": "Refund request for order 12345", "priority": "high"},
                "sideEffects": {"level": "external_write", "idempotent": false, "idempotencyKey": "zendesk-create-12345"},
                "approval": {"required": true, "status": "approved", "approvedBy": "alice@example.com", "approvedAt": "2026-05-10T10:34:55.000Z"},
                "hookContext": {"aosTurnId": "69ef57b8", "aosStepId": "9263448a"}
            },
            "status": {
                "phase": "Succeeded",
                "attempts": 1,
                "startedAt": "2026-05-10T10:35:00.000Z",
                "completedAt": "2026-05-10T10:35:03.000Z",
                "output": {"ticketId": 77123},
                "hookDecisions": [
                    {"hook": "steps/toolCallRequest", "decision": "allow", "policyId": "external-send-requires-approval", "policyVersion": "v3"}
                ]
            }
        })
    }

    #[test]
    fn seed_000_record_round_trips_exactly() {
        let call: ToolCall = serde_json::from_value(seed_000_call()).unwrap();
        assert_eq!(serde_json::to_value(&call).unwrap(), seed_000_call());
        call.validate().unwrap();
        assert_eq!(call.index().execution.as_deref(), Some("exec-20260510-001"));
    }

    #[test]
    fn a_minimal_request_defaults_to_pending() {
        let call: ToolCall =
            serde_json::from_value(json!({"spec": {"toolRef": {"name": "t"}}})).unwrap();
        assert_eq!(call.status.phase, Phase::Pending);
        assert_eq!(call.kind, "ToolCall");
        assert_eq!(call.spec.input, Value::Null);
    }

    #[test]
    fn transition_refuses_illegal_moves_and_keeps_the_phase() {
        let mut call: ToolCall =
            serde_json::from_value(json!({"spec": {"toolRef": {"name": "t"}}})).unwrap();
        call.transition(Phase::Running).unwrap();
        call.transition(Phase::Succeeded).unwrap();
        let err = call.transition(Phase::Running).unwrap_err();
        assert_eq!((err.from, err.to), (Phase::Succeeded, Phase::Running));
        assert_eq!(call.status.phase, Phase::Succeeded);
    }
}
