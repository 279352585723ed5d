//! Crash recovery: what a restart does with calls a killed server left behind.

use std::sync::Arc;

use joch_core::approval::ApprovalStatus;
use joch_core::{Approval, ApprovalPhase, ToolCall};
use joch_store::{Durability, SqliteStore, Store};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::{Joch, NS, Webhook, assert_error, rest_tool, wait_for_hits, wait_for_phase};

fn submit(tool: &str) -> serde_json::Value {
    json!({"spec": {"toolRef": {"name": tool}, "input": {"x": 1}}})
}

crate::storetest!(
    a_risky_call_interrupted_while_running_becomes_unknown_and_is_never_rerun,
    |store| {
        let webhook = Webhook::start().await;
        let mut joch = store.joch().start().await;
        joch.create_tool(rest_tool(
            "pay",
            &format!("{}/hang-first", webhook.base),
            json!({"level": "financial"}),
        ))
        .await;
        let path = format!("/v1/namespaces/{NS}/toolcalls?wait=false");
        let (_, pending) = joch.send(Method::POST, &path, Some(submit("pay"))).await;
        let name = pending["metadata"]["name"].as_str().unwrap().to_owned();
        wait_for_hits(&webhook, 1).await;
        joch.kill();

        let joch = store.joch().start().await;
        // At once on SQLite; on PostgreSQL once the killed replica's lease lapses.
        let call = wait_for_phase(&joch, &name, "Unknown").await;
        assert_eq!(call["status"]["phase"], "Unknown", "{call}");
        assert_eq!(call["status"]["error"]["code"], "interrupted");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert_eq!(
            webhook.hits(),
            1,
            "a non-idempotent call is never re-run automatically"
        );

        let listed = joch.cli(&["get", "toolcalls", "-n", NS, "--phase", "Unknown"]);
        assert!(String::from_utf8_lossy(&listed.stdout).contains(&name));

        let resolved = joch.cli(&[
            "resolve",
            &name,
            "-n",
            NS,
            "--succeeded",
            "--reason",
            "bank shows the transfer",
            "--output",
            r#"{"ok":true}"#,
        ]);
        assert!(
            resolved.status.success(),
            "{}",
            String::from_utf8_lossy(&resolved.stderr)
        );
        let call = joch.get_call(&name).await;
        assert_eq!(call["status"]["phase"], "Succeeded");
        assert_eq!(call["status"]["output"], json!({"ok": true}));
        assert_eq!(
            call["status"]["resolution"]["reason"],
            "bank shows the transfer"
        );
        let again = joch
            .send(
                Method::POST,
                &format!("/v1/namespaces/{NS}/toolcalls/{name}/resolve"),
                Some(json!({"phase": "Failed", "reason": "x"})),
            )
            .await;
        assert_error(&again, StatusCode::CONFLICT, "not_unknown");
    }
);

crate::storetest!(
    an_idempotent_call_interrupted_while_running_is_rerun_once,
    |store| {
        let webhook = Webhook::start().await;
        let mut joch = store.joch().start().await;
        let tool = rest_tool(
            "sync",
            &format!("{}/hang-first", webhook.base),
            json!({"level": "external_write", "idempotent": true}),
        );
        joch.create_tool(tool).await;
        let (_, pending) = joch
            .send(
                Method::POST,
                &format!("/v1/namespaces/{NS}/toolcalls?wait=false"),
                Some(submit("sync")),
            )
            .await;
        let name = pending["metadata"]["name"].as_str().unwrap().to_owned();
        wait_for_hits(&webhook, 1).await;
        joch.kill();

        let joch = store.joch().start().await;
        let call = wait_for_phase(&joch, &name, "Succeeded").await;
        assert_eq!(
            call["status"]["attempts"], 2,
            "the re-run is recorded as a second attempt"
        );
        assert_eq!(webhook.hits(), 2);
    }
);

/// A caller that hangs up mid-call does not stop the call: it settles, and
/// is not left `Running` with nothing to finish it.
#[tokio::test]
async fn a_call_whose_caller_hangs_up_still_settles() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    let tool = rest_tool(
        "send",
        &format!("{}/slow-echo", webhook.base),
        json!({"level": "external_write"}),
    );
    joch.create_tool(tool).await;
    let call = json!({"metadata": {"name": "call-hung-up"}, "spec": {"toolRef": {"name": "send"}, "input": {"x": 1}}});
    let hung_up = reqwest::Client::new()
        .post(format!("{}/v1/namespaces/{NS}/toolcalls", joch.base))
        .json(&call)
        .timeout(std::time::Duration::from_millis(100))
        .send()
        .await;
    assert!(
        hung_up.is_err(),
        "the caller left before the answer: {hung_up:?}"
    );

    let settled = wait_for_phase(&joch, "call-hung-up", "Succeeded").await;
    assert_eq!(settled["status"]["output"], json!({"echo": {"x": 1}}));
    assert_eq!(webhook.hits(), 1);
}

#[tokio::test]
async fn a_pending_call_never_started_is_run_on_restart() {
    let webhook = Webhook::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("joch.db");
    let joch = Joch::builder().db(&db).start().await;
    joch.create_tool(rest_tool(
        "write",
        &format!("{}/echo", webhook.base),
        json!({"level": "external_write"}),
    ))
    .await;
    drop(joch);

    // A record left Pending, as a crash between recording and running leaves it.
    {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).unwrap());
        let mut call: ToolCall = serde_json::from_value(json!({
            "metadata": {"name": "left-pending", "namespace": NS},
            "spec": {"toolRef": {"name": "write"}, "input": {"a": 1}, "sideEffects": {"level": "external_write"}}
        }))
        .unwrap();
        store
            .create_object(&mut call, Durability::Sync)
            .await
            .unwrap();
    }
    let joch = Joch::builder().db(&db).start().await;
    let call = wait_for_phase(&joch, "left-pending", "Succeeded").await;
    assert_eq!(call["status"]["output"], json!({"echo": {"a": 1}}));
    assert_eq!(webhook.hits(), 1);
}

/// Stores a decision on `name`'s approval as a decider does just before it
/// acts on the call: the state a decider killed at that moment leaves.
async fn store_decision(store: &dyn Store, name: &str, decided: impl FnOnce(&mut ApprovalStatus)) {
    let mut approval: Approval = store.get_object(NS, name).await.unwrap();
    assert_eq!(approval.status.phase, ApprovalPhase::Pending);
    decided(&mut approval.status);
    store
        .update_object(&mut approval, Durability::Sync)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_decision_whose_decider_stopped_before_acting_is_carried_out_on_restart() {
    let webhook = Webhook::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("joch.db");
    let mut joch = Joch::builder().db(&db).start().await;
    let side_effects = json!({"level": "external_write", "requiresApproval": true});
    joch.create_tool(rest_tool(
        "write",
        &format!("{}/echo", webhook.base),
        side_effects,
    ))
    .await;
    let path = format!("/v1/namespaces/{NS}/toolcalls?wait=false");
    let mut paused = Vec::new();
    for _ in 0..3 {
        let (status, call) = joch.send(Method::POST, &path, Some(submit("write"))).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{call}");
        assert_eq!(call["status"]["phase"], "AwaitingApproval", "{call}");
        paused.push(call["metadata"]["name"].as_str().unwrap().to_owned());
    }
    joch.kill();
    let [edited, rejected, unasked] = &paused[..] else {
        unreachable!()
    };
    {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).unwrap());
        store_decision(&*store, edited, |s| {
            s.phase = ApprovalPhase::Approved;
            s.decision = Some("edit".to_owned());
            s.decided_by = Some("alice".to_owned());
            s.edited_input = Some(json!({"x": 2}));
        })
        .await;
        store_decision(&*store, rejected, |s| {
            s.phase = ApprovalPhase::Rejected;
            s.decision = Some("reject".to_owned());
            s.decided_by = Some("bob".to_owned());
            s.message = Some("not today".to_owned());
            // ...for every later call too: the StandingApproval is written
            // after the decision, so the decider never got to it.
            s.always = true;
        })
        .await;
        // Stopped after recording the call, before opening its approval.
        store
            .delete_object::<Approval>(NS, unasked, None)
            .await
            .unwrap();
    }

    let joch = Joch::builder().db(&db).start().await;
    let call = wait_for_phase(&joch, edited, "Succeeded").await;
    assert_eq!(
        call["status"]["output"],
        json!({"echo": {"x": 2}}),
        "{call}"
    );
    assert_eq!(call["spec"]["approval"]["approvedBy"], "alice", "{call}");
    assert_eq!(call["status"]["originalInput"], json!({"x": 1}), "{call}");
    let call = wait_for_phase(&joch, rejected, "Denied").await;
    assert_eq!(
        call["status"]["error"]["code"], "denied_by_approver",
        "{call}"
    );
    assert_eq!(call["status"]["error"]["message"], "not today", "{call}");
    let call = wait_for_phase(&joch, unasked, "Failed").await;
    assert_eq!(call["status"]["error"]["code"], "interrupted", "{call}");
    assert_eq!(webhook.hits(), 1, "only the approved call ran");
    let (status, standing) = joch
        .get(&format!("/v1/namespaces/{NS}/standingapprovals/write"))
        .await;
    assert_eq!(status, StatusCode::OK, "{standing}");
    assert_eq!(standing["spec"]["decision"], "reject");
    assert_eq!(standing["spec"]["decidedBy"], "bob");

    // Carried out once: a second restart finds nothing left to do.
    drop(joch);
    let _joch = Joch::builder().db(&db).start().await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(webhook.hits(), 1);
}

crate::storetest!(a_restart_does_not_refill_a_rate_limit, |store| {
    let mut joch = store.joch().start().await;
    joch.create_tool(json!({
        "metadata": {"name": "nothing"},
        "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
    }))
    .await;
    let limits = json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Namespace", "spec": {"rateLimits": [
        {"name": "all", "per": "namespace", "callsPerMinute": 2}
    ]}});
    let (status, body) = joch
        .send(Method::PUT, &format!("/v1/namespaces/{NS}"), Some(limits))
        .await;
    assert!(status.is_success(), "{body}");
    let call = json!({"spec": {"toolRef": {"name": "nothing"}, "input": {}}});
    for _ in 0..2 {
        assert_eq!(joch.post_call(call.clone()).await.0, StatusCode::CREATED);
    }
    joch.kill();

    let joch = store.joch().start().await;
    let (status, limited) = joch.post_call(call).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{limited}");
    assert_eq!(limited["status"]["error"]["code"], "rate_limited");
});
