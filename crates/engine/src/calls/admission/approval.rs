//! The Approval a deferred call waits with: made from the call as it
//! would run, before the call is recorded, and opened by the approvals
//! part (`Approvals::open_approval`) once it is.

use joch_core::approval::{ApprovalAction, ApprovalSpec, ApprovalStatus, Binding, Risk};
use joch_core::{Approval, ApprovalActionKind, ObjectMeta, ObjectRef};
use serde_json::json;

use super::Admitting;
use crate::EngineError;
use crate::approvals::deadline;
use crate::calls::Calls;
use crate::calls::deferral::Deferral;
use crate::clock::now;
use crate::policies;

impl Calls {
    /// The pending Approval `deferral` asks for on the call being admitted
    /// (or resumed), its deadline computed and bound to the call as it
    /// would run: made before the call is recorded, so that a deadline that
    /// cannot be kept refuses the call before anything is written.
    pub(in crate::calls) fn approval_for(
        &self,
        a: &Admitting<'_>,
        deferral: Deferral,
    ) -> Result<Approval, EngineError> {
        let (call, tool) = (&a.call, &*a.tool);
        let binding = Binding {
            digest: a.run_digest(),
            tool_version: a.tool_version().map(str::to_owned),
            policies: policies::in_force(&a.policies, call.tool_name(), &call.metadata.labels),
        };
        let mut routing = deferral.routing;
        let timeout = deadline::timeout(&routing, tool, self.inner.settings.approval_timeout);
        routing.timeout_seconds = Some(timeout.as_secs());
        let deadline = deadline::deadline(now(), timeout)?;
        let (kind, options) = match (&deferral.user_input, &deferral.consent_url) {
            (_, Some(_)) => (ApprovalActionKind::Consent, vec!["consent", "reject"]),
            (Some(_), None) => (ApprovalActionKind::UserInput, vec!["provide", "reject"]),
            (None, None) => (
                ApprovalActionKind::ToolCall,
                vec!["approve", "reject", "edit"],
            ),
        };
        let mut payload = json!({"tool": tool.metadata.name, "input": call.spec.input, "reason": deferral.reason});
        if let Some(input) = &deferral.user_input {
            payload["userInput"] = json!(input);
        }
        if let Some(url) = &deferral.consent_url {
            payload["consentUrl"] = json!(url);
        }
        Ok(Approval {
            api_version: joch_core::API_VERSION.to_owned(),
            kind: "Approval".to_owned(),
            metadata: ObjectMeta {
                name: call.metadata.name.clone(),
                namespace: call.metadata.namespace.clone(),
                uid: uuid::Uuid::new_v4().to_string(),
                creation_timestamp: Some(now()),
                labels: call.metadata.labels.clone(),
                ..ObjectMeta::default()
            },
            spec: ApprovalSpec {
                binding: Some(binding),
                action: ApprovalAction {
                    kind: kind.to_owned(),
                    tool_call_ref: ObjectRef::new(&call.metadata.name),
                },
                policy_ref: deferral.policy,
                risk: Risk {
                    level: tool.spec.side_effects.level,
                    summary: deferral
                        .approver_reason
                        .or(deferral.reason)
                        .unwrap_or_else(|| "needs approval".to_owned()),
                },
                routing,
                options: options.into_iter().map(str::to_owned).collect(),
                payload,
            },
            status: ApprovalStatus {
                deadline: Some(deadline),
                ..ApprovalStatus::default()
            },
        })
    }
}
