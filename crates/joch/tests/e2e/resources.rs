//! Tools and ToolCalls as resources: create, read, list, replace, delete.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::{Joch, NS, Webhook, assert_error, rest_tool};

fn tools() -> String {
    format!("/v1/namespaces/{NS}/tools")
}

#[tokio::test]
async fn tool_lifecycle_with_optimistic_concurrency() {
    let joch = Joch::start().await;
    let created = joch
        .create_tool(rest_tool(
            "zendesk.create_ticket",
            "http://127.0.0.1:1/x",
            json!({"level": "external_write"}),
        ))
        .await;
    let meta = &created["metadata"];
    assert_eq!(
        (meta["namespace"].as_str(), meta["resourceVersion"].as_str()),
        (Some(NS), Some("1"))
    );
    assert_eq!(meta["uid"].as_str().map(str::len), Some(36));
    assert!(meta["creationTimestamp"].is_string());
    assert_eq!(
        created["spec"]["sideEffects"],
        json!({"level": "external_write", "idempotent": false, "requiresApproval": false})
    );
    let path = format!("{}/zendesk.create_ticket", tools());
    assert_eq!(joch.get(&path).await, (StatusCode::OK, created.clone()));

    let mut changed = created.clone();
    changed["spec"]["description"] = json!("v2");
    let (status, v2) = joch.send(Method::PUT, &path, Some(changed.clone())).await;
    assert_eq!(status, StatusCode::OK, "{v2}");
    assert_eq!(v2["metadata"]["resourceVersion"], "2");
    assert_eq!(v2["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(
        v2["metadata"]["creationTimestamp"],
        created["metadata"]["creationTimestamp"]
    );

    // The next call uses the new version at once (the call path's cache
    // of tools is dropped on every write).
    let (_, call) = joch.call("zendesk.create_ticket", json!({})).await;
    assert_eq!(call["status"]["toolVersion"], "2", "{call}");

    let stale = joch.send(Method::PUT, &path, Some(changed)).await;
    assert_error(&stale, StatusCode::CONFLICT, "conflict");
    assert_eq!(joch.get(&path).await.1["spec"]["description"], "v2");

    let stale_delete = joch
        .send(Method::DELETE, &format!("{path}?resourceVersion=1"), None)
        .await;
    assert_error(&stale_delete, StatusCode::CONFLICT, "conflict");
    let (status, deleted) = joch.send(Method::DELETE, &path, None).await;
    assert_eq!(
        (status, deleted["spec"]["description"].as_str()),
        (StatusCode::OK, Some("v2"))
    );
    assert_error(
        &joch.get(&path).await,
        StatusCode::NOT_FOUND,
        "tool_not_found",
    );
    let gone = joch.call("zendesk.create_ticket", json!({})).await;
    assert_error(&gone, StatusCode::NOT_FOUND, "tool_not_found");
}

#[tokio::test]
async fn tools_are_accepted_as_yaml_and_in_the_parameters_form() {
    let joch = Joch::start().await;
    let yaml = r#"
apiVersion: joch.dev/v1alpha1
kind: Tool
metadata:
  name: save_meal
spec:
  description: Log a meal
  parameters:
    - {name: meal_type, type: string, enum: [breakfast, lunch, dinner]}
    - {name: dishes, type: array, required: true}
  backend: {type: rest, endpoint: {url: "http://127.0.0.1:1/meals"}}
"#;
    let (status, tool) = joch
        .send_raw(Method::POST, &tools(), "application/yaml", yaml.into())
        .await;
    assert_eq!(status, StatusCode::CREATED, "{tool}");
    assert_eq!(
        tool["spec"]["inputSchema"],
        json!({
            "type": "object",
            "properties": {"meal_type": {"type": "string", "enum": ["breakfast", "lunch", "dinner"]}, "dishes": {"type": "array"}},
            "required": ["dishes"]
        })
    );
    assert_eq!(
        tool["spec"]["sideEffects"]["level"], "unknown",
        "unclassified tools are risky by default"
    );
}

#[tokio::test]
async fn lists_filter_by_label_tool_phase_and_execution_and_page_newest_first() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    joch.create_tool(rest_tool(
        "ok",
        &format!("{}/echo", webhook.base),
        json!({"level": "read_only"}),
    ))
    .await;
    joch.create_tool(rest_tool(
        "bad",
        &format!("{}/fail", webhook.base),
        json!({"level": "read_only"}),
    ))
    .await;
    let mut names = Vec::new();
    for i in 0..6 {
        let tool = if i % 3 == 2 { "bad" } else { "ok" };
        let execution = if i < 3 { "exec-a" } else { "exec-b" };
        let (_, call) = joch
            .post_call(json!({
                "metadata": {"name": format!("c{i}"), "labels": {"parity": if i % 2 == 0 { "even" } else { "odd" }}},
                "spec": {"toolRef": {"name": tool}, "executionRef": {"name": execution}, "input": {"i": i}}
            }))
            .await;
        names.push(call["metadata"]["name"].as_str().unwrap().to_owned());
    }
    let list = |query: &str| {
        let path = format!("/v1/namespaces/{NS}/toolcalls?{query}");
        let joch = &joch;
        async move {
            let (status, body) = joch.get(&path).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(body["kind"], "ToolCallList");
            let names: Vec<String> = body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["metadata"]["name"].as_str().unwrap().to_owned())
                .collect();
            (
                names,
                body["metadata"]["continue"].as_str().map(str::to_owned),
            )
        }
    };
    assert_eq!(list("").await.0, ["c5", "c4", "c3", "c2", "c1", "c0"]);
    assert_eq!(list("tool=bad").await.0, ["c5", "c2"]);
    assert_eq!(list("phase=Failed").await.0, ["c5", "c2"]);
    assert_eq!(
        list("phase=Succeeded&execution=exec-a").await.0,
        ["c1", "c0"]
    );
    assert_eq!(
        list("labelSelector=parity%3Deven").await.0,
        ["c4", "c2", "c0"]
    );
    assert_eq!(
        list("labelSelector=parity!%3Deven,parity").await.0,
        ["c5", "c3", "c1"]
    );

    let (first, token) = list("limit=4").await;
    assert_eq!(first, ["c5", "c4", "c3", "c2"]);
    let (rest, end) = list(&format!(
        "limit=4&continue={}",
        token.expect("a continue token")
    ))
    .await;
    assert_eq!((rest, end), (vec!["c1".to_owned(), "c0".to_owned()], None));
}

#[tokio::test]
async fn a_toolcall_can_be_relabelled_but_never_rewritten_or_deleted() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    joch.create_tool(rest_tool(
        "echo",
        &format!("{}/echo", webhook.base),
        json!({"level": "read_only"}),
    ))
    .await;
    let (_, call) = joch.call("echo", json!({"a": 1})).await;
    let path = format!(
        "/v1/namespaces/{NS}/toolcalls/{}",
        call["metadata"]["name"].as_str().unwrap()
    );

    let mut relabelled = call.clone();
    relabelled["metadata"]["labels"] = json!({"reviewed": "yes"});
    let (status, body) = joch.send(Method::PUT, &path, Some(relabelled)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata"]["labels"], json!({"reviewed": "yes"}));
    assert_eq!(body["status"], call["status"]);

    let mut rewritten = body.clone();
    rewritten["spec"]["input"] = json!({"a": 2});
    assert_error(
        &joch.send(Method::PUT, &path, Some(rewritten)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_resource",
    );
    let mut forged = body.clone();
    forged["status"]["phase"] = json!("Failed");
    assert_error(
        &joch.send(Method::PUT, &path, Some(forged)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_resource",
    );
    assert_error(
        &joch.send(Method::DELETE, &path, None).await,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );
    assert_eq!(
        joch.get_call(call["metadata"]["name"].as_str().unwrap())
            .await["spec"]["input"],
        json!({"a": 1})
    );
}

#[tokio::test]
async fn health_and_readiness() {
    let joch = Joch::start().await;
    assert_eq!(
        joch.get("/healthz").await,
        (StatusCode::OK, json!({"status": "ok"}))
    );
    assert_eq!(
        joch.get("/readyz").await,
        (StatusCode::OK, json!({"status": "ready"}))
    );
}
