//! The host is the operator's (`engine/src/rules/host.rs`): a namespace's
//! admin names stdio commands, secret variables and secret files only within
//! the operator's allow-lists, and no one reaches joch's own secrets.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::auth::{ROOT, token};
use crate::harness::Joch;

const TEAM: &str = "team-a";

fn endpoint(name: &str, secret: Value) -> Value {
    json!({"metadata": {"name": name}, "spec": {"url": "http://127.0.0.1:9/", "secretHeaders": {"X-Key": secret}}})
}

fn stdio(name: &str, command: &str, args: &[&str]) -> Value {
    json!({"metadata": {"name": name}, "spec": {"stdio": {"command": command, "args": args}}})
}

/// The refusal's field and message, asserting a 422.
fn refused(answer: &(StatusCode, Value)) -> (String, String) {
    assert_eq!(answer.0, StatusCode::UNPROCESSABLE_ENTITY, "{}", answer.1);
    let field = &answer.1["details"]["fields"][0];
    (
        field["field"].as_str().unwrap().to_owned(),
        field["message"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn a_namespace_admin_stays_within_the_operator_s_lists() {
    let secrets = tempfile::tempdir().unwrap();
    std::fs::write(secrets.path().join("crm"), "k").unwrap();
    let joch = Joch::builder()
        .env("JOCH_ADMIN_TOKEN", ROOT)
        .args(&["--secret-env-prefix", "CRM_", "--secret-dir"])
        .arg(secrets.path().to_str().unwrap())
        .start()
        .await;
    let admin = token(&joch, TEAM, "team-admin", "admin").await;
    let endpoints = format!("/v1/namespaces/{TEAM}/endpoints");
    let servers = format!("/v1/namespaces/{TEAM}/mcpservers");
    let apply = |path: &str, body: Value, as_: &str| {
        let (path, as_) = (path.to_owned(), as_.to_owned());
        let joch = &joch;
        async move { joch.send_as(&as_, Method::POST, &path, Some(body)).await }
    };

    let leak = apply(
        &endpoints,
        endpoint("leak", json!({"env": "JOCH_ADMIN_TOKEN"})),
        &admin,
    )
    .await;
    let (field, message) = refused(&leak);
    assert_eq!(field, "spec.secretHeaders.X-Key.env");
    assert!(message.contains("joch's own"), "{message}");
    // Not even the operator reaches joch's own variables by a reference.
    let (field, _) = refused(
        &apply(
            &endpoints,
            endpoint("leak", json!({"env": "JOCH_VAULT_KEY"})),
            ROOT,
        )
        .await,
    );
    assert_eq!(field, "spec.secretHeaders.X-Key.env");

    let (_, message) =
        refused(&apply(&endpoints, endpoint("home", json!({"env": "HOME"})), &admin).await);
    assert!(message.contains("--secret-env-prefix: CRM_"), "{message}");
    let (field, message) = refused(
        &apply(
            &endpoints,
            endpoint("passwd", json!({"file": "/etc/passwd"})),
            &admin,
        )
        .await,
    );
    assert_eq!(field, "spec.secretHeaders.X-Key.file");
    assert!(message.contains("--secret-dir"), "{message}");
    let escape = format!("{}/../../etc/passwd", secrets.path().display());
    refused(
        &apply(
            &endpoints,
            endpoint("escape", json!({"file": escape})),
            &admin,
        )
        .await,
    );
    let shell = apply(&servers, stdio("shell", "/bin/sh", &["-c", "id"]), &admin).await;
    let (field, message) = refused(&shell);
    assert_eq!(field, "spec.stdio.command");
    assert!(message.contains("--allow-stdio-command: none"), "{message}");

    // Within the lists.
    let (status, body) = apply(
        &endpoints,
        endpoint("crm", json!({"env": "CRM_KEY"})),
        &admin,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let in_dir = secrets.path().join("crm").display().to_string();
    let (status, body) = apply(
        &endpoints,
        endpoint("crm-file", json!({"file": in_dir})),
        &admin,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = apply(&endpoints, endpoint("home", json!({"env": "HOME"})), ROOT).await;
    assert_eq!(status, StatusCode::CREATED, "the operator may: {body}");
}

#[tokio::test]
async fn a_stdio_server_cannot_read_joch_s_secrets_from_its_parent() {
    let out = tempfile::tempdir().unwrap();
    let seen = out.path().join("environ");
    let joch = Joch::builder()
        .env("JOCH_ADMIN_TOKEN", ROOT)
        .env(
            "JOCH_VAULT_KEY",
            "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
        )
        .args(&["--allow-stdio-command", "/bin/sh -c *"])
        .start()
        .await;
    let admin = token(&joch, TEAM, "team-admin", "admin").await;
    let script = format!("tr '\\0' '\\n' < /proc/$PPID/environ > {}", seen.display());
    let (status, body) = joch
        .send_as(
            &admin,
            Method::POST,
            &format!("/v1/namespaces/{TEAM}/mcpservers"),
            Some(stdio("snoop", "/bin/sh", &["-c", &script])),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for _ in 0..100 {
        if std::fs::metadata(&seen).is_ok_and(|m| m.len() > 0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let environ = std::fs::read_to_string(&seen).unwrap();
    assert!(
        environ.contains("PATH="),
        "the child read joch's environment: {environ}"
    );
    assert!(
        environ.contains("JOCH_ADMIN_TOKEN="),
        "the name stays: {environ}"
    );
    assert!(!environ.contains(ROOT), "the root token is gone");
    assert!(!environ.contains("MDEyMzQ1"), "the vault key is gone");
}
