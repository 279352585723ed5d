//! The engine's metrics, through the `metrics` facade: whoever embeds the
//! engine installs a recorder (the `joch` binary exports Prometheus text at
//! `/metrics`). Every label value comes from a bounded set: names of
//! configured Tools, Policies and namespaces, and fixed words. Whatever a
//! client names (a hook-mode tool joch has no Tool for, a namespace with no
//! settings, an agent, an execution, a caller) is counted under
//! [`UNREGISTERED`] or not at all; the record and the trace keep it whole.

use joch_core::{HookDecision, Phase, ToolCall};
use metrics::{counter, gauge, histogram};

use crate::catalog::Catalog;

/// The label value of a name a client chose rather than configured.
pub(crate) const UNREGISTERED: &str = "unregistered";

/// The namespace and tool a call is counted under.
pub(crate) struct CallLabels {
    namespace: String,
    tool: String,
}

/// A call's labels: its tool's and namespace's names when configured.
/// A call against a registered Tool (or a forged artifact tool, whose
/// names are fixed) has both; a hook-mode call of an unregistered tool
/// keeps its namespace only if that is `default` or has settings (as the
/// catalog knows them).
pub(crate) async fn call_labels(catalog: &Catalog, call: &ToolCall) -> CallLabels {
    let namespace = &call.metadata.namespace;
    if call.status.tool_version.is_some() || call.spec.from_artifact_tool {
        return CallLabels {
            namespace: namespace.clone(),
            tool: call.tool_name().to_owned(),
        };
    }
    let configured = namespace == "default"
        || catalog
            .namespace(namespace)
            .await
            .is_ok_and(|ns| !ns.metadata.resource_version.is_empty());
    CallLabels {
        namespace: if configured {
            namespace.clone()
        } else {
            UNREGISTERED.to_owned()
        },
        tool: UNREGISTERED.to_owned(),
    }
}

/// Seed 003's `agent.tool_call.latency_ms`, and the call counter.
pub(crate) fn call_settled(
    call: &ToolCall,
    labels: CallLabels,
    phase: Phase,
    latency_ms: Option<u64>,
) {
    let CallLabels { namespace, tool } = labels;
    let source = if call.spec.replay_of.is_some() {
        "replay"
    } else {
        "execute"
    };
    if let Some(ms) = latency_ms {
        let result = if phase == Phase::Succeeded {
            "success"
        } else {
            "error"
        };
        histogram!("agent_tool_call_latency_ms", "tool_name" => tool.clone(), "result" => result, "source" => source)
            .record(ms as f64);
    }
    counter!("joch_tool_calls_total", "namespace" => namespace, "tool" => tool, "phase" => phase.as_str())
        .increment(1);
}

/// Seed 003's `agent.tool_batch.latency_ms`. A client chooses a batch's
/// size, so counts are labelled by range.
pub(crate) fn batch_done(call_count: usize, failure_count: usize, ms: f64) {
    histogram!(
        "agent_tool_batch_latency_ms",
        "call_count" => count_range(call_count),
        "failure_count" => count_range(failure_count)
    )
    .record(ms);
}

/// A count as one of a fixed set of words: exact up to 4, then ranges.
fn count_range(n: usize) -> &'static str {
    match n {
        0 => "0",
        1 => "1",
        2 => "2",
        3 => "3",
        4 => "4",
        5..=8 => "5-8",
        9..=16 => "9-16",
        17..=32 => "17-32",
        33..=64 => "33-64",
        65..=128 => "65-128",
        _ => "129+",
    }
}

/// Records decisions on the call, counting each.
pub(crate) fn record_decisions(call: &mut ToolCall, records: Vec<HookDecision>) {
    decisions(&records);
    call.status.hook_decisions.extend(records);
}

/// One count per policy decision recorded on a call.
pub(crate) fn decisions(records: &[HookDecision]) {
    for d in records {
        let policy = d.policy_id.clone().unwrap_or_else(|| "(none)".to_owned());
        let shadow = if d.shadow { "true" } else { "false" };
        counter!("joch_policy_decisions_total", "policy" => policy, "decision" => d.decision.as_str(), "shadow" => shadow).increment(1);
    }
}

/// An approval opened (+1) or decided (-1).
pub(crate) fn approvals_pending(delta: f64) {
    gauge!("joch_approvals_pending").increment(delta);
}

/// How long a person took (or the deadline), in seconds.
pub(crate) fn approval_waited(seconds: f64) {
    histogram!("joch_approval_wait_seconds").record(seconds);
}

/// A call answered from the record of an earlier one with the same key.
pub(crate) fn idempotent_replay(labels: CallLabels) {
    let CallLabels { namespace, tool } = labels;
    counter!("joch_idempotent_replays_total", "namespace" => namespace, "tool" => tool)
        .increment(1);
}

/// Time spent in a backend (webhook, actions, ...).
pub(crate) fn backend_latency(backend: &'static str, tool: &str, ms: f64) {
    histogram!("joch_backend_latency_ms", "backend" => backend, "tool" => tool.to_owned())
        .record(ms);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_fold_into_a_fixed_set() {
        let words: std::collections::HashSet<_> = (0..100_000).map(count_range).collect();
        assert_eq!(words.len(), 11);
        for (n, word) in [
            (0, "0"),
            (4, "4"),
            (5, "5-8"),
            (64, "33-64"),
            (10_000, "129+"),
        ] {
            assert_eq!(count_range(n), word);
        }
    }
}
