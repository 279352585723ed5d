//! The `Approval` resource: a person's decision on a deferred call.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::names::validate_name;
use crate::object::{IndexFields, Object, check_type};
use crate::policy::ApprovalRouting;
use crate::principal::PrincipalRef;
use crate::tool::SideEffectLevel;
use crate::{ApprovalActionKind, ObjectMeta, ObjectRef, Time, ValidationError};

/// A request for a person to approve (or reject, or edit) a tool call. Its
/// name is the call's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Approval {
    /// Always `joch.dev/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `Approval`.
    #[serde(default = "approval_kind")]
    pub kind: String,
    /// Name (the call's), namespace.
    pub metadata: ObjectMeta,
    /// What is to be decided.
    pub spec: ApprovalSpec,
    /// The decision.
    #[serde(default)]
    pub status: ApprovalStatus,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn approval_kind() -> String {
    Approval::KIND.to_owned()
}

/// `Approval.spec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalSpec {
    /// The action awaiting the decision.
    pub action: ApprovalAction,
    /// The policy (and version) that asked for approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_ref: Option<PolicyRef>,
    /// How risky the action is.
    pub risk: Risk,
    /// Approvers, deadline, fallback.
    #[serde(default)]
    pub routing: ApprovalRouting,
    /// What the approver may do: `approve`, `reject`, `edit`.
    pub options: Vec<String>,
    /// What the approver needs to see: tool, input, reason.
    pub payload: Value,
    /// Exactly what a decision approves: the call runs only while what
    /// would run still has this binding's digest (see docs/policies.md,
    /// "What an approval binds"). Set by joch when the call is deferred,
    /// and again if the call goes back for a new decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<Binding>,
}

/// `spec.binding`: what an approval binds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Binding {
    /// `sha256(JCS({tool, toolVersion, args, principal}))` of the call as
    /// it would run: its arguments after every policy's modification.
    pub digest: String,
    /// The `resourceVersion` of the Tool the approver was shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
    /// The request policies in force for the call when it was deferred.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<PolicyRef>,
}

/// `spec.action`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalAction {
    /// What is asked.
    #[serde(rename = "type")]
    pub kind: ApprovalActionKind,
    /// The call.
    pub tool_call_ref: ObjectRef,
}

/// A policy at a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyRef {
    /// Policy name.
    pub name: String,
    /// Its `spec.version` when it decided.
    pub version: String,
}

/// `spec.risk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Risk {
    /// The tool's side-effect level.
    pub level: SideEffectLevel,
    /// Why it needs a person, for the approver.
    pub summary: String,
}

/// Where an approval is in its life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApprovalPhase {
    /// Waiting for a person.
    #[default]
    Pending,
    /// Approved (possibly with edited arguments).
    Approved,
    /// Rejected.
    Rejected,
    /// Nobody decided before the deadline; the fallback applied.
    Expired,
}

impl ApprovalPhase {
    /// The API name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalPhase::Pending => "Pending",
            ApprovalPhase::Approved => "Approved",
            ApprovalPhase::Rejected => "Rejected",
            ApprovalPhase::Expired => "Expired",
        }
    }
}

/// `Approval.status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalStatus {
    /// Where the approval is.
    #[serde(default)]
    pub phase: ApprovalPhase,
    /// When the fallback applies if nobody decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Time>,
    /// `approve`, `reject`, `edit` or `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Who decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// When.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<Time>,
    /// Why, in the approver's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    /// For the model, when rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The arguments the approver substituted (`edit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_input: Option<Value>,
    /// The value provided for a `user_input` approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The replica that decided, and so carries the decision out on the
    /// call. If it stops first, whoever takes over its lease does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// The decision stands for later calls of the same tool (recorded as a
    /// `StandingApproval` named after the tool).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always: bool,
    /// The principal that decided, as joch authenticated it; absent for
    /// joch's own decisions (a deadline, a withdrawal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decider: Option<crate::principal::PrincipalRef>,
    /// True when the call's own caller decided, asked on behalf of its user
    /// because the deciding policy said `askUser` (or asked for a
    /// `userInput` value): the one exception to "a principal cannot decide
    /// a call it made".
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub asked_user: bool,
    /// The request policies in force for the call when it was decided.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decided_under: Vec<PolicyRef>,
}

/// How long past its Approval's deadline an approved call that runs on its
/// caller's retry (`spec.runsOn: retry`) still waits for that retry, at
/// most: a decision made just before the deadline leaves the caller time
/// to come back. Never longer than the approval's own timeout.
pub const RETRY_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

impl Approval {
    /// The instant by which the caller of an approved call that runs on its
    /// retry (`spec.runsOn: retry`) must retry it; past it the call ends
    /// `TimedOut` (`not_retried`) and never runs. It is the deadline plus as
    /// long again as the approval's timeout, at most [`RETRY_GRACE`]; `None`
    /// for an approval without a deadline.
    pub fn retry_deadline(&self) -> Option<Time> {
        let deadline = self.status.deadline?;
        let timeout = self
            .spec
            .routing
            .timeout_seconds
            .map_or(RETRY_GRACE, std::time::Duration::from_secs);
        Some(
            deadline
                .checked_add(timeout.min(RETRY_GRACE))
                .unwrap_or(deadline),
        )
    }
}

impl Object for Approval {
    const KIND: &'static str = "Approval";
    const PLURAL: &'static str = "approvals";

    fn audit_entry(&self, at: crate::Time) -> Option<crate::audit::AuditEntry> {
        (self.status.phase != ApprovalPhase::Pending).then(|| {
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
        check_type::<Approval>(&self.api_version, &self.kind)?;
        validate_name("metadata.name", &self.metadata.name)
    }

    fn index(&self) -> IndexFields {
        IndexFields {
            tool: self
                .spec
                .payload
                .get("tool")
                .and_then(Value::as_str)
                .map(str::to_owned),
            phase: Some(self.status.phase.as_str().to_owned()),
            ..IndexFields::default()
        }
    }
}

/// A decision an approver made with `always`: it stands for every later
/// call of the same tool in the namespace that a policy would defer. Its
/// name is the tool's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StandingApproval {
    /// Always `joch.dev/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `StandingApproval`.
    #[serde(default = "standing_kind")]
    pub kind: String,
    /// Name (the tool's), namespace.
    pub metadata: ObjectMeta,
    /// The standing decision.
    pub spec: StandingApprovalSpec,
}

fn standing_kind() -> String {
    StandingApproval::KIND.to_owned()
}

/// `StandingApproval.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StandingApprovalSpec {
    /// `approve` or `reject`.
    pub decision: String,
    /// Who decided (the Approval's `decidedBy`).
    pub decided_by: String,
    /// The principal that decided (the Approval's `decider`), set by joch.
    /// Its own calls are never decided by this standing decision: they
    /// wait for another person. Absent on a decision stored before joch
    /// recorded it, when `decidedBy` names the principal instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decider: Option<PrincipalRef>,
    /// The approval it was decided on.
    pub approval_ref: ObjectRef,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
}

impl Object for StandingApproval {
    const KIND: &'static str = "StandingApproval";
    const PLURAL: &'static str = "standingapprovals";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<StandingApproval>(&self.api_version, &self.kind)?;
        validate_name("metadata.name", &self.metadata.name)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn approval(timeout_seconds: Option<u64>, deadline: Option<Time>) -> Approval {
        let mut approval: Approval = serde_json::from_value(json!({
            "metadata": {"name": "c1", "namespace": "default"},
            "spec": {
                "action": {"type": "tool_call", "toolCallRef": {"name": "c1"}},
                "risk": {"level": "external_write", "summary": "why"},
                "routing": {"timeoutSeconds": timeout_seconds},
                "options": ["approve"],
                "payload": {},
            },
        }))
        .expect("an approval");
        approval.status.deadline = deadline;
        approval
    }

    #[test]
    fn a_retry_deadline_adds_the_timeout_again_up_to_the_grace() {
        let at: Time = serde_json::from_value(json!("2026-07-28T12:00:00Z")).unwrap();
        let after = |seconds| at.checked_add(Duration::from_secs(seconds));
        let table = [
            (Some(1), Some(at), after(1)),
            (Some(30), Some(at), after(30)),
            (Some(3600), Some(at), after(RETRY_GRACE.as_secs())),
            (None, Some(at), after(RETRY_GRACE.as_secs())),
            (Some(1), None, None),
        ];
        for (timeout, deadline, expected) in table {
            assert_eq!(
                approval(timeout, deadline).retry_deadline(),
                expected,
                "{timeout:?}"
            );
        }
    }
}
