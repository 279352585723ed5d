//! The ranges of the numbers joch accepts. Every duration, timeout, size,
//! count and window a client can set has a documented range (see
//! docs/resources.md), checked when a resource is applied or a request is
//! made, so that whatever joch computes from it (a deadline, a window's
//! start, a rate) stays in range: a value joch accepts is a value it can use.
//! The engine's arithmetic on these values is checked as well, because a
//! record written before a range existed must not panic either.

use std::time::Duration;

use crate::FieldError;

const DAY: u64 = 86_400;

/// The values one numeric field accepts, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The smallest accepted value.
    pub min: u64,
    /// The largest accepted value.
    pub max: u64,
    /// What the numbers count.
    pub unit: Unit,
    /// The maximum in words, for messages (`a year`).
    pub about: &'static str,
}

/// What a [`Range`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Seconds of time.
    Seconds,
    /// Milliseconds of time.
    Millis,
    /// Bytes.
    Bytes,
    /// Calls.
    Calls,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Unit::Seconds => "seconds",
            Unit::Millis => "milliseconds",
            Unit::Bytes => "bytes",
            Unit::Calls => "calls",
        }
    }
}

/// How long a deferred call waits for a decision: a Tool's
/// `sideEffects.approvalTimeoutSeconds`, a policy's
/// `approvalRouting.timeoutSeconds`.
pub const APPROVAL_TIMEOUT_SECONDS: Range = Range::new(1, 366 * DAY, Unit::Seconds, "a year");
/// How long an idempotency key holds: `idempotencyWindowSeconds` of a Tool
/// or a Namespace.
pub const IDEMPOTENCY_WINDOW_SECONDS: Range = Range::new(1, 366 * DAY, Unit::Seconds, "a year");
/// How long joch waits for a webhook, an Endpoint or an MCP server:
/// `timeoutMs`.
pub const HTTP_TIMEOUT_MS: Range = Range::new(1, 3_600_000, Unit::Millis, "an hour");
/// `maxInlineBytes` of a Tool, an MCP tool override or a Namespace.
pub const INLINE_BYTES: Range = Range::new(0, 1 << 30, Unit::Bytes, "1 GiB");
/// A rate limit's `callsPerMinute`: at most one call a millisecond.
pub const CALLS_PER_MINUTE: Range = Range::new(1, 60_000, Unit::Calls, "one a millisecond");
/// A rate limit's `callsPerDay`: at most one call a millisecond.
pub const CALLS_PER_DAY: Range = Range::new(1, 86_400_000, Unit::Calls, "one a millisecond");
/// A rate limit's `burst`.
pub const BURST: Range = Range::new(1, 1_000_000, Unit::Calls, "a million");
/// An McpServer's `discovery.refreshInterval`.
pub const REFRESH_INTERVAL_MS: Range = Range::new(100, 7 * DAY * 1000, Unit::Millis, "7 days");
/// A back-test's `since`: how far back the calls it replays go.
pub const BACKTEST_WINDOW_SECONDS: Range = Range::new(1, 400 * DAY, Unit::Seconds, "400 days");
/// A cost report's `since` given as a duration back from now.
pub const COST_WINDOW_SECONDS: Range = Range::new(0, 3_660 * DAY, Unit::Seconds, "10 years");
/// The largest price (`perCall`, `perUnit.price`) and the largest cost of
/// one call, in its currency: a million. Reports sum costs as whole
/// millionths in 64 bits, which this keeps far from overflowing.
pub const MAX_PRICE: f64 = 1_000_000.0;

impl Range {
    /// The values from `min` to `max` of `unit`.
    pub const fn new(min: u64, max: u64, unit: Unit, about: &'static str) -> Range {
        Range {
            min,
            max,
            unit,
            about,
        }
    }

    /// Whether `value` is accepted.
    pub fn contains(&self, value: u64) -> bool {
        (self.min..=self.max).contains(&value)
    }

    /// What to tell the client who sent `got` for `field`.
    pub fn error(&self, field: &str, got: impl std::fmt::Display) -> FieldError {
        FieldError {
            field: field.to_owned(),
            message: format!(
                "must be between {} and {} {} ({}), got {got}",
                self.min,
                self.max,
                self.unit.as_str(),
                self.about
            ),
        }
    }

    /// The field's error when it is set and out of range.
    pub fn check(&self, field: &str, value: Option<u64>) -> Option<FieldError> {
        value
            .filter(|v| !self.contains(*v))
            .map(|v| self.error(field, v))
    }

    /// [`check`](Self::check) of a duration, in this range's unit (seconds
    /// or milliseconds), reported as the client wrote it (`text`).
    pub fn check_duration(&self, field: &str, value: Duration, text: &str) -> Option<FieldError> {
        let count = match self.unit {
            Unit::Seconds => value.as_secs(),
            _ => u64::try_from(value.as_millis()).unwrap_or(u64::MAX),
        };
        (!self.contains(count)).then(|| self.error(field, format!("{text:?}")))
    }

    /// The largest accepted value as a duration (of a range of seconds or
    /// milliseconds): what a stored value that escaped the check is cut to.
    pub fn max_duration(&self) -> Duration {
        match self.unit {
            Unit::Seconds => Duration::from_secs(self.max),
            _ => Duration::from_millis(self.max),
        }
    }
}

/// Field errors for each number of `fields` out of its range: a
/// resource's `validate` lists its numbers once, as `(field, range, value)`.
pub fn problems(fields: &[(&str, Range, Option<u64>)]) -> Vec<FieldError> {
    fields
        .iter()
        .filter_map(|(field, range, value)| range.check(field, *value))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ends_are_in_range_and_nothing_beyond() {
        let r = APPROVAL_TIMEOUT_SECONDS;
        for (value, ok) in [
            (0, false),
            (1, true),
            (300, true),
            (366 * DAY, true),
            (366 * DAY + 1, false),
            (10_000_000_000_000, false),
            (u64::MAX, false),
        ] {
            assert_eq!(r.check("f", Some(value)).is_none(), ok, "{value}");
        }
        assert_eq!(r.check("f", None), None, "an unset field is not checked");
    }

    #[test]
    fn an_error_names_the_field_its_range_and_the_value() {
        let e = HTTP_TIMEOUT_MS
            .check("spec.timeoutMs", Some(3_600_001))
            .unwrap();
        assert_eq!(e.field, "spec.timeoutMs");
        assert_eq!(
            e.message,
            "must be between 1 and 3600000 milliseconds (an hour), got 3600001"
        );
    }

    #[test]
    fn durations_are_compared_in_the_ranges_unit() {
        let window = BACKTEST_WINDOW_SECONDS;
        let day = Duration::from_secs(DAY);
        assert_eq!(window.check_duration("since", day * 400, "400d"), None);
        let e = window.check_duration("since", day * 401, "401d").unwrap();
        assert!(e.message.ends_with("got \"401d\""), "{}", e.message);
        let refresh = REFRESH_INTERVAL_MS;
        assert!(
            refresh
                .check_duration("r", Duration::from_millis(99), "99ms")
                .is_some()
        );
        assert!(
            refresh
                .check_duration("r", Duration::from_secs(60), "1m")
                .is_none()
        );
        assert_eq!(refresh.max_duration(), day * 7);
    }

    #[test]
    fn problems_lists_every_field_out_of_range() {
        let errors = problems(&[
            ("a", INLINE_BYTES, Some(0)),
            ("b", BURST, Some(0)),
            ("c", BURST, None),
            ("d", INLINE_BYTES, Some(u64::MAX)),
        ]);
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["b", "d"]);
    }
}
