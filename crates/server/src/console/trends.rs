//! The overview's per-tool trends: for the busiest tools, over the span of
//! the calls the overview read (its bounded window of recent calls), per
//! time bucket the calls per second, p50 and p99 latency, and failure and
//! denial rates, drawn as small SVG charts on the server.

use std::collections::BTreeMap;

use joch_core::{Phase, ToolCall};
use maud::{Markup, html};

/// Tools drawn (the busiest first).
const TOOLS: usize = 6;
/// Time buckets per chart.
const BUCKETS: usize = 12;
const W: f64 = 240.0;
const H: f64 = 60.0;

/// One tool's calls in one bucket.
#[derive(Default, Clone)]
struct Bucket {
    calls: usize,
    failed: usize,
    denied: usize,
    latencies: Vec<u64>,
}

impl Bucket {
    fn percentile(&self, p: f64) -> Option<f64> {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
        sorted.get(rank - 1).map(|v| *v as f64)
    }

    fn rate(&self, part: usize) -> Option<f64> {
        (self.calls > 0).then(|| 100.0 * part as f64 / self.calls as f64)
    }
}

/// The trends section over `calls` (any order).
pub(crate) fn section(calls: &[ToolCall]) -> Markup {
    let stamped: Vec<(i64, &ToolCall)> = calls
        .iter()
        .filter_map(|c| Some((c.metadata.creation_timestamp?.0.timestamp_millis(), c)))
        .collect();
    let (Some(first), Some(last)) = (
        stamped.iter().map(|s| s.0).min(),
        stamped.iter().map(|s| s.0).max(),
    ) else {
        return html! { p.note { "No call yet." } };
    };
    let width = ((last - first) / BUCKETS as i64).max(1);
    let mut tools: BTreeMap<&str, Vec<Bucket>> = BTreeMap::new();
    for (t, c) in &stamped {
        let buckets = tools
            .entry(c.tool_name())
            .or_insert_with(|| vec![Bucket::default(); BUCKETS]);
        let b = &mut buckets[(((t - first) / width) as usize).min(BUCKETS - 1)];
        b.calls += 1;
        match c.status.phase {
            Phase::Failed | Phase::Unknown => b.failed += 1,
            Phase::Denied => b.denied += 1,
            _ => {}
        }
        b.latencies.extend(c.status.latency_ms);
    }
    let mut busiest: Vec<(&str, Vec<Bucket>)> = tools.into_iter().collect();
    busiest.sort_by_key(|(name, b)| {
        (
            std::cmp::Reverse(b.iter().map(|b| b.calls).sum::<usize>()),
            *name,
        )
    });
    let seconds = width as f64 / 1000.0;
    html! {
        p.note { (BUCKETS) " buckets of " (format!("{seconds:.1}")) " s each, the " (TOOLS) " busiest tools." }
        div.trends {
            @for (name, buckets) in busiest.iter().take(TOOLS) {
                figure.card {
                    figcaption { strong { (name) } }
                    (chart("calls per second", &buckets.iter().map(|b| Some(b.calls as f64 / seconds)).collect::<Vec<_>>(), None, "#0b57d0", ""))
                    (chart("p50 and p99 latency, ms", &buckets.iter().map(|b| b.percentile(0.5)).collect::<Vec<_>>(), Some(&buckets.iter().map(|b| b.percentile(0.99)).collect::<Vec<_>>()), "#0f6d31", " ms"))
                    (chart("failure and denial rate, %", &buckets.iter().map(|b| b.rate(b.failed)).collect::<Vec<_>>(), Some(&buckets.iter().map(|b| b.rate(b.denied)).collect::<Vec<_>>()), "#b42318", " %"))
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

    #[test]
    fn a_bucket_gives_percentiles_and_rates() {
        let b = Bucket {
            calls: 4,
            failed: 1,
            denied: 2,
            latencies: vec![40, 10, 30, 20],
        };
        assert_eq!(b.percentile(0.5), Some(20.0));
        assert_eq!(b.percentile(0.99), Some(40.0));
        assert_eq!(b.rate(b.failed), Some(25.0));
        assert_eq!(Bucket::default().rate(0), None);
    }
}
