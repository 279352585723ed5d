//! An Approval's deadline: computed from the policy's, the tool's or the
//! server's timeout before anything is recorded, armed as a timer, and
//! applied (the fallback) when it passes.

use std::time::Duration;

use joch_core::limits::APPROVAL_TIMEOUT_SECONDS;
use joch_core::policy::ApprovalRouting;
use joch_core::{Approval, ApprovalPhase, Time, Tool, ValidationError};
use joch_store::ListQuery;

use super::ApprovalDecision;
use super::Approvals;
use crate::EngineError;
use crate::clock::now;
use crate::telemetry;

/// How long an approval waits: the policy's deadline, else the tool's,
/// else the server's `default`; a value over the accepted range (stored
/// before it was checked, or a Rego decision's) waits the longest accepted.
pub(crate) fn timeout(routing: &ApprovalRouting, tool: &Tool, default: Duration) -> Duration {
    routing
        .timeout_seconds
        .or(tool.spec.side_effects.approval_timeout_seconds)
        .map_or(default, Duration::from_secs)
        .min(APPROVAL_TIMEOUT_SECONDS.max_duration())
}

/// The instant `timeout` from `from`: an error, not a panic, if it cannot
/// be recorded.
pub(crate) fn deadline(from: Time, timeout: Duration) -> Result<Time, EngineError> {
    from.checked_add(timeout).ok_or_else(|| {
        EngineError::Invalid(ValidationError::field(
            "approvalRouting.timeoutSeconds",
            format!(
                "a deadline {} seconds from {from} cannot be recorded",
                timeout.as_secs()
            ),
        ))
    })
}

impl Approvals {
    /// Applies the fallback when the deadline passes, unless decided before.
    pub(crate) fn arm_deadline(&self, approval: &Approval) {
        let Some(deadline) = approval.status.deadline else {
            return;
        };
        let key = (
            approval.metadata.namespace.clone(),
            approval.metadata.name.clone(),
        );
        if !self.armed().insert(key.clone()) {
            return;
        }
        let wait = (deadline.0 - now().0).to_std().unwrap_or(Duration::ZERO);
        let engine = self.clone();
        tokio::spawn(async move {
            let mut wait = wait;
            let (ns, name) = &key;
            loop {
                tokio::time::sleep(wait).await;
                match engine.expire(ns, name).await {
                    // Reopened with a later deadline (a consent after an approval).
                    Ok(Some(later)) => wait = later,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(approval = %name, error = %e, "approval deadline could not be applied");
                        break;
                    }
                }
            }
            engine.armed().remove(&key);
        });
    }

    /// Re-arms the deadlines of approvals still pending (after a restart).
    pub(crate) async fn rearm_pending_approvals(&self) -> Result<usize, EngineError> {
        let mut query = ListQuery {
            limit: 10_000,
            ..ListQuery::default()
        };
        query.index.phase = Some(ApprovalPhase::Pending.as_str().to_owned());
        let pending = self
            .inner
            .store
            .list_objects::<Approval>(query)
            .await?
            .items;
        telemetry::approvals_pending(pending.len() as f64);
        pending.iter().for_each(|a| self.arm_deadline(a));
        Ok(pending.len())
    }

    /// Applies the fallback of the pending approval `name`, if its deadline
    /// passed; answers how long is left if it was moved later. A decided
    /// Approval whose call waits for its caller's retry waits on until its
    /// retry deadline (`calls/decided/retry.rs`).
    async fn expire(&self, namespace: &str, name: &str) -> Result<Option<Duration>, EngineError> {
        let mut approval = match self.get(namespace, name).await {
            Ok(approval) => approval,
            Err(EngineError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        if approval.status.phase != ApprovalPhase::Pending {
            return self.inner.decided.expire_unretried(&approval).await;
        }
        if let Some(left) = approval
            .status
            .deadline
            .and_then(|d| (d.0 - now().0).to_std().ok())
            .filter(|left| !left.is_zero())
        {
            return Ok(Some(left));
        }
        approval.status.phase = ApprovalPhase::Expired;
        let decision = ApprovalDecision {
            by: "timeout".to_owned(),
            rationale: Some("no decision before the deadline".to_owned()),
            ..Default::default()
        };
        match self.decide(&mut approval, "timeout", &decision, None).await {
            Err(EngineError::Refused { .. }) => {
                // Decided meanwhile: its call may wait for a retry.
                let decided = self.get(namespace, name).await?;
                return self.inner.decided.expire_unretried(&decided).await;
            }
            other => other?,
        }
        self.inner.decided.carry_out(&approval, &decision).await?;
        // Approved by the fallback, it may wait for its caller's retry.
        self.inner.decided.expire_unretried(&approval).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(approval_timeout_seconds: Option<u64>) -> Tool {
        let mut tool = Tool::unregistered("ns", "t");
        tool.spec.side_effects.approval_timeout_seconds = approval_timeout_seconds;
        tool
    }

    fn routing(timeout_seconds: Option<u64>) -> ApprovalRouting {
        ApprovalRouting {
            timeout_seconds,
            ..ApprovalRouting::default()
        }
    }

    #[test]
    fn the_policys_timeout_wins_then_the_tools_then_the_servers() {
        let default = Duration::from_secs(300);
        let t = |r, t| timeout(&routing(r), &tool(t), default).as_secs();
        assert_eq!(t(Some(5), Some(7)), 5);
        assert_eq!(t(None, Some(7)), 7);
        assert_eq!(t(None, None), 300);
    }

    #[test]
    fn a_timeout_out_of_range_waits_the_longest_accepted() {
        let year = APPROVAL_TIMEOUT_SECONDS.max_duration();
        let default = Duration::from_secs(300);
        for huge in [10_000_000_000_000, u64::MAX] {
            assert_eq!(timeout(&routing(Some(huge)), &tool(None), default), year);
            assert_eq!(timeout(&routing(None), &tool(Some(huge)), default), year);
        }
        let at = now();
        let due = deadline(at, timeout(&routing(Some(u64::MAX)), &tool(None), default));
        assert_eq!(due.expect("a deadline").millis_until(at), 0);
    }

    #[test]
    fn a_deadline_that_cannot_be_recorded_is_an_error() {
        let at = now();
        assert!(matches!(
            deadline(at, Duration::from_secs(u64::MAX)),
            Err(EngineError::Invalid(_))
        ));
        assert!(matches!(
            deadline(at, Duration::MAX),
            Err(EngineError::Invalid(_))
        ));
    }
}
