//! An approver's inbox: the pending approvals of a namespace, nearest
//! deadline first, each with its call and whether the principal asking may
//! decide it (by the rulebook, `rules.rs`), and a way to hear when the set
//! changes (here, or on another replica through the store's changes).

use joch_core::{Approval, ApprovalPhase, Principal, ToolCall};
use tokio::sync::watch;

use super::Approvals;
use crate::rules;
use crate::{EngineError, ListParams};

/// Most pending approvals an inbox shows at once.
const INBOX_LIMIT: usize = 500;

/// One pending approval as an approver sees it.
#[derive(Debug, Clone)]
pub struct InboxItem {
    /// The approval, as stored.
    pub approval: Approval,
    /// The call that waits on it (absent only if the ledger lost it).
    pub call: Option<ToolCall>,
    /// `Ok` when the principal asking may decide it; else why not.
    pub may_decide: Result<(), String>,
}

impl Approvals {
    /// The pending approvals of `namespace` that `by` may see, nearest
    /// deadline first, each marked with whether `by` may decide it.
    pub async fn inbox(
        &self,
        by: &Principal,
        namespace: &str,
    ) -> Result<Vec<InboxItem>, EngineError> {
        rules::may_in(
            by,
            namespace,
            &rules::Action::Read(rules::Collection::Approvals),
        )?;
        let params = ListParams {
            phase: Some(ApprovalPhase::Pending.as_str().to_owned()),
            limit: Some(INBOX_LIMIT),
            ..ListParams::default()
        };
        let mut items = Vec::new();
        for approval in self.list(namespace, params).await?.items {
            let call = self
                .call(namespace, &approval.spec.action.tool_call_ref.name)
                .await
                .ok();
            // The approval of a call `by` cannot see does not exist for it.
            let seen = match &call {
                Some(call) => self.inner.visibility.sees_call(by, namespace, call).await?,
                None => by.tools.is_none(),
            };
            if !seen {
                continue;
            }
            let may_decide = match &call {
                Some(call) => rules::decider(call, &approval, by, "console", false)
                    .map(drop)
                    .map_err(|e| e.to_string()),
                None => Err("the call is not in the ledger".to_owned()),
            };
            items.push(InboxItem {
                approval,
                call,
                may_decide,
            });
        }
        items.sort_by_key(|i| i.approval.status.deadline.map(|d| d.0));
        Ok(items)
    }

    /// A receiver that changes whenever an Approval opens or is decided.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }
}
