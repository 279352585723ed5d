//! Visibility is whole: a call of a tool outside a token's selector leaves
//! no trace the token can read, on any read surface: the execution's
//! events (listed and streamed), the artifact it made, the audit, the
//! costs and the console's pages of the execution and the overview. The
//! root token, without a selector, sees them all. One server for all.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::console::{send, signed_in};
use crate::harness::{Joch, NS, Webhook, rest_tool};

const ROOT: &str = "root-secret-for-visibility-tests";
const HIDDEN: &str = "hr.salaries";

async fn token(joch: &Joch, name: &str, role: &str) -> String {
    let body = json!({"name": name, "role": role, "tools": {"names": ["crm.*"]}});
    let path = format!("/v1/namespaces/{NS}/tokens");
    let (status, created) = joch.send_as(ROOT, Method::POST, &path, Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["token"].as_str().unwrap().to_owned()
}

async fn get(joch: &Joch, token: &str, path: &str) -> (StatusCode, Value) {
    joch.send_as(token, Method::GET, path, None).await
}

/// Starts the server: `hr.salaries` (a webhook whose result is kept as an
/// artifact, with a cost) and `crm.lookup`, each called once by root in
/// execution `run-1`, the hidden one first. Returns the artifact's id.
async fn calls_in_one_execution(joch: &Joch, webhook: &Webhook) -> String {
    let mut hr = rest_tool(
        HIDDEN,
        &format!("{}/echo", webhook.base),
        json!({"level": "read_only"}),
    );
    hr["spec"]["inline"] = json!(false);
    hr["spec"]["cost"] = json!({"perCall": 0.5});
    let crm = json!({"metadata": {"name": "crm.lookup"}, "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}, "cost": {"perCall": 0.1}}});
    for tool in [hr, crm] {
        let path = format!("/v1/namespaces/{NS}/tools");
        let (status, body) = joch.send_as(ROOT, Method::POST, &path, Some(tool)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let mut artifact = String::new();
    for (name, tool) in [("hr-1", HIDDEN), ("crm-1", "crm.lookup")] {
        let call = json!({"metadata": {"name": name}, "spec": {"toolRef": {"name": tool}, "executionRef": {"name": "run-1"}, "input": {"salary": 123_456}}});
        let path = format!("/v1/namespaces/{NS}/toolcalls");
        let (status, body) = joch.send_as(ROOT, Method::POST, &path, Some(call)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["status"]["phase"], "Succeeded", "{body}");
        if let Some(id) = body["status"]["output"]["artifact"]["id"].as_str() {
            artifact = id.to_owned();
        }
    }
    assert!(
        !artifact.is_empty(),
        "the hidden call kept its result as an artifact"
    );
    artifact
}

/// Whether any event of run-1 names `tool`, as `token` lists them.
async fn events_name(joch: &Joch, token: &str, tool: &str) -> bool {
    let path = format!("/v1/namespaces/{NS}/executions/run-1/events");
    let (status, list) = get(joch, token, &path).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let items = list["items"].as_array().unwrap();
    assert!(!items.is_empty(), "{list}");
    items.iter().any(|e| e["data"]["tool_name"] == tool)
}

/// What the live stream of run-1's events sends `token` until the last
/// call's completion shows (or 5 s pass).
async fn streamed(joch: &Joch, token: &str) -> String {
    let url = format!(
        "{}/v1/namespaces/{NS}/executions/run-1/events?follow=true",
        joch.base
    );
    let mut answer = joch.http.get(url).bearer_auth(token).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !text.contains("crm-1") || !text.contains("tool_completed") {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, answer.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            _ => break,
        }
    }
    text
}

#[tokio::test]
async fn a_hidden_tools_calls_leave_no_trace_on_any_read_surface() {
    let webhook = Webhook::start().await;
    let joch = Joch::builder().env("JOCH_ADMIN_TOKEN", ROOT).start().await;
    let artifact = calls_in_one_execution(&joch, &webhook).await;
    let agent = token(&joch, "crm-bot", "agent").await;
    let approver = token(&joch, "crm-approver", "approver").await;

    // Events, listed and streamed.
    assert!(events_name(&joch, ROOT, HIDDEN).await);
    assert!(!events_name(&joch, &agent, HIDDEN).await);
    assert!(events_name(&joch, &agent, "crm.lookup").await);
    let live = streamed(&joch, &agent).await;
    assert!(live.contains("crm-1") && !live.contains(HIDDEN), "{live}");

    // The artifact the hidden call made, its metadata and its bytes.
    for path in [
        format!("/v1/namespaces/{NS}/artifacts/{artifact}"),
        format!("/v1/namespaces/{NS}/artifacts/{artifact}/content"),
    ] {
        let (status, body) = get(&joch, &agent, &path).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("artifact_not_found")),
            "{path}: {body}"
        );
        let (status, _) = get(&joch, ROOT, &path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
    }

    // The audit export an approver with the same selector may read.
    let audit = format!("/v1/namespaces/{NS}/audit");
    let named = |lines: &Value, name: &str| {
        lines
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["entry"]["name"] == name)
    };
    let (status, lines) = get(&joch, &approver, &audit).await;
    assert_eq!(status, StatusCode::OK, "{lines}");
    assert!(named(&lines, "crm-1") && !named(&lines, "hr-1"), "{lines}");
    let (_, lines) = get(&joch, ROOT, &audit).await;
    assert!(named(&lines, "hr-1"), "{lines}");

    // Costs, by tool and in all.
    let costs = |group: &str| format!("/v1/namespaces/{NS}/costs?groupBy={group}");
    let (status, by_tool) = get(&joch, &approver, &costs("tool")).await;
    assert_eq!(status, StatusCode::OK, "{by_tool}");
    assert!(!by_tool.to_string().contains(HIDDEN), "{by_tool}");
    let (_, everything) = get(&joch, &approver, &costs("namespace")).await;
    assert!(
        everything.to_string().contains("\"calls\":1"),
        "{everything}"
    );
    let (_, by_tool) = get(&joch, ROOT, &costs("tool")).await;
    assert!(by_tool.to_string().contains(HIDDEN), "{by_tool}");

    // The console: the execution's page and the overview.
    let session = signed_in(&joch, &approver).await;
    for path in [
        format!("/ui/executions/run-1?ns={NS}"),
        format!("/ui/overview?ns={NS}"),
    ] {
        let page = send(&joch, Method::GET, &path, &session, "").await;
        assert_eq!(page.status(), StatusCode::OK, "{path}");
        let page = page.text().await.unwrap();
        assert!(
            !page.contains(HIDDEN) && !page.contains("hr-1"),
            "{path}: {page}"
        );
    }
    let root = signed_in(&joch, ROOT).await;
    let page = send(
        &joch,
        Method::GET,
        &format!("/ui/executions/run-1?ns={NS}"),
        &root,
        "",
    )
    .await;
    assert!(page.text().await.unwrap().contains(HIDDEN), "root sees it");
}
