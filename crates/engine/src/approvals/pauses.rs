//! Each pause of a call, for the surface still waiting on it: a call may
//! wait for a person more than once, on the same Approval (a person
//! approves it, then it waits for its user's consent: the Approval is
//! reopened in place as kind `consent`). A surface that reached the
//! caller's user about the first pause (MCP elicitation) hears of the next
//! one here, and asks again.

use std::time::Duration;

use joch_core::{Approval, ApprovalPhase, Phase, Principal};
use serde_json::Value;

use super::Approvals;
use crate::EngineError;
use crate::rules;

/// How often the Approval is read again besides its change signal. The
/// signal carries other replicas' writes too (a change feed that lost some
/// signals every kind), so this is only a safety net: each waiting call
/// reads once per period, and approvals change at a person's pace.
const REREAD: Duration = Duration::from_secs(15);

impl Approvals {
    /// Waits until the call `name` pauses again after `seen`, the Approval
    /// it was last reported waiting on: returns the Approval as reopened
    /// (pending, asking something else: another kind, or another consent
    /// URL), or `None` once the call no longer waits (it runs, or is
    /// settled). Only a principal acting in `namespace` may wait on it.
    pub async fn next_pause(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        seen: &Approval,
    ) -> Result<Option<Approval>, EngineError> {
        rules::acts_in(by, namespace)?;
        let mut changes = self.changes();
        loop {
            // Marked seen before reading: a change during the read wakes the next turn.
            let _ = changes.borrow_and_update();
            let approval = self.get(namespace, name).await?;
            if approval.status.phase == ApprovalPhase::Pending && asks_anew(&approval, seen) {
                return Ok(Some(approval));
            }
            if approval.status.phase != ApprovalPhase::Pending {
                let call = self.call(namespace, name).await?;
                if call.status.phase != Phase::AwaitingApproval {
                    return Ok(None);
                }
            }
            let _ = tokio::time::timeout(REREAD, changes.changed()).await;
        }
    }
}

/// True when `now` asks something `seen` did not: a pending Approval
/// updated for another reason (its deadline, a note) is not a new pause.
fn asks_anew(now: &Approval, seen: &Approval) -> bool {
    let consent_url = |a: &Approval| {
        a.spec
            .payload
            .get("consentUrl")
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    now.spec.action.kind != seen.spec.action.kind || consent_url(now) != consent_url(seen)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn approval(kind: &str, url: Option<&str>) -> Approval {
        serde_json::from_value(json!({
            "metadata": {"name": "c1", "namespace": "default"},
            "spec": {
                "action": {"type": kind, "toolCallRef": {"name": "c1"}},
                "risk": {"level": "external_write", "summary": "why"},
                "options": ["approve", "reject"],
                "payload": {"consentUrl": url},
            },
        }))
        .expect("an approval")
    }

    #[test]
    fn a_pause_is_new_when_it_asks_something_else() {
        let person = approval("tool_call", None);
        let consent = approval("consent", Some("https://as/a"));
        let other = approval("consent", Some("https://as/b"));
        let table = [
            (&consent, &person, true),
            (&other, &consent, true),
            (&consent, &consent, false),
            (&person, &person, false),
        ];
        for (now, seen, new) in table {
            assert_eq!(asks_anew(now, seen), new, "{now:?} after {seen:?}");
        }
    }
}
