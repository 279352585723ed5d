//! The overview's per-tool trends: for the busiest tools, over the
//! overview's fixed window (the last hour, in buckets), per bucket the
//! calls per second, p50 and p99 latency, and failure and denial rates,
//! drawn as small SVG charts on the server. A bucket busier than its sample
//! is estimated from the sample, each sampled call standing for
//! `calls / sample` calls ([`Stats`]); a bucket busier than the count's
//! cap has its calls estimated from its sample's rate ([`calls_in`]).

use std::collections::BTreeMap;

use joch_core::{Phase, ToolCall};
use joch_engine::CallBucket;
use maud::{Markup, html};

/// Tools drawn (the busiest first).
const TOOLS: usize = 6;
const W: f64 = 240.0;
const H: f64 = 60.0;

/// Calls (of a tool, in a stretch of time), each sampled call weighted by
/// how many calls of its bucket it stands for (1 when all were read).
#[derive(Default, Clone)]
pub(crate) struct Stats {
    pub(crate) calls: f64,
    pub(crate) failed: f64,
    pub(crate) denied: f64,
    latencies: Vec<(u64, f64)>,
}

impl Stats {
    pub(crate) fn add(&mut self, c: &ToolCall, weight: f64) {
        self.calls += weight;
        match c.status.phase {
            Phase::Failed | Phase::Unknown => self.failed += weight,
            Phase::Denied => self.denied += weight,
            _ => {}
        }
        if let Some(ms) = c.status.latency_ms {
            self.latencies.push((ms, weight));
        }
    }

    /// The weighted nearest-rank percentile (with equal weights, the
    /// smallest value with at least `p` of the calls at or below it).
    pub(crate) fn percentile(&self, p: f64) -> Option<u64> {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable_by_key(|(ms, _)| *ms);
        let total: f64 = sorted.iter().map(|(_, w)| w).sum();
        let target = p * total * (1.0 - 1e-9);
        let mut seen = 0.0;
        sorted
            .iter()
            .find(|(_, w)| {
                seen += w;
                seen >= target
            })
            .or(sorted.last())
            .map(|(ms, _)| *ms)
    }

    /// `part` as a percentage of the calls; `None` without calls.
    pub(crate) fn rate(&self, part: f64) -> Option<f64> {
        (self.calls > 0.0).then(|| 100.0 * part / self.calls)
    }
}

/// The bucket's calls: its count when exact; past the count's cap, the
/// rate of its sample (its newest calls, over the time from the oldest of
/// them to the bucket's end) over the whole bucket, and at least the cap.
pub(crate) fn calls_in(b: &CallBucket) -> f64 {
    let oldest = b
        .sample
        .iter()
        .filter_map(|c| c.metadata.creation_timestamp)
        .map(|t| t.0.timestamp_millis())
        .min();
    match oldest {
        Some(oldest) if !b.counted_all => {
            let span = (b.before_ms - oldest).max(1) as f64;
            let whole = (b.before_ms - b.since_ms) as f64;
            (b.sample.len() as f64 * whole / span).max(b.count as f64)
        }
        _ => b.count as f64,
    }
}

/// How many calls each of the bucket's sampled calls stands for.
pub(crate) fn weight(b: &CallBucket) -> f64 {
    if b.sample.is_empty() {
        0.0
    } else {
        calls_in(b) / b.sample.len() as f64
    }
}

/// The trends section over the window's `buckets` (oldest first).
pub(crate) fn section(buckets: &[CallBucket]) -> Markup {
    let mut tools: BTreeMap<&str, Vec<Stats>> = BTreeMap::new();
    for (i, b) in buckets.iter().enumerate() {
        for c in &b.sample {
            let per_bucket = tools
                .entry(c.tool_name())
                .or_insert_with(|| vec![Stats::default(); buckets.len()]);
            per_bucket[i].add(c, weight(b));
        }
    }
    if tools.is_empty() {
        return html! { p.note { "No call in this window." } };
    }
    let mut busiest: Vec<(&str, Vec<Stats>)> = tools.into_iter().collect();
    busiest.sort_by(|(a, x), (b, y)| {
        let total = |s: &[Stats]| s.iter().map(|s| s.calls).sum::<f64>();
        total(y).total_cmp(&total(x)).then(a.cmp(b))
    });
    let seconds = buckets
        .first()
        .map_or(1.0, |b| (b.before_ms - b.since_ms) as f64 / 1000.0);
    let ms = |v: Option<u64>| v.map(|v| v as f64);
    html! {
        p.note { (buckets.len()) " buckets of " (format!("{:.0}", seconds / 60.0)) " min each, the " (TOOLS) " busiest tools." }
        div.trends {
            @for (name, stats) in busiest.iter().take(TOOLS) {
                figure.card {
                    figcaption { strong { (name) } }
                    (chart("calls per second", &stats.iter().map(|b| Some(b.calls / seconds)).collect::<Vec<_>>(), None, "#0b57d0", ""))
                    (chart("p50 and p99 latency, ms", &stats.iter().map(|b| ms(b.percentile(0.5))).collect::<Vec<_>>(), Some(&stats.iter().map(|b| ms(b.percentile(0.99))).collect::<Vec<_>>()), "#0f6d31", " ms"))
                    (chart("failure and denial rate, %", &stats.iter().map(|b| b.rate(b.failed)).collect::<Vec<_>>(), Some(&stats.iter().map(|b| b.rate(b.denied)).collect::<Vec<_>>()), "#b42318", " %"))
                }
            }
        }
    }
}

/// A line chart of `values` (and a dashed `second` series), labelled with
/// its range for screen readers.
fn chart(
    what: &str,
    values: &[Option<f64>],
    second: Option<&[Option<f64>]>,
    color: &str,
    unit: &str,
) -> Markup {
    let all = values.iter().chain(second.unwrap_or(&[])).flatten();
    let top = all
        .clone()
        .copied()
        .fold(0.0_f64, f64::max)
        .max(f64::EPSILON);
    let label = format!("{what}: up to {top:.1}{unit}");
    html! {
        svg viewBox={ "0 0 " (W) " " (H + 12.0) } width="100%" height="72" role="img" aria-label=(label) {
            text x="0" y="10" font-size="9" fill="currentColor" { (what) " (max " (format!("{top:.1}")) (unit) ")" }
            polyline fill="none" stroke=(color) stroke-width="1.5" points=(points(values, top)) {}
            @if let Some(second) = second {
                polyline fill="none" stroke=(if unit == " %" { "#8a4b00" } else { color }) stroke-width="1.5" stroke-dasharray="4 2" points=(points(second, top)) {}
            }
            line x1="0" y1=(H + 11.5) x2=(W) y2=(H + 11.5) stroke="#6e7781" {}
        }
    }
}

/// SVG points of a series scaled to `top`; a bucket without a value is
/// skipped (the line joins its neighbours).
fn points(values: &[Option<f64>], top: f64) -> String {
    let step = W / (values.len().max(2) - 1) as f64;
    values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            v.map(|v| format!("{:.1},{:.1}", i as f64 * step, 12.0 + H - H * v / top))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_scale_to_the_top_and_skip_empty_buckets() {
        let values = [Some(0.0), None, Some(10.0)];
        assert_eq!(points(&values, 10.0), "0.0,72.0 240.0,12.0");
    }

    fn stats(latencies: &[(u64, f64)], failed: f64, denied: f64) -> Stats {
        Stats {
            calls: latencies.iter().map(|(_, w)| w).sum(),
            failed,
            denied,
            latencies: latencies.to_vec(),
        }
    }

    #[test]
    fn stats_give_nearest_rank_percentiles_and_rates() {
        let b = stats(&[(40, 1.0), (10, 1.0), (30, 1.0), (20, 1.0)], 1.0, 2.0);
        assert_eq!(b.percentile(0.5), Some(20));
        assert_eq!(b.percentile(0.99), Some(40));
        assert_eq!(b.rate(b.failed), Some(25.0));
        assert_eq!(Stats::default().rate(0.0), None);
        assert_eq!(Stats::default().percentile(0.5), None);
        let hundred: Vec<(u64, f64)> = (1..=100).rev().map(|v| (v, 1.0)).collect();
        let s = stats(&hundred, 0.0, 0.0);
        assert_eq!(
            (s.percentile(0.5), s.percentile(0.99), s.percentile(1.0)),
            (Some(50), Some(99), Some(100))
        );
    }

    #[test]
    fn a_bucket_past_the_counts_cap_is_estimated_from_its_samples_rate() {
        let call = |ms: i64| {
            let mut c = ToolCall::of("c", "t", serde_json::json!({}));
            let at = chrono::DateTime::from_timestamp_millis(ms).unwrap();
            c.metadata.creation_timestamp = Some(joch_core::Time(at));
            c
        };
        // Two calls read over the bucket's last 100 ms of 1,000: 20 in all.
        let mut b = CallBucket {
            since_ms: 0,
            before_ms: 1_000,
            count: 10,
            counted_all: false,
            sample: vec![call(950), call(900)],
        };
        assert_eq!(calls_in(&b), 20.0);
        assert_eq!(weight(&b), 10.0);
        b.counted_all = true;
        assert_eq!(calls_in(&b), 10.0, "an exact count is the count");
        b.counted_all = false;
        b.sample = vec![call(0), call(10)];
        assert_eq!(calls_in(&b), 10.0, "never fewer than the count");
    }

    #[test]
    fn a_sampled_call_counts_for_the_calls_it_stands_for() {
        // A quiet bucket's slow call (weight 1) against a busy bucket's
        // fast ones (each standing for 10): p50 is fast, p99 slow.
        let b = stats(&[(500, 1.0), (5, 10.0), (6, 10.0)], 0.0, 0.0);
        assert_eq!(b.percentile(0.5), Some(6));
        assert_eq!(b.percentile(0.99), Some(500));
    }
}
