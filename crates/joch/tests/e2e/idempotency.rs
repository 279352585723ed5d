//! Idempotency keys over HTTP: one execution per key, whatever the timing.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, TestStore, Webhook, assert_error, rest_tool};

fn calls() -> String {
    format!("/v1/namespaces/{NS}/toolcalls")
}

fn keyed(tool: &str, key: &str, input: Value) -> Value {
    json!({"spec": {"toolRef": {"name": tool}, "input": input, "sideEffects": {"idempotencyKey": key}}})
}

async fn start_with_tool(store: &TestStore, path: &str) -> (Webhook, Joch) {
    let webhook = Webhook::start().await;
    let joch = store.joch().start().await;
    let url = format!("{}/{path}", webhook.base);
    joch.create_tool(rest_tool(
        "zendesk.create_ticket",
        &url,
        json!({"level": "external_write"}),
    ))
    .await;
    (webhook, joch)
}

crate::storetest!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    two_hundred_concurrent_requests_with_one_key_execute_once,
    |store| {
        let (webhook, joch) = start_with_tool(&store, "slow-echo").await;
        let joch = Arc::new(joch);
        let requests: Vec<_> = (0..200)
            .map(|_| {
                let joch = Arc::clone(&joch);
                tokio::spawn(async move {
                    joch.post_call(keyed(
                        "zendesk.create_ticket",
                        "order-12345",
                        json!({"n": 1}),
                    ))
                    .await
                })
            })
            .collect();
        let mut answers = Vec::new();
        for request in requests {
            answers.push(request.await.unwrap());
        }
        assert_eq!(webhook.hits(), 1, "the tool ran exactly once");
        let created = answers
            .iter()
            .filter(|(s, _)| *s == StatusCode::CREATED)
            .count();
        let replayed = answers.iter().filter(|(s, _)| *s == StatusCode::OK).count();
        let odd: Vec<_> = answers.iter().filter(|(s, _)| !s.is_success()).collect();
        assert_eq!((created, replayed), (1, 199), "{odd:?}");
        let original = &answers
            .iter()
            .find(|(s, _)| *s == StatusCode::CREATED)
            .unwrap()
            .1;
        for (_, answer) in &answers {
            assert_eq!(answer["metadata"]["name"], original["metadata"]["name"]);
            assert_eq!(
                answer["status"], original["status"],
                "every caller gets the same result"
            );
        }
        let (_, list) = joch.get(&calls()).await;
        assert_eq!(list["items"].as_array().unwrap().len(), 1, "one record");
    }
);

crate::storetest!(a_settled_key_replays_the_record_with_a_header, |store| {
    let (webhook, joch) = start_with_tool(&store, "echo").await;
    let first = joch
        .post_call(keyed("zendesk.create_ticket", "k1", json!({"a": 1})))
        .await;
    assert_eq!(first.0, StatusCode::CREATED);
    let response = reqwest::Client::new()
        .post(format!("{}{}", joch.base, calls()))
        .header("Idempotency-Key", "k1")
        .json(&json!({"spec": {"toolRef": {"name": "zendesk.create_ticket"}, "input": {"a": 1}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    let replay: Value = response.json().await.unwrap();
    assert_eq!(
        replay["metadata"]["annotations"]["joch.dev/idempotent-replayed"],
        "true"
    );
    assert_eq!(replay["metadata"]["name"], first.1["metadata"]["name"]);
    assert_eq!(replay["status"], first.1["status"]);
    assert_eq!(webhook.hits(), 1);
    let stored = joch
        .get_call(first.1["metadata"]["name"].as_str().unwrap())
        .await;
    assert!(
        stored["metadata"].get("annotations").is_none(),
        "the marker is not stored"
    );
});

crate::storetest!(
    a_key_reused_with_other_arguments_is_refused_and_runs_nothing,
    |store| {
        let (webhook, joch) = start_with_tool(&store, "echo").await;
        joch.post_call(keyed("zendesk.create_ticket", "k1", json!({"a": 1})))
            .await;
        let reuse = joch
            .post_call(keyed("zendesk.create_ticket", "k1", json!({"a": 2})))
            .await;
        assert_error(
            &reuse,
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused",
        );
        assert_eq!(webhook.hits(), 1);
        let (_, list) = joch.get(&calls()).await;
        assert_eq!(
            list["items"].as_array().unwrap().len(),
            1,
            "nothing stored for the refused call"
        );
    }
);

crate::storetest!(
    wait_false_on_a_running_key_is_409_and_stores_nothing,
    |store| {
        let (webhook, joch) = start_with_tool(&store, "slow-echo").await;
        let path = format!("{}?wait=false", calls());
        let first = joch
            .send(
                Method::POST,
                &path,
                Some(keyed("zendesk.create_ticket", "k", json!({}))),
            )
            .await;
        assert_eq!(first.0, StatusCode::ACCEPTED);
        let second = joch
            .send(
                Method::POST,
                &path,
                Some(keyed("zendesk.create_ticket", "k", json!({}))),
            )
            .await;
        assert_error(&second, StatusCode::CONFLICT, "idempotency_key_in_use");
        // A waiting caller gets the first call's outcome instead.
        let third = joch
            .post_call(keyed("zendesk.create_ticket", "k", json!({})))
            .await;
        assert_eq!(
            (third.0, third.1["status"]["phase"].as_str()),
            (StatusCode::OK, Some("Succeeded"))
        );
        assert_eq!(third.1["metadata"]["name"], first.1["metadata"]["name"]);
        assert_eq!(webhook.hits(), 1);
        let (_, list) = joch.get(&calls()).await;
        assert_eq!(list["items"].as_array().unwrap().len(), 1);
    }
);

crate::storetest!(keys_are_per_tool_and_lapse_after_their_window, |store| {
    let webhook = Webhook::start().await;
    let joch = store.joch().start().await;
    let url = format!("{}/echo", webhook.base);
    let mut short = rest_tool("short", &url, json!({"level": "external_write"}));
    short["spec"]["sideEffects"]["idempotencyWindowSeconds"] = json!(1);
    joch.create_tool(short).await;
    joch.create_tool(rest_tool("other", &url, json!({"level": "external_write"})))
        .await;

    assert_eq!(
        joch.post_call(keyed("short", "k", json!({}))).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        joch.post_call(keyed("other", "k", json!({}))).await.0,
        StatusCode::CREATED,
        "another tool, another key"
    );
    assert_eq!(
        joch.post_call(keyed("short", "k", json!({}))).await.0,
        StatusCode::OK
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        joch.post_call(keyed("short", "k", json!({}))).await.0,
        StatusCode::CREATED,
        "the window lapsed"
    );
    assert_eq!(webhook.hits(), 3);
});

#[tokio::test]
async fn a_tool_template_derives_the_key_from_the_input() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    let mut tool = rest_tool(
        "zendesk.create_ticket",
        &format!("{}/echo", webhook.base),
        json!({"level": "external_write"}),
    );
    tool["spec"]["sideEffects"]["idempotencyKeyTemplate"] =
        json!("zendesk-{{ input.subject | hash }}");
    joch.create_tool(tool).await;
    let (status, first) = joch
        .call(
            "zendesk.create_ticket",
            json!({"subject": "Refund", "body": "a"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let key = first["spec"]["sideEffects"]["idempotencyKey"]
        .as_str()
        .unwrap();
    assert!(key.starts_with("zendesk-") && key.len() == 40, "{key}");
    assert_eq!(
        joch.call(
            "zendesk.create_ticket",
            json!({"subject": "Refund", "body": "a"})
        )
        .await
        .0,
        StatusCode::OK
    );
    let other_body = joch
        .call(
            "zendesk.create_ticket",
            json!({"subject": "Refund", "body": "b"}),
        )
        .await;
    assert_error(
        &other_body,
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency_key_reused",
    );
    let missing = joch
        .call("zendesk.create_ticket", json!({"body": "no subject"}))
        .await;
    assert_error(&missing, StatusCode::BAD_REQUEST, "invalid_idempotency_key");
    assert_eq!(webhook.hits(), 1);
}

#[tokio::test]
async fn bad_keys_are_400() {
    let (webhook, joch) = start_with_tool(&TestStore::sqlite(), "echo").await;
    let long = joch
        .post_call(keyed("zendesk.create_ticket", &"k".repeat(256), json!({})))
        .await;
    assert_error(&long, StatusCode::BAD_REQUEST, "invalid_idempotency_key");
    let fine = joch
        .post_call(keyed("zendesk.create_ticket", &"k".repeat(255), json!({})))
        .await;
    assert_eq!(fine.0, StatusCode::CREATED);
    let differ = reqwest::Client::new()
        .post(format!("{}{}", joch.base, calls()))
        .header("Idempotency-Key", "header-key")
        .json(&keyed("zendesk.create_ticket", "body-key", json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(differ.status(), StatusCode::BAD_REQUEST);
    assert_eq!(webhook.hits(), 1);
}

crate::storetest!(the_webhook_receives_the_key, |store| {
    let webhook = Webhook::start().await;
    let joch = store.joch().start().await;
    joch.create_tool(rest_tool(
        "headers",
        &format!("{}/headers", webhook.base),
        json!({"level": "external_write"}),
    ))
    .await;
    let (_, call) = joch.post_call(keyed("headers", "key-77", json!({}))).await;
    assert_eq!(
        call["status"]["output"]["idempotency-key"], "key-77",
        "{call}"
    );
});

#[tokio::test]
async fn a_namespace_sets_the_window_for_tools_that_set_none() {
    let (webhook, joch) = start_with_tool(&TestStore::sqlite(), "echo").await;
    let (_, defaults) = joch.get(&format!("/v1/namespaces/{NS}")).await;
    assert_eq!(defaults["kind"], "Namespace");
    let settings = json!({"kind": "Namespace", "spec": {"idempotencyWindowSeconds": 1}});
    let (status, body) = joch
        .send(Method::PUT, &format!("/v1/namespaces/{NS}"), Some(settings))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let wrong = json!({"kind": "Namespace", "metadata": {"name": "other"}});
    assert_error(
        &joch
            .send(Method::PUT, &format!("/v1/namespaces/{NS}"), Some(wrong))
            .await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    );

    assert_eq!(
        joch.post_call(keyed("zendesk.create_ticket", "k", json!({})))
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(
        joch.post_call(keyed("zendesk.create_ticket", "k", json!({})))
            .await
            .0,
        StatusCode::OK
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        joch.post_call(keyed("zendesk.create_ticket", "k", json!({})))
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(webhook.hits(), 2);
}
