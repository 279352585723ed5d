//! A namespace's calls over a recent, fixed time window, in buckets, at a
//! cost bounded whatever the ledger's size or rate: per bucket, the number
//! of calls created in it up to a cap (a bounded count on the store's
//! creation-time index, without reading a body) and a sample of at most
//! `sample` of its newest calls (one ranged list). The console's overview
//! draws its rates, latencies and trends from these.

use std::time::Duration;

use joch_core::{Object, Principal, Time, ToolCall};
use joch_store::ListQuery;

use crate::resources::valid_namespace;
use crate::rules::{Action, Collection, may_in};
use crate::{Calls, EngineError};

/// The window, cut into buckets of equal length ending at `until`.
#[derive(Debug, Clone, Copy)]
pub struct CallWindow {
    /// The window's end (exclusive), usually now.
    pub until: Time,
    /// Length of one bucket.
    pub bucket: Duration,
    /// Buckets, oldest first; the window is `bucket * buckets` long.
    pub buckets: usize,
    /// At most this many calls read per bucket (its newest).
    pub sample: usize,
    /// Calls are counted up to this many per bucket.
    pub count_cap: u64,
}

/// The calls of one bucket.
#[derive(Debug, Clone)]
pub struct CallBucket {
    /// Calls created at or after this unix millisecond...
    pub since_ms: i64,
    /// ...and before this one.
    pub before_ms: i64,
    /// How many calls were created in the bucket, up to the window's
    /// `count_cap`: exact when below it, else at least this many.
    pub count: u64,
    /// True when `count` is exact (below the cap).
    pub counted_all: bool,
    /// Its newest calls, at most the window's `sample`: all of them when
    /// `count` is not larger.
    pub sample: Vec<ToolCall>,
}

impl Calls {
    /// The namespace's calls over `window`, bucket by bucket, oldest first.
    /// Costs `2 × buckets` indexed store reads: counts of at most
    /// `count_cap` index entries, lists of at most `sample` rows.
    ///
    /// For a principal with a tool selector, a bucket holds only the calls
    /// it sees among those read, and counts them (exact when every call of
    /// the bucket was read, else at least that many).
    pub async fn over(
        &self,
        by: &Principal,
        namespace: &str,
        window: CallWindow,
    ) -> Result<Vec<CallBucket>, EngineError> {
        may_in(by, namespace, &Action::Read(Collection::ToolCalls))?;
        valid_namespace(namespace)?;
        let width = i64::try_from(window.bucket.as_millis())
            .unwrap_or(i64::MAX)
            .max(1);
        let end = window.until.0.timestamp_millis();
        let mut out = Vec::with_capacity(window.buckets);
        let at = |i: i64| end.saturating_sub(i.saturating_mul(width));
        for i in (1..=window.buckets as i64).rev() {
            let query = ListQuery {
                kind: <ToolCall as Object>::KIND.to_owned(),
                namespace: namespace.to_owned(),
                limit: window.sample.max(1),
                created_since_ms: Some(at(i)),
                created_before_ms: Some(at(i - 1)),
                ..ListQuery::default()
            };
            let count = self
                .inner
                .store
                .count_at_most(query.clone(), window.count_cap)
                .await?;
            let sample = if count == 0 {
                Vec::new()
            } else {
                self.inner
                    .store
                    .list_objects::<ToolCall>(query)
                    .await?
                    .items
            };
            let mut bucket = CallBucket {
                since_ms: at(i),
                before_ms: at(i - 1),
                count,
                counted_all: count < window.count_cap,
                sample,
            };
            if by.tools.is_some() {
                let read_all = bucket.counted_all && count <= bucket.sample.len() as u64;
                let sample = std::mem::take(&mut bucket.sample);
                bucket.sample = self
                    .inner
                    .visibility
                    .keep_seen_calls(by, namespace, sample)
                    .await?;
                bucket.count = bucket.sample.len() as u64;
                bucket.counted_all = read_all;
            }
            out.push(bucket);
        }
        Ok(out)
    }
}
