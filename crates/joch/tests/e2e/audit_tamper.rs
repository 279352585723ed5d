//! The audit against a database edited behind joch's back, on SQLite and on
//! PostgreSQL alike: with joch stopped, records and entries are edited,
//! deleted and forged, and `joch audit verify` names each; a cut tail is
//! caught only with signed checkpoints, as docs/audit.md says.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx_core::connection::Connection;
use sqlx_core::executor::Executor;

use crate::harness::{Joch, NS, TestStore};

/// Runs `sql` on `store`'s database behind joch's back (the same text on
/// both stores); returns the rows changed.
pub(crate) async fn tamper(store: &TestStore, sql: &str) -> u64 {
    match store {
        TestStore::Sqlite { db, .. } => {
            let conn = rusqlite::Connection::open(db).expect("open");
            conn.execute(sql, []).expect(sql) as u64
        }
        TestStore::Postgres(url) => {
            let mut conn = sqlx_postgres::PgConnection::connect(url)
                .await
                .expect("connect");
            conn.execute(sql).await.expect(sql).rows_affected()
        }
    }
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `joch audit verify` with `extra` flags: success, and the findings it
/// printed as `(kind, message)`.
fn verify(joch: &Joch, extra: &[&str]) -> (bool, Vec<String>, String) {
    let mut args = vec!["audit", "verify", "-n", NS];
    args.extend_from_slice(extra);
    let out = joch.cli(&args);
    let all = text(&out);
    let kinds = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(": ").map(|(kind, _)| kind.to_owned()))
        .filter(|k| !k.starts_with("audit of"))
        .collect();
    (out.status.success(), kinds, all)
}

/// Polls the stored checkpoints until one signs entry `seq`.
pub(crate) async fn wait_signed(joch: &Joch, seq: u64) -> String {
    for _ in 0..100 {
        let out = joch.cli(&["audit", "checkpoints", "export", "-n", NS]);
        let lines = String::from_utf8_lossy(&out.stdout).to_string();
        let signed = lines
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|c| c["seq"] == json!(seq));
        if signed {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("entry {seq} was never signed");
}

async fn settle_calls(joch: &Joch) -> String {
    joch.create_tool(json!({
        "metadata": {"name": "nothing"},
        "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
    }))
    .await;
    for n in 1..=6 {
        let call = json!({"metadata": {"name": format!("call-{n}")}, "spec": {"toolRef": {"name": "nothing"}, "input": {"n": n}}});
        let (status, body) = joch.post_call(call).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        // Each settles in a later millisecond than the entry before it.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (status, copy) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/toolcalls/call-1/replay"),
            Some(json!({"mode": "record"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{copy}");
    copy["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned()
}

async fn scenario(db: TestStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("audit.key");
    let key_arg = key.to_str().expect("a path");
    let public = format!("{key_arg}.pub");
    let checkpoints = dir.path().join("checkpoints.jsonl");
    let check_args = [
        "--checkpoints",
        checkpoints.to_str().expect("a path"),
        "--public-key",
        &public,
    ];
    let signing = [
        "--audit-signing-key",
        key_arg,
        "--audit-checkpoint-seconds",
        "1",
    ];
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_joch"))
        .args(["audit", "keygen", "--out", key_arg])
        .output()
        .expect("run joch audit keygen");
    assert!(out.status.success(), "{}", text(&out));
    let mut joch = db.joch().args(&signing).start().await;
    let replayed = settle_calls(&joch).await;

    // A record-mode replay is in the chain, after the six calls.
    let export = joch.cli(&["audit", "export", "-n", NS]);
    let names: Vec<String> = String::from_utf8_lossy(&export.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a line")["entry"]["name"].to_string())
        .collect();
    assert_eq!(names.len(), 7, "{names:?}");
    assert_eq!(names[6], format!("{replayed:?}"));
    let (intact, _, out) = verify(&joch, &[]);
    assert!(intact, "{out}");
    std::fs::write(&checkpoints, wait_signed(&joch, 7).await).expect("write");
    let (intact, _, out) = verify(&joch, &check_args);
    assert!(intact, "{out}");
    assert!(
        out.contains("intact (7 entries, 7 settled records)"),
        "{out}"
    );
    joch.stop();

    // The newest entry cut with its record and the stored checkpoints:
    // nothing inside the database tells, the auditor's checkpoints do.
    let cut = "DELETE FROM audit WHERE namespace = 'e2e' AND seq = 7";
    assert_eq!(tamper(&db, cut).await, 1);
    let record = format!("DELETE FROM objects WHERE kind = 'ToolCall' AND name = '{replayed}'");
    assert_eq!(tamper(&db, &record).await, 1);
    let stored = "DELETE FROM objects WHERE kind = 'AuditCheckpoint'";
    assert!(tamper(&db, stored).await >= 1);
    let mut joch = db.joch().start().await;
    let (intact, _, out) = verify(&joch, &[]);
    assert!(intact, "undetectable without a checkpoint: {out}");
    let (intact, kinds, out) = verify(&joch, &check_args);
    assert!(!intact);
    assert_eq!(kinds, ["truncated"], "{out}");
    assert!(out.contains("broken at entry 7 (truncated)"), "{out}");
    joch.stop();

    // Records edited, deleted and forged, a middle entry deleted, and the
    // newest entry deleted with its record left.
    for (sql, rows) in [
        (
            r#"UPDATE objects SET body = replace(body, '"n":2', '"n":9') WHERE kind = 'ToolCall' AND name = 'call-2'"#,
            1,
        ),
        (
            "DELETE FROM objects WHERE kind = 'ToolCall' AND name = 'call-3'",
            1,
        ),
        (
            "DELETE FROM audit WHERE namespace = 'e2e' AND seq IN (4, 6)",
            2,
        ),
        (
            "INSERT INTO objects (kind, namespace, name, resource_version, labels, tool, phase, execution, body) \
             SELECT kind, namespace, 'forged', resource_version, labels, tool, phase, execution, body \
             FROM objects WHERE kind = 'ToolCall' AND name = 'call-5'",
            1,
        ),
    ] {
        assert_eq!(tamper(&db, sql).await, rows, "{sql}");
    }
    let joch = db.joch().start().await;
    let (forged_status, _) = joch
        .get(&format!("/v1/namespaces/{NS}/toolcalls/forged"))
        .await;
    assert_eq!(forged_status, StatusCode::OK, "the forged row is served");
    let (intact, kinds, out) = verify(&joch, &[]);
    assert!(!intact);
    let expected = [
        "gap",
        "edited",
        "forged_record",
        "missing_entry",
        "forged_record",
        "deleted",
    ];
    assert_eq!(
        sorted(kinds),
        sorted(expected.map(str::to_owned).to_vec()),
        "{out}"
    );
    for named in [
        "ToolCall \"call-2\" was edited",
        "ToolCall \"call-3\", named by entry 3, was deleted",
        "entry 5 does not follow entry 3",
        "ToolCall \"call-4\" is settled but no entry names it",
        "ToolCall \"call-6\" is settled but has no entry",
        "ToolCall \"forged\" holds the record of \"call-5\"",
    ] {
        assert!(out.contains(named), "{named}: {out}");
    }
    let (_, kinds, out) = verify(&joch, &check_args);
    assert!(kinds.contains(&"truncated".to_owned()), "{out}");
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

crate::storetest!(verify_names_each_tampering, |store| {
    scenario(store).await;
});
