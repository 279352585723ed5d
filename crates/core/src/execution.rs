//! The `Execution` resource: one agent run, whose tool calls arrive in
//! batches (one per LLM turn) and share a timeline and a fail-safe.

use serde::{Deserialize, Serialize};

use crate::names::validate_name;
use crate::object::{IndexFields, Object, check_type};
use crate::{ObjectMeta, ObjectRef, ValidationError};

/// An agent run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Execution {
    /// Always `joch.dev/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `Execution`.
    #[serde(default = "execution_kind")]
    pub kind: String,
    /// Name (the `executionRef` of its calls), namespace, labels.
    pub metadata: ObjectMeta,
    /// The agent and the fail-safe.
    #[serde(default)]
    pub spec: ExecutionSpec,
    /// Set by joch.
    #[serde(default)]
    pub status: ExecutionStatus,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn execution_kind() -> String {
    Execution::KIND.to_owned()
}

/// `Execution.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecutionSpec {
    /// The agent running; its calls default to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_ref: Option<ObjectRef>,
    /// What a denial does to the run.
    #[serde(default)]
    pub fail_safe: FailSafe,
    /// The user the run serves (`{{user.*}}` in declarative tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<serde_json::Value>,
}

/// `spec.failSafe`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailSafe {
    /// After a denial: `continue` (default), `degrade` or `fail`.
    #[serde(default)]
    pub approval_denial_policy: DenialPolicy,
}

/// The run-level outcome of a denial (seed 003).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenialPolicy {
    /// The run proceeds; the model sees the denial and may adapt.
    #[default]
    Continue,
    /// The run is degraded; the rest of the batch is skipped.
    Degrade,
    /// The run fails; the rest of the batch is skipped.
    Fail,
}

/// Where a run is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecutionPhase {
    /// Taking batches.
    #[default]
    Running,
    /// A denial degraded it (`degrade`).
    Degraded,
    /// A denial failed it (`fail`).
    Failed,
    /// Its agent said it is done.
    Completed,
}

/// `Execution.status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecutionStatus {
    /// Where the run is.
    #[serde(default)]
    pub phase: ExecutionPhase,
    /// Batches received.
    #[serde(default)]
    pub batches: u32,
    /// Why it is degraded or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The agent in charge since the last handoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_agent: Option<String>,
}

impl Object for Execution {
    const KIND: &'static str = "Execution";
    const PLURAL: &'static str = "executions";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<Execution>(&self.api_version, &self.kind)?;
        validate_name("metadata.name", &self.metadata.name)
    }

    fn index(&self) -> IndexFields {
        let phase = serde_json::to_value(self.status.phase)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned));
        IndexFields {
            phase,
            ..IndexFields::default()
        }
    }
}
