//! Where a call's time went (issue 23), from the `Server-Timing` header
//! joch answers each REST call with: its own stages, its store writes'
//! waits, and the rest (HTTP both ways, the client), so that a tail can be
//! attributed to a stage rather than guessed at.

use std::time::Duration;

/// The stages of `Server-Timing`, in its order, then what it does not cover.
pub const STAGES: [&str; 7] = [
    "admission",
    "queue",
    "commit",
    "handoff",
    "backend",
    "settle",
    "outside",
];

/// One call's stages, in ms, in the order of [`STAGES`].
pub type Breakdown = [f64; 7];

/// The stages of a `Server-Timing` value for a call that took `elapsed`
/// from the client's side; `outside` is the difference.
pub fn parse(header: &str, elapsed: Duration) -> Option<Breakdown> {
    let mut stages = [0.0; 7];
    for metric in header.split(',') {
        let mut parts = metric.trim().split(';');
        let name = parts.next()?;
        let ms = parts
            .find_map(|p| p.trim().strip_prefix("dur="))?
            .parse::<f64>()
            .ok()?;
        let i = STAGES.iter().position(|s| *s == name)?;
        stages[i] = ms;
    }
    let inside: f64 = stages.iter().sum();
    stages[6] = (elapsed.as_secs_f64() * 1000.0 - inside).max(0.0);
    Some(stages)
}

/// Each stage's p50 and p99 over all calls, and its mean over the slowest
/// 1% of calls (by their whole latency): what the tail is made of.
pub fn report(scenario: &str, rate: usize, calls: &mut [(Duration, Breakdown)]) {
    if calls.is_empty() {
        return;
    }
    calls.sort_by_key(|(elapsed, _)| *elapsed);
    let tail = &calls[calls.len() * 99 / 100..];
    let mut line = format!(
        "RESULTB scenario=joch_{scenario} rate={rate} measured={}",
        calls.len()
    );
    let mut table = format!("  {:<20}", "  stage ms");
    for (i, stage) in STAGES.iter().enumerate() {
        let mut values: Vec<f64> = calls.iter().map(|(_, b)| b[i]).collect();
        values.sort_by(f64::total_cmp);
        let at = |p: f64| values[((values.len() - 1) as f64 * p).round() as usize];
        let tail_mean = tail.iter().map(|(_, b)| b[i]).sum::<f64>() / tail.len() as f64;
        let (p50, p99) = (at(0.50), at(0.99));
        table.push_str(&format!(" {stage} {p50:.3}/{p99:.3}/{tail_mean:.3}"));
        line.push_str(&format!(
            " {stage}_p50_ms={p50:.3} {stage}_p99_ms={p99:.3} {stage}_tail_ms={tail_mean:.3}"
        ));
    }
    println!("{table}   (p50/p99/mean of the slowest 1%)");
    println!("{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_is_read_and_the_rest_is_outside() {
        let header = "admission;dur=0.100, queue;dur=0.200, commit;dur=0.300, handoff;dur=0.010, backend;dur=1.000, settle;dur=0.090";
        let stages = parse(header, Duration::from_millis(2)).unwrap();
        assert_eq!(&stages[..6], &[0.1, 0.2, 0.3, 0.01, 1.0, 0.09]);
        assert!((stages[6] - 0.3).abs() < 1e-9, "{stages:?}");
        assert!(parse("admission;desc=x", Duration::ZERO).is_none());
        assert!(parse("nonsense;dur=1", Duration::ZERO).is_none());
    }
}
