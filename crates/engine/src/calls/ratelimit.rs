//! Rate limits (`Namespace.spec.rateLimits`), by GCRA: one allowance per
//! limit, keyed by agent or tool, kept in the store (`Store::take_rate`).
//! So replicas sharing a store share each allowance, and a restart does
//! not hand out a fresh one. A cell's name carries its rate, so changing a
//! namespace's settings starts the allowance afresh.

use joch_core::namespace::RateScope;
use joch_core::{DecisionKind, Hook, HookDecision, ToolCall};

use crate::{Calls, EngineError};

/// A call over a limit: the decision to record, and when to try again.
pub(in crate::calls) struct Limited {
    pub(in crate::calls) decision: HookDecision,
    pub(in crate::calls) retry_after_seconds: u64,
}

impl Calls {
    /// Counts the call against its namespace's limits; `Some` when one is spent.
    pub(in crate::calls) async fn rate_limit(
        &self,
        call: &ToolCall,
    ) -> Result<Option<Limited>, EngineError> {
        let namespace = &call.metadata.namespace;
        let limiters = self.inner.catalog.limiters(namespace).await?;
        let agent = call.spec.agent_ref.as_ref().map_or("", |a| a.name.as_str());
        for limit in limiters.limits() {
            let key = match limit.spec.per {
                RateScope::Namespace => "",
                RateScope::Agent => agent,
                RateScope::Tool => call.tool_name(),
            };
            if limit.spec.only.as_ref().is_some_and(|only| only != key) {
                continue;
            }
            let now_ms = crate::clock::now().0.timestamp_millis();
            let cell = limit.cell(namespace, key);
            let Some(wait_ms) = self.inner.store.take_rate(&cell, now_ms).await? else {
                continue;
            };
            let retry_after_seconds = wait_ms.div_ceil(1000);
            let decision = HookDecision {
                hook: Hook::Request.step().to_owned(),
                decision: DecisionKind::Deny,
                policy_id: Some(format!("ratelimit/{}", limit.spec.name)),
                policy_version: None,
                reason: Some(format!(
                    "rate limit {} (per {:?}) reached; retry in {retry_after_seconds} s",
                    limit.spec.name, limit.spec.per
                )),
                shadow: false,
            };
            return Ok(Some(Limited {
                decision,
                retry_after_seconds,
            }));
        }
        Ok(None)
    }
}
