//! The `joch` CLI against a real server, and every example manifest.

use std::process::Output;

use serde_json::{Value, json};

use crate::harness::{Joch, workspace_root};

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn apply_creates_then_configures_every_example() {
    let joch = Joch::start().await;
    let examples = workspace_root().join("examples");
    let first = stdout(&joch.cli(&["apply", "-f", examples.to_str().unwrap(), "-n", "e2e"]));
    let example_count = std::fs::read_dir(&examples).unwrap().count();
    assert_eq!(first.matches(" created").count(), example_count, "{first}");
    let second = stdout(&joch.cli(&["apply", "-f", examples.to_str().unwrap(), "-n", "e2e"]));
    assert_eq!(
        second.matches(" unchanged").count() + second.matches(" configured").count(),
        example_count,
        "applying the same manifests again changes nothing: {second}"
    );
    let (_, tool) = joch
        .get("/v1/namespaces/e2e/tools/zendesk.create_ticket")
        .await;
    assert_eq!(tool["metadata"]["resourceVersion"], "2");

    // A different definition under a taken name is said to replace it.
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("ticket.yaml");
    let manifest = "kind: Tool\nmetadata: {name: zendesk.create_ticket}\nspec:\n  description: Another.\n  inputSchema: {type: object}\n  backend: {type: noop}\n";
    std::fs::write(&other, manifest).unwrap();
    let third = stdout(&joch.cli(&["apply", "-f", other.to_str().unwrap(), "-n", "e2e"]));
    assert!(
        third.contains("tool/zendesk.create_ticket replaced: its spec differed"),
        "{third}"
    );

    let bad = joch.cli(&["apply", "-f", "/nonexistent.yaml"]);
    assert!(!bad.status.success());
}

#[tokio::test]
async fn the_demo_serves_every_example_tool_end_to_end() {
    let joch = Joch::builder().args(&["--demo"]).start().await;
    let inputs = [
        ("demo.echo", json!({"hello": "world"})),
        (
            "zendesk.create_ticket",
            json!({"subject": "Refund", "body": "Never arrived", "priority": "high", "customer_email": "a@b.c"}),
        ),
        (
            "save_meal",
            json!({"meal_type": "lunch", "dishes": ["soup"]}),
        ),
        (
            "log_meal",
            json!({"meal_type": "dinner", "dishes": ["rice"]}),
        ),
    ];
    let (_, tools) = joch.get("/v1/namespaces/default/tools").await;
    assert_eq!(
        tools["items"].as_array().unwrap().len(),
        inputs.len(),
        "each example is covered here"
    );
    for (tool, input) in inputs {
        let out = joch.cli(&[
            "call",
            tool,
            "--input",
            &input.to_string(),
            "-o",
            "json",
            "--caller",
            "user-42",
            "-e",
            "demo-run",
        ]);
        let record: Value = serde_json::from_str(&stdout(&out)).expect("json record");
        assert_eq!(record["status"]["phase"], "Succeeded", "{record}");
    }
    let (_, ticket) = joch
        .get("/v1/namespaces/default/toolcalls?tool=zendesk.create_ticket")
        .await;
    let ticket = ticket.clone();

    // The example policy: urgent tickets wait for a person; looping is refused.
    let calls = "/v1/namespaces/default/toolcalls";
    let urgent = json!({"spec": {"toolRef": {"name": "zendesk.create_ticket"},
        "input": {"subject": "Down", "body": "All of it", "priority": "urgent"}}});
    let (_, waiting) = joch
        .send(
            reqwest::Method::POST,
            &format!("{calls}?wait=false"),
            Some(urgent),
        )
        .await;
    assert_eq!(waiting["status"]["phase"], "AwaitingApproval", "{waiting}");
    let again = json!({"spec": {"toolRef": {"name": "demo.echo"}, "executionRef": {"name": "loop"}, "input": {"same": true}}});
    let mut phases = Vec::new();
    for _ in 0..4 {
        let (_, call) = joch
            .send(reqwest::Method::POST, calls, Some(again.clone()))
            .await;
        phases.push(call["status"]["phase"].as_str().unwrap().to_owned());
    }
    assert_eq!(phases, ["Succeeded", "Succeeded", "Succeeded", "Denied"]);
    assert_eq!(
        ticket["items"][0]["spec"]["input"]["customer_email"],
        "[REDACTED]"
    );
}

#[tokio::test]
async fn get_describe_and_call_print_what_the_server_holds() {
    let joch = Joch::builder().args(&["--demo"]).start().await;
    let call = stdout(&joch.cli(&[
        "call",
        "demo.echo",
        "--input",
        r#"{"x": 1}"#,
        "--id",
        "call_cli_1",
    ]));
    assert!(call.contains("phase: Succeeded"), "{call}");

    let table = stdout(&joch.cli(&["get", "toolcalls"]));
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "TOOL", "PHASE", "LATENCY", "AGE"]);
    assert!(
        table.lines().any(|l| l.starts_with("call_cli_1")
            && l.contains("demo.echo")
            && l.contains("Succeeded")),
        "{table}"
    );

    let tools: Value =
        serde_json::from_str(&stdout(&joch.cli(&["get", "tools", "-o", "json"]))).unwrap();
    assert_eq!(tools.as_array().unwrap().len(), 4);

    let described = stdout(&joch.cli(&["describe", "toolcall", "call_cli_1"]));
    let record: Value = serde_yaml_ng::from_str(&described).unwrap();
    assert_eq!(record, joch.get_call_in("default", "call_cli_1").await);

    let failed = joch.cli(&["call", "save_meal", "--input", r#"{"meal_type": "brunch"}"#]);
    assert!(!failed.status.success());
    assert!(String::from_utf8_lossy(&failed.stderr).contains("ended Failed"));
    let missing = joch.cli(&["describe", "toolcall", "nope"]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("404 toolcall_not_found"));
}

#[tokio::test]
async fn serve_refuses_a_network_address_without_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_joch"))
        .args(["serve", "--addr", "0.0.0.0:0", "--db"])
        .arg(dir.path().join("joch.db"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let error = String::from_utf8_lossy(&refused.stderr);
    assert!(
        error.contains("refusing to listen on 0.0.0.0:0 without authentication"),
        "{error}"
    );
    assert!(error.contains("--insecure"), "{error}");

    // Loopback says so in its startup line; --insecure allows the network.
    let mut loopback = std::process::Command::new(env!("CARGO_BIN_EXE_joch"))
        .args(["serve", "--addr", "127.0.0.1:0", "--db"])
        .arg(dir.path().join("loopback.db"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(loopback.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _ = loopback.kill();
    let _ = loopback.wait();
    assert!(line.contains("no authentication: loopback only"), "{line}");
    let insecure = Joch::builder().args(&["--insecure"]).start().await;
    assert_eq!(insecure.get("/healthz").await.0, reqwest::StatusCode::OK);
}
