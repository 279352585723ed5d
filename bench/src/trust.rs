//! `--trust`: what issue 21's features cost. Detectors, per KiB of output
//! scanned (and redacted); back-testing, in recorded calls judged per
//! second, over a ledger of `--ledger-calls` calls written for the purpose.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use joch_core::backtest::PolicyTest;
use joch_core::detect::Detectors;
use joch_core::{HookDecision, ObjectRef, Phase, Principal, ToolCall};
use joch_store::{Durability, Store};
use serde_json::{Value, json};

const NAMESPACE: &str = "bench-trust";

/// Scans (and redacts) a 64 KiB output of tickets, a few of which hold a
/// card number, an e-mail address or a key, and prints the cost per KiB.
pub fn detectors() -> Result<()> {
    let detectors = Detectors::default();
    let output = tickets(64 * 1024);
    let kib = output.to_string().len() as f64 / 1024.0;
    let rounds = 200;
    let started = Instant::now();
    let mut found = 0;
    for _ in 0..rounds {
        found += detectors.scan("output", &output).len();
    }
    let scan_us = started.elapsed().as_secs_f64() * 1e6 / rounds as f64;
    let started = Instant::now();
    for _ in 0..rounds {
        let mut copy = output.clone();
        detectors.redact(&mut copy, &["*".to_owned()]);
    }
    let redact_us = started.elapsed().as_secs_f64() * 1e6 / rounds as f64;
    println!(
        "detectors: {kib:.0} KiB output, {} detections per scan: scan {:.1} us/KiB, redact-all {:.1} us/KiB",
        found / rounds,
        scan_us / kib,
        redact_us / kib
    );
    println!(
        "RESULT trust=detectors kib={kib:.0} scan_us_per_kib={:.2} redact_us_per_kib={:.2}",
        scan_us / kib,
        redact_us / kib
    );
    Ok(())
}

/// A JSON output of about `bytes` bytes: an array of ticket objects.
fn tickets(bytes: usize) -> Value {
    let mut items = Vec::new();
    let mut size = 0;
    let mut i = 0;
    while size < bytes {
        let note = match i % 20 {
            0 => "customer paid with 4111 1111 1111 1111 yesterday".to_owned(),
            7 => format!("reach the customer at user{i}@example.com"),
            13 => "deploy key AKIAIOSFODNN7EXAMPLE leaked".to_owned(),
            _ => format!(
                "order {i} was delayed at the depot; the customer asked twice, reference 2026-{i:05}"
            ),
        };
        let item =
            json!({"id": i, "subject": format!("Ticket {i}"), "note": note, "status": "open"});
        size += item.to_string().len();
        items.push(item);
        i += 1;
    }
    json!({"tickets": items})
}

/// Writes `calls` calls, then back-tests a candidate on all of them.
pub async fn back_test(
    engine: &joch_engine::Engine,
    store: &Arc<dyn Store>,
    calls: usize,
) -> Result<()> {
    let started = Instant::now();
    write_ledger(store, calls).await?;
    println!(
        "back-test: wrote {calls} calls in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let candidate: joch_core::Policy = serde_json::from_value(json!({
        "metadata": {"name": "loops"},
        "spec": {"version": "1", "rules": [
            {"when": {"toolCallCount": {"gte": 3}}, "action": {"deny": {}}},
            {"when": {"input.priority": "urgent", "expr": "input.q >= 50"}, "require": {"approval": "human"}}
        ]}
    }))?;
    let test = PolicyTest {
        policy: candidate,
        since: Some("1d".to_owned()),
        replace: None,
    };
    let started = Instant::now();
    let mut read_done = started;
    let report = engine
        .policies()
        .test(&Principal::local(), NAMESPACE, test, &mut |_| {
            read_done = Instant::now();
        })
        .await?;
    let seconds = started.elapsed().as_secs_f64();
    let reading = (read_done - started).as_secs_f64();
    println!(
        "back-test: reading the ledger {reading:.1} s, judging {:.1} s",
        seconds - reading
    );
    let rate = report.calls as f64 / seconds;
    println!(
        "back-test: {} calls judged in {seconds:.1} s ({rate:.0} calls/s); would deny {}, defer {}",
        report.calls, report.total.deny, report.total.defer
    );
    println!(
        "RESULT trust=back_test calls={} seconds={seconds:.2} calls_per_s={rate:.0}",
        report.calls
    );
    Ok(())
}

/// `calls` settled calls in 64 concurrent writers, unsynced (a ledger
/// written for reading, not a durability test).
async fn write_ledger(store: &Arc<dyn Store>, calls: usize) -> Result<()> {
    let writers = 64;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = Arc::clone(store);
        tasks.push(tokio::spawn(async move {
            for i in (w..calls).step_by(writers) {
                let mut call = recorded(i);
                store.create_object(&mut call, Durability::Deferred).await?;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// The `i`th call of the ledger: 5 agents, runs of 20 calls, repeats.
fn recorded(i: usize) -> ToolCall {
    let input = json!({"q": i % 100, "priority": if i % 10 == 0 { "urgent" } else { "normal" }});
    let mut call = ToolCall::of(format!("call-{i:08}"), "crm.lookup", input);
    call.metadata.namespace = NAMESPACE.to_owned();
    call.metadata.creation_timestamp = Some(joch_core::Time(chrono::Utc::now()));
    call.spec.agent_ref = Some(ObjectRef::new(format!("agent-{}", i % 5)));
    call.spec.execution_ref = Some(ObjectRef::new(format!("run-{}", i / 20)));
    call.status.phase = Phase::Succeeded;
    call.status.checksum = format!("{:064x}", i % 7);
    call.status.hook_decisions = vec![HookDecision {
        hook: "steps/toolCallRequest".to_owned(),
        decision: joch_core::DecisionKind::Allow,
        policy_id: Some("gate".to_owned()),
        policy_version: Some("1".to_owned()),
        reason: None,
        shadow: false,
    }];
    call.status.output = Some(json!({"found": true, "id": i}));
    call
}
