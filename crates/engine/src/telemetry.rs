//! The engine's metrics, through the `metrics` facade: whoever embeds the
//! engine installs a recorder (the `joch` binary exports Prometheus text at
//! `/metrics`). Labels are bounded: tool, policy and namespace names, never
//! call ids or arguments.

use joch_core::{HookDecision, Phase, ToolCall};
use metrics::{counter, gauge, histogram};

/// Seed 003's `agent.tool_call.latency_ms`, and the call counter.
pub(crate) fn call_settled(call: &ToolCall, phase: Phase, latency_ms: Option<u64>) {
    let tool = call.tool_name().to_owned();
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
    counter!("joch_tool_calls_total", "namespace" => call.metadata.namespace.clone(), "tool" => tool, "phase" => phase.as_str())
        .increment(1);
}

/// Seed 003's `agent.tool_batch.latency_ms`.
pub(crate) fn batch_done(call_count: usize, failure_count: usize, ms: f64) {
    histogram!(
        "agent_tool_batch_latency_ms",
        "call_count" => call_count.to_string(),
        "failure_count" => failure_count.to_string()
    )
    .record(ms);
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
        counter!("joch_policy_decisions_total", "policy" => policy, "decision" => d.decision.clone(), "shadow" => shadow).increment(1);
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
pub(crate) fn idempotent_replay(namespace: &str, tool: &str) {
    counter!("joch_idempotent_replays_total", "namespace" => namespace.to_owned(), "tool" => tool.to_owned()).increment(1);
}

/// Time spent in a backend (webhook, actions, ...).
pub(crate) fn backend_latency(backend: &'static str, tool: &str, ms: f64) {
    histogram!("joch_backend_latency_ms", "backend" => backend, "tool" => tool.to_owned())
        .record(ms);
}
