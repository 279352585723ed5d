//! How many approvals wait in each namespace a principal acts in: the way
//! to a call waiting in a namespace other than the one a surface shows.

use std::collections::BTreeMap;

use joch_core::object::IndexFields;
use joch_core::{Approval, ApprovalPhase, Principal};
use joch_store::ListQuery;

use super::Approvals;
use crate::EngineError;
use crate::rules;

/// Most pending approvals counted at once, over every namespace.
const WAITING_LIMIT: usize = 1000;

impl Approvals {
    /// The number of pending approvals `by` may see in each namespace it
    /// acts in where any wait, by namespace name; `shown` (which `by` must
    /// act in) is always there, with 0 if none wait. A principal bound to
    /// one namespace is answered for that one only. At most
    /// [`WAITING_LIMIT`] pending approvals are counted, over all namespaces.
    pub async fn waiting(
        &self,
        by: &Principal,
        shown: &str,
    ) -> Result<BTreeMap<String, usize>, EngineError> {
        rules::acts_in(by, shown)?;
        // An empty namespace lists every namespace's.
        let scope = if rules::acts_in_several(by) {
            ""
        } else {
            shown
        };
        let query = ListQuery {
            namespace: scope.to_owned(),
            index: IndexFields {
                phase: Some(ApprovalPhase::Pending.as_str().to_owned()),
                ..IndexFields::default()
            },
            limit: WAITING_LIMIT,
            ..ListQuery::default()
        };
        let pending = self.inner.store.list_objects::<Approval>(query).await?;
        let mut counts = BTreeMap::from([(shown.to_owned(), 0)]);
        for approval in pending.items {
            let namespace = &approval.metadata.namespace;
            if rules::acts_in(by, namespace).is_err()
                || !self.inner.visibility.sees_approval(by, &approval).await?
            {
                continue;
            }
            *counts.entry(namespace.clone()).or_default() += 1;
        }
        Ok(counts)
    }
}
