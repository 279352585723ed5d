//! The tamper-evident audit: every settled call and approval decision is in
//! the namespace's hash chain, `joch audit verify` names what was altered,
//! removed or reordered, and an exported bundle verifies offline against
//! signed checkpoints. (audit_tamper.rs edits the database on both stores.)

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Joch, NS};
use crate::policies::apply_policy;

/// The phases the namespace's chain records for call `name`, oldest first.
pub(crate) async fn chained(joch: &Joch, name: &str) -> Vec<String> {
    let (status, chain) = joch.get(&format!("/v1/namespaces/{NS}/audit")).await;
    assert_eq!(status, StatusCode::OK, "{chain}");
    chain
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["entry"]["kind"] == "ToolCall" && l["entry"]["name"] == name)
        .map(|l| l["entry"]["phase"].as_str().unwrap_or_default().to_owned())
        .collect()
}

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
    let joch = Joch::builder().db(&db).start().await;
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
    assert!(
        text.contains("intact (5 entries, 5 settled records)"),
        "{text}"
    );
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
    assert!(text.contains("broken at entry 2 (edited)"), "{text}");
    let (status, report) = joch.get(&format!("/v1/namespaces/{NS}/audit/verify")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(report["intact"], false);
    assert_eq!(report["entries"], 5);
    // `firstProblem` keeps the kinds it always had; `findings` names each.
    assert_eq!(report["firstProblem"]["kind"], "record_altered", "{report}");
    assert_eq!(report["firstProblem"]["seq"], 2, "{report}");
    assert_eq!(
        report["findings"],
        json!([{"kind": "edited", "seq": 2, "name": "call-2",
                "message": "ToolCall \"call-2\" was edited: it no longer matches entry 2"}])
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
    assert!(text.contains("broken at entry 3 (entry_edited)"), "{text}");

    // An entry removed: the one after it no longer follows.
    tamper(&db, "DELETE FROM audit WHERE namespace = 'e2e' AND seq = 2");
    let (intact, text) = verify(&joch);
    assert!(!intact);
    assert!(text.contains("broken at entry 3 (gap)"), "{text}");
    assert!(text.contains("entry_edited: entry 3 was edited"), "{text}");
}

fn run(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_joch"))
        .args(args)
        // No server: offline verification must not need one.
        .env("JOCH_SERVER", "http://127.0.0.1:1")
        .output()
        .expect("run joch");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

crate::storetest!(
    an_exported_bundle_verifies_offline_and_a_tampered_one_is_refused,
    |store| {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
        let (key, bundle, checkpoints) = (path("k"), path("bundle.jsonl"), path("cp.jsonl"));
        let (made, text) = run(&["audit", "keygen", "--out", &key]);
        assert!(made, "{text}");
        let (again, _) = run(&["audit", "keygen", "--out", &key]);
        assert!(!again, "an existing key is never overwritten");
        let mut joch = store
            .joch()
            .args(&["--audit-signing-key", &key])
            .start()
            .await;
        joch.create_tool(json!({
        "metadata": {"name": "nothing"},
        "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
    }))
    .await;
        for n in 1..=3 {
            let (status, _) = joch.call("nothing", json!({"n": n})).await;
            assert_eq!(status, StatusCode::CREATED);
            if n == 1 {
                // The signer signs a head it has not seen at once; then, with
                // the default period of a minute, not before shutdown.
                crate::audit_tamper::wait_signed(&joch, 1).await;
            }
        }
        let export = joch.cli(&["audit", "export", "-n", NS]);
        std::fs::write(&bundle, &export.stdout).unwrap();
        joch.stop();
        let joch = store.joch().start().await;
        let signed = joch.cli(&["audit", "checkpoints", "export", "-n", NS]);
        let last: Value = String::from_utf8_lossy(&signed.stdout)
            .lines()
            .last()
            .map(|l| serde_json::from_str(l).unwrap())
            .expect("a checkpoint");
        assert_eq!(last["seq"], 3, "signed on shutdown: {last}");
        assert_eq!(last["namespace"], NS);
        std::fs::write(&checkpoints, &signed.stdout).unwrap();
        drop(joch);

        let public = format!("{key}.pub");
        let offline = |bundle: &str| {
            run(&[
                "audit",
                "verify",
                "--bundle",
                bundle,
                "--checkpoints",
                &checkpoints,
                "--public-key",
                &public,
            ])
        };
        let (intact, text) = offline(&bundle);
        assert!(intact, "{text}");
        assert!(
            text.contains("audit of e2e: intact (3 entries, offline)"),
            "{text}"
        );

        let lines: Vec<String> = std::fs::read_to_string(&bundle)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        let tampered = path("tampered.jsonl");
        let cases = [
            (
                "an entry edited",
                lines.join("\n").replacen("\"Succeeded\"", "\"Failed\"", 1),
                "broken at entry 1 (entry_edited)",
            ),
            (
                "a middle entry cut",
                [&lines[0], &lines[2]].map(|l| l.as_str()).join("\n"),
                "broken at entry 3 (gap)",
            ),
            (
                "the tail cut",
                lines[..2].join("\n"),
                "broken at entry 3 (truncated)",
            ),
        ];
        for (what, content, expected) in cases {
            std::fs::write(&tampered, content).unwrap();
            let (intact, text) = offline(&tampered);
            assert!(!intact, "{what}: {text}");
            assert!(text.contains(expected), "{what}: {text}");
        }

        // Checkpoints altered, or checked with another key, are refused.
        let forged = std::fs::read_to_string(&checkpoints)
            .unwrap()
            .replace("\"seq\":3", "\"seq\":2");
        std::fs::write(path("forged.jsonl"), forged).unwrap();
        let (ok, text) = run(&[
            "audit",
            "verify",
            "--bundle",
            &bundle,
            "--checkpoints",
            &path("forged.jsonl"),
            "--public-key",
            &public,
        ]);
        assert!(!ok && text.contains("bad signature"), "{text}");
        let (made, _) = run(&["audit", "keygen", "--out", &path("other")]);
        assert!(made);
        let (ok, text) = run(&[
            "audit",
            "verify",
            "--bundle",
            &bundle,
            "--checkpoints",
            &checkpoints,
            "--public-key",
            &path("other.pub"),
        ]);
        assert!(!ok && text.contains("not this one"), "{text}");
    }
);

crate::storetest!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    verify_finds_nothing_while_calls_settle,
    |store| {
        let joch = std::sync::Arc::new(store.joch().start().await);
        joch.create_tool(json!({
        "metadata": {"name": "nothing"},
        "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
    }))
    .await;
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let joch = std::sync::Arc::clone(&joch);
                tokio::spawn(async move {
                    for n in 0..150 {
                        let (status, _) = joch.call("nothing", json!({"w": w, "n": n})).await;
                        assert_eq!(status, StatusCode::CREATED);
                    }
                })
            })
            .collect();
        // Records that settle between verify's walk of the chain and its read of
        // the records are not findings: their entries were appended meanwhile.
        let mut verified = 0;
        while !writers.iter().all(|w| w.is_finished()) {
            let (status, report) = joch.get(&format!("/v1/namespaces/{NS}/audit/verify")).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(report["intact"], true, "{report}");
            verified += 1;
        }
        for writer in writers {
            writer.await.unwrap();
        }
        assert!(
            verified >= 3,
            "verified only {verified} times while calls settled"
        );
    }
);
