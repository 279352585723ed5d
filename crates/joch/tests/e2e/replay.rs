//! Replay: free for reads, overridden for writes, or straight from the record.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, assert_error, rest_tool};

async fn replay(joch: &Joch, name: &str, body: Value) -> (StatusCode, Value) {
    joch.send(
        Method::POST,
        &format!("/v1/namespaces/{NS}/toolcalls/{name}/replay"),
        Some(body),
    )
    .await
}

async fn setup() -> (Webhook, Joch) {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    let url = format!("{}/echo", webhook.base);
    joch.create_tool(rest_tool("read", &url, json!({"level": "read_only"})))
        .await;
    joch.create_tool(rest_tool("write", &url, json!({"level": "external_write"})))
        .await;
    (webhook, joch)
}

fn name(call: &Value) -> &str {
    call["metadata"]["name"].as_str().unwrap()
}

#[tokio::test]
async fn a_read_replays_freely_as_a_new_linked_call() {
    let (webhook, joch) = setup().await;
    let (_, original) = joch.call("read", json!({"q": 1})).await;
    let (status, again) = replay(&joch, name(&original), json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    assert_ne!(name(&again), name(&original));
    assert_eq!(again["spec"]["replayOf"]["name"], name(&original));
    assert_eq!(again["status"]["output"], original["status"]["output"]);
    assert_eq!(again["status"]["checksum"], original["status"]["checksum"]);
    assert_eq!(webhook.hits(), 2, "it ran again");
}

#[tokio::test]
async fn a_write_replays_only_with_override() {
    let (webhook, joch) = setup().await;
    let (_, original) = joch.call("write", json!({"q": 1})).await;
    let refused = replay(&joch, name(&original), json!({})).await;
    assert_error(&refused, StatusCode::CONFLICT, "replay_not_allowed");
    assert_eq!(webhook.hits(), 1);
    let (status, again) = replay(&joch, name(&original), json!({"override": true})).await;
    assert_eq!(
        (status, again["status"]["phase"].as_str()),
        (StatusCode::CREATED, Some("Succeeded"))
    );
    assert_eq!(webhook.hits(), 2);

    let cli = joch.cli(&["replay", name(&original), "-n", NS]);
    assert!(!cli.status.success());
    assert!(String::from_utf8_lossy(&cli.stderr).contains("replay_not_allowed"));
}

#[tokio::test]
async fn a_record_replay_returns_the_recorded_outcome_and_runs_nothing() {
    let (webhook, joch) = setup().await;
    let (_, original) = joch.call("write", json!({"q": 1})).await;
    let (status, copy) = replay(&joch, name(&original), json!({"mode": "record"})).await;
    assert_eq!(status, StatusCode::CREATED, "{copy}");
    assert_eq!(copy["status"]["output"], original["status"]["output"]);
    assert_eq!(copy["status"]["phase"], "Succeeded");
    assert_eq!(copy["status"]["attempts"], 0);
    assert_eq!(copy["spec"]["replayOf"]["name"], name(&original));
    assert_eq!(joch.get_call(name(&copy)).await, copy);
    assert_eq!(webhook.hits(), 1, "nothing ran");
}

#[tokio::test]
async fn calls_whose_input_was_withheld_or_that_do_not_exist_cannot_replay() {
    let (_webhook, joch) = setup().await;
    let mut secret = rest_tool(
        "secret",
        "http://127.0.0.1:1/x",
        json!({"level": "read_only"}),
    );
    secret["spec"]["observability"] = json!({"redactFields": ["password"]});
    joch.create_tool(secret).await;
    let (_, call) = joch.call("secret", json!({"password": "p"})).await;
    assert_eq!(call["status"]["inputWithheld"], true);
    assert_error(
        &replay(&joch, name(&call), json!({})).await,
        StatusCode::CONFLICT,
        "replay_not_possible",
    );
    assert_error(
        &replay(&joch, "nope", json!({})).await,
        StatusCode::NOT_FOUND,
        "toolcall_not_found",
    );
    assert_error(
        &replay(&joch, name(&call), json!({"mode": "sideways"})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_resource",
    );
}

#[tokio::test]
async fn a_policy_sees_replays_and_overrides_and_can_refuse_them() {
    let (webhook, joch) = setup().await;
    crate::policies::apply_policy(&joch, "no-forced-replays", json!({"version": "1", "rules": [
        {"when": {"replay": true, "override": true}, "action": {"deny": {"reason": "writes are not replayed here"}}}
    ]}))
    .await;
    let (_, original) = joch.call("write", json!({"q": 1})).await;
    let (status, again) = replay(&joch, name(&original), json!({"override": true})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(again["status"]["phase"], "Denied", "{again}");
    assert_eq!(
        again["status"]["error"]["message"],
        "writes are not replayed here"
    );
    assert_eq!(
        again["metadata"]["annotations"]["joch.dev/replay-override"],
        "true"
    );
    let (_, read_again) = replay(
        &joch,
        name(&joch.call("read", json!({})).await.1),
        json!({}),
    )
    .await;
    assert_eq!(
        read_again["status"]["phase"], "Succeeded",
        "a free replay is not an override"
    );
    assert_eq!(webhook.hits(), 3);
}
