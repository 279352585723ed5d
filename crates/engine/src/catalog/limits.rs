//! A namespace's rate limits (`Namespace.spec.rateLimits`) as the catalog
//! keeps them, parsed once per settings snapshot; the call path counts
//! calls against them (`calls/ratelimit.rs`).

use std::num::NonZeroU32;
use std::time::Duration;

use joch_core::namespace::RateLimit;
use joch_store::RateCell;

/// A namespace's limits.
pub(crate) struct Limiters {
    limits: Vec<Limit>,
}

pub(crate) struct Limit {
    pub(crate) spec: RateLimit,
    /// Between two calls at the sustained rate.
    interval: Duration,
    /// Calls allowed back to back.
    burst: NonZeroU32,
}

impl Limiters {
    pub(crate) fn of(limits: &[RateLimit]) -> Limiters {
        let limits = limits
            .iter()
            .filter_map(|spec| {
                let (calls, period) = spec.rate()?;
                let burst = NonZeroU32::new(spec.burst.unwrap_or(calls))?;
                // One call replenished every period/calls: `calls` per period.
                let interval = period / calls.max(1);
                Some(Limit {
                    spec: spec.clone(),
                    interval,
                    burst,
                })
            })
            .collect();
        Limiters { limits }
    }

    /// Each limit, in the order the namespace lists them.
    pub(crate) fn limits(&self) -> impl Iterator<Item = &Limit> {
        self.limits.iter()
    }
}

impl Limit {
    /// The store's cell for `key`. Its name carries the rate, so a changed
    /// setting starts a new allowance.
    pub(crate) fn cell(&self, namespace: &str, key: &str) -> RateCell {
        let interval_ms = i64::try_from(self.interval.as_millis()).unwrap_or(i64::MAX);
        RateCell {
            namespace: namespace.to_owned(),
            limit: format!("{}@{interval_ms}ms/{}", self.spec.name, self.burst),
            key: key.to_owned(),
            interval_ms,
            tolerance_ms: interval_ms.saturating_mul(i64::from(self.burst.get())),
        }
    }
}
