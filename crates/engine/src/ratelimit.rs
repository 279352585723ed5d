//! Rate limits (`Namespace.spec.rateLimits`), through `governor`'s keyed
//! GCRA limiters: one limiter per limit, keyed by agent or tool. Limiters
//! live in memory; changing a namespace's settings starts them afresh.

use std::num::NonZeroU32;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use joch_core::namespace::{RateLimit, RateScope};
use joch_core::{Hook, HookDecision, ToolCall};

use crate::{Engine, EngineError};

/// A namespace's limits, with their limiters.
pub(crate) struct Limiters {
    limits: Vec<(RateLimit, DefaultKeyedRateLimiter<String>)>,
}

impl Limiters {
    fn of(limits: &[RateLimit]) -> Limiters {
        let limits = limits
            .iter()
            .filter_map(|limit| {
                let (calls, period) = limit.rate()?;
                let burst = NonZeroU32::new(limit.burst.unwrap_or(calls))?;
                // One call replenished every period/calls: `calls` per period.
                let quota = Quota::with_period(period / calls.max(1))?.allow_burst(burst);
                Some((limit.clone(), RateLimiter::keyed(quota)))
            })
            .collect();
        Limiters { limits }
    }
}

/// A call over a limit: the decision to record, and when to try again.
pub(crate) struct Limited {
    pub(crate) decision: HookDecision,
    pub(crate) retry_after_seconds: u64,
}

impl Engine {
    /// Counts the call against its namespace's limits; `Some` when one is spent.
    pub(crate) async fn rate_limit(&self, call: &ToolCall) -> Result<Option<Limited>, EngineError> {
        let namespace = &call.metadata.namespace;
        let limiters = self
            .inner
            .limiters
            .get_or_load(namespace, async {
                let settings = self.get_namespace(namespace).await?;
                Ok::<_, EngineError>(Limiters::of(&settings.spec.rate_limits))
            })
            .await?;
        let agent = call.spec.agent_ref.as_ref().map_or("", |a| a.name.as_str());
        for (limit, limiter) in &limiters.limits {
            let key = match limit.per {
                RateScope::Namespace => String::new(),
                RateScope::Agent => agent.to_owned(),
                RateScope::Tool => call.tool_name().to_owned(),
            };
            if limit.only.as_ref().is_some_and(|only| *only != key) {
                continue;
            }
            if let Err(not_until) = limiter.check_key(&key) {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                let retry_after_seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                let decision = HookDecision {
                    hook: Hook::Request.step().to_owned(),
                    decision: "deny".to_owned(),
                    policy_id: Some(format!("ratelimit/{}", limit.name)),
                    policy_version: None,
                    reason: Some(format!(
                        "rate limit {} (per {:?}) reached; retry in {retry_after_seconds} s",
                        limit.name, limit.per
                    )),
                };
                return Ok(Some(Limited {
                    decision,
                    retry_after_seconds,
                }));
            }
        }
        Ok(None)
    }
}
