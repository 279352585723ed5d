//! Standing decisions: an approver's `always` stands for later calls of
//! the same tool (`calls/admission/checks.rs` reads it), recorded as a
//! `StandingApproval` named by the tool.

use joch_core::approval::StandingApprovalSpec;
use joch_core::{Approval, ObjectMeta, ObjectRef, Principal, StandingApproval};
use joch_store::StoreErrorKind;
use serde_json::Value;

use super::{ApprovalDecision, Approvals};
use crate::EngineError;

/// What an `always` decision does to a standing decision already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    /// The new decision stands instead (a person deciding now).
    Replace,
    /// The one there stands (a decision carried out late may be older).
    Keep,
}

impl Approvals {
    /// Records an `always` decision for the approval's tool.
    pub(super) async fn stand_by(
        &self,
        approval: &Approval,
        verb: &str,
        decision: &ApprovalDecision,
        existing: Standing,
    ) -> Result<(), EngineError> {
        let Some(tool) = approval.spec.payload.get("tool").and_then(Value::as_str) else {
            return Ok(());
        };
        let standing = StandingApproval {
            api_version: joch_core::API_VERSION.to_owned(),
            kind: "StandingApproval".to_owned(),
            metadata: ObjectMeta {
                name: tool.to_owned(),
                ..ObjectMeta::default()
            },
            spec: StandingApprovalSpec {
                decision: verb.to_owned(),
                decided_by: decision.by.clone(),
                decider: approval.status.decider.clone(),
                approval_ref: ObjectRef::new(&approval.metadata.name),
                rationale: decision.rationale.clone(),
            },
        };
        let ns = &approval.metadata.namespace;
        match self
            .inner
            .resources
            .create(&Principal::local(), ns, standing.clone())
            .await
        {
            Err(EngineError::AlreadyExists { .. }) if existing == Standing::Replace => self
                .inner
                .resources
                .replace(&Principal::local(), ns, tool, standing)
                .await
                .map(drop),
            Err(EngineError::AlreadyExists { .. }) => Ok(()),
            other => other.map(drop),
        }
    }

    /// The standing decision for `tool` in `namespace`, if an approver made one.
    pub(crate) async fn standing_decision(
        &self,
        namespace: &str,
        tool: &str,
    ) -> Result<Option<StandingApproval>, EngineError> {
        match self.inner.store.get_object(namespace, tool).await {
            Ok(standing) => Ok(Some(standing)),
            Err(e) if e.kind() == StoreErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}
