//! The tamper-evident audit: every settled call and approval decision is in
//! the namespace's hash chain, and `joch audit verify` names the first entry
//! that was altered, removed or reordered, or whose record was altered.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Joch, NS};
use crate::policies::apply_policy;

fn verify(joch: &Joch) -> (bool, String) {
    let out = joch.cli(&["audit", "verify", "-n", NS]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn tamper(db: &std::path::Path, sql: &str) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let changed = conn.execute(sql, []).unwrap();
    assert_eq!(changed, 1, "{sql}");
}

#[tokio::test]
async fn the_audit_chain_names_the_first_tampered_entry() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("joch.db");
    let joch = Joch::start_on(&db, &[]).await;
    joch.create_tool(json!({
        "metadata": {"name": "nothing"},
        "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
    }))
    .await;
    for n in 1..=3 {
        let (status, _) = joch
            .post_call(json!({"metadata": {"name": format!("call-{n}")}, "spec": {"toolRef": {"name": "nothing"}, "input": {"n": n}}}))
            .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    apply_policy(
        &joch,
        "ask",
        json!({"version": "1", "rules": [{"name": "person", "require": {"approval": "human"}}]}),
    )
    .await;
    let (status, _) = joch
        .send(
            reqwest::Method::POST,
            &format!("/v1/namespaces/{NS}/toolcalls?wait=false"),
            Some(json!({"metadata": {"name": "call-4"}, "spec": {"toolRef": {"name": "nothing"}}})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let out = joch.cli(&["approve", "call-4", "-n", NS, "--by", "alice"]);
    assert!(out.status.success());
    crate::harness::wait_for_phase(&joch, "call-4", "Succeeded").await;

    let (intact, text) = verify(&joch);
    assert!(intact, "{text}");
    assert!(text.contains("intact (5 entries)"), "{text}");
    let export = joch.cli(&["audit", "export", "-n", NS]);
    let lines: Vec<Value> = String::from_utf8_lossy(&export.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let entries: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["entry"]["kind"].as_str().unwrap().to_owned(),
                l["entry"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            ("ToolCall", "call-1"),
            ("ToolCall", "call-2"),
            ("ToolCall", "call-3"),
            ("Approval", "call-4"),
            ("ToolCall", "call-4"),
        ]
        .map(|(k, n)| (k.to_owned(), n.to_owned()))
    );
    assert_eq!(lines[1]["prev"], lines[0]["hash"]);

    // A record changed behind joch's back.
    tamper(
        &db,
        r#"UPDATE objects SET body = replace(body, '"n":2', '"n":9') WHERE kind = 'ToolCall' AND name = 'call-2'"#,
    );
    let (intact, text) = verify(&joch);
    assert!(!intact);
    assert!(
        text.contains("broken at entry 2 (record_altered)"),
        "{text}"
    );
    tamper(
        &db,
        r#"UPDATE objects SET body = replace(body, '"n":9', '"n":2') WHERE kind = 'ToolCall' AND name = 'call-2'"#,
    );
    assert!(verify(&joch).0, "restored");

    // An entry rewritten: its own hash no longer matches.
    tamper(
        &db,
        "UPDATE audit SET body = replace(body, 'Succeeded', 'Failed') WHERE namespace = 'e2e' AND seq = 3",
    );
    let (intact, text) = verify(&joch);
    assert!(!intact);
    assert!(text.contains("broken at entry 3 (altered)"), "{text}");

    // An entry removed: the one after it no longer follows.
    tamper(&db, "DELETE FROM audit WHERE namespace = 'e2e' AND seq = 2");
    let (intact, text) = verify(&joch);
    assert!(!intact);
    assert!(
        text.contains("broken at entry 3 (removed_or_reordered)"),
        "{text}"
    );
}
