//! Declarative tools (seed 002) over HTTP: the seed's example verbatim,
//! each action, failures, bad definitions, and the call context.

use std::sync::Arc;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, assert_error};

/// Seed 002's example, as the ADR prints it (with its `rules: [...]` filled in).
fn save_meal() -> Value {
    json!({
        "name": "save_meal",
        "description": "Log a meal the user consumed",
        "parameters": [
            {"name": "meal_type", "type": "string", "enum": ["breakfast", "lunch", "dinner"]},
            {"name": "dishes", "type": "array", "required": true}
        ],
        "actions": [
            {"type": "validate", "rules": [{"expr": "size(params.dishes) > 0", "message": "Tell me at least one dish."}]},
            {"type": "context.set", "data": {"logged_meals[+]": "{{params}}"}},
            {"type": "webhook", "endpoint": "meal.log", "body": {"user_id": "{{user.id}}", "meal": "{{params}}"}}
        ],
        "on_success": [{"type": "respond", "message": "I've logged your {{params.meal_type}}!"}],
        "on_failure": [{"type": "respond", "message": "Sorry, I couldn't log that meal."}]
    })
}

async fn endpoint(joch: &Joch, name: &str, url: &str, extra: Value) {
    let mut spec = json!({"url": url});
    if let (Value::Object(spec), Value::Object(extra)) = (&mut spec, extra) {
        spec.extend(extra);
    }
    let manifest = json!({"kind": "Endpoint", "metadata": {"name": name}, "spec": spec});
    let (status, body) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/endpoints"),
            Some(manifest),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

async fn create(joch: &Joch, manifest: Value) -> (StatusCode, Value) {
    joch.send(
        Method::POST,
        &format!("/v1/namespaces/{NS}/tools"),
        Some(manifest),
    )
    .await
}

fn meal_call(run: &str, input: Value) -> Value {
    json!({"spec": {"toolRef": {"name": "save_meal"}, "executionRef": {"name": run}, "callerId": "user-42", "input": input}})
}

async fn setup() -> (Webhook, Joch) {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    endpoint(
        &joch,
        "meal.log",
        &format!("{}/record", webhook.base),
        json!({}),
    )
    .await;
    let (status, tool) = create(&joch, save_meal()).await;
    assert_eq!(status, StatusCode::CREATED, "{tool}");
    (webhook, joch)
}

async fn context(joch: &Joch, run: &str) -> Value {
    joch.get(&format!("/v1/namespaces/{NS}/callcontexts/{run}"))
        .await
        .1
}

#[tokio::test]
async fn the_seed_example_logs_two_meals_in_one_execution() {
    let (webhook, joch) = setup().await;
    let (_, tool) = joch
        .get(&format!("/v1/namespaces/{NS}/tools/save_meal"))
        .await;
    assert_eq!(tool["spec"]["backend"]["type"], "actions");
    assert_eq!(tool["spec"]["inputSchema"]["required"], json!(["dishes"]));

    let lunch = json!({"meal_type": "lunch", "dishes": ["soup", "bread"]});
    let dinner = json!({"meal_type": "dinner", "dishes": ["pasta"]});
    let (status, first) = joch.post_call(meal_call("day-1", lunch.clone())).await;
    assert_eq!(
        (status, first["status"]["phase"].as_str()),
        (StatusCode::CREATED, Some("Succeeded")),
        "{first}"
    );
    assert_eq!(
        first["status"]["output"]["response"],
        "I've logged your lunch!"
    );
    let (_, second) = joch.post_call(meal_call("day-1", dinner.clone())).await;
    assert_eq!(
        second["status"]["output"]["response"],
        "I've logged your dinner!"
    );

    assert_eq!(
        context(&joch, "day-1").await["data"]["workflow"]["logged_meals"],
        json!([lunch, dinner])
    );
    let bodies: Vec<Value> = webhook
        .recorded()
        .into_iter()
        .map(|r| r["body"].clone())
        .collect();
    assert_eq!(
        bodies,
        [
            json!({"user_id": "user-42", "meal": lunch}),
            json!({"user_id": "user-42", "meal": dinner})
        ]
    );
    let trace: Vec<&str> = first["status"]["output"]["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["type"].as_str().unwrap())
        .collect();
    assert_eq!(trace, ["validate", "context.set", "webhook", "respond"]);
    assert_eq!(
        first["status"]["output"]["contextChanges"][0]["path"],
        "workflow.logged_meals"
    );
    assert_eq!(first["status"]["toolVersion"], "1");
}

#[tokio::test]
async fn a_failed_validation_runs_on_failure_and_calls_nothing() {
    let (webhook, joch) = setup().await;
    for input in [
        json!({"meal_type": "brunch", "dishes": ["x"]}),
        json!({"meal_type": "lunch"}),
        json!({"meal_type": "lunch", "dishes": []}),
    ] {
        let (status, call) = joch.post_call(meal_call("day-2", input.clone())).await;
        assert_eq!(status, StatusCode::CREATED);
        assert_eq!(call["status"]["phase"], "Failed", "{input}");
        assert_eq!(call["status"]["error"]["code"], "action_failed");
        assert_eq!(
            call["status"]["output"]["response"], "Sorry, I couldn't log that meal.",
            "{input}"
        );
        let trace = &call["status"]["output"]["trace"];
        assert_eq!(
            (trace[0]["type"].as_str(), trace[0]["outcome"].as_str()),
            (Some("validate"), Some("failed"))
        );
    }
    let (_, empty) = joch
        .post_call(meal_call(
            "day-2",
            json!({"meal_type": "lunch", "dishes": []}),
        ))
        .await;
    assert_eq!(
        empty["status"]["output"]["error"],
        "Tell me at least one dish."
    );
    assert!(webhook.recorded().is_empty());
}

#[tokio::test]
async fn every_other_action_does_what_it_says() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("key");
    std::fs::write(&secret, "s3cret\n").unwrap();
    endpoint(
        &joch,
        "crm",
        &format!("{}/record", webhook.base),
        json!({"secretHeaders": {"x-api-key": {"file": secret}}}),
    )
    .await;
    endpoint(
        &joch,
        "broken",
        &format!("{}/fail", webhook.base),
        json!({}),
    )
    .await;
    let tool = json!({
        "name": "route_order",
        "parameters": [{"name": "size", "type": "string", "required": true}],
        "actions": [
            {"type": "flag.set", "flags": {"seen_order": true}},
            {"type": "webhook", "endpoint": "broken", "continue_on_error": true},
            {"type": "webhook", "endpoint": "crm", "body": {"size": "{{params.size}}"}},
            {"type": "context.set", "data": {"agents.sales.last_size": "{{params.size}}", "user.tier": "gold"}},
            {"type": "conditional", "if": "params.size == 'large'",
             "then": [{"type": "handoff", "agent": "bulk-sales", "reason": "large order"}],
             "else": [{"type": "respond", "message": "Order {{webhook.crm.response.stored}} noted for {{user.tier}}."}]},
            {"type": "context.get", "keys": ["flags.seen_order", "agents.sales.last_size"]}
        ]
    });
    assert_eq!(create(&joch, tool).await.0, StatusCode::CREATED);
    let call = |run: &str, size: &str| json!({"spec": {"toolRef": {"name": "route_order"}, "executionRef": {"name": run}, "input": {"size": size}}});

    let (_, small) = joch.post_call(call("shop-1", "small")).await;
    let out = &small["status"]["output"];
    assert_eq!(small["status"]["phase"], "Succeeded", "{small}");
    assert_eq!(out["response"], "Order 1 noted for gold.");
    assert_eq!(
        out["values"],
        json!({"flags.seen_order": true, "agents.sales.last_size": "small"})
    );
    assert!(
        out["trace"][1]["outcome"]
            .as_str()
            .unwrap()
            .starts_with("failed, continued")
    );
    assert_eq!(out["trace"][4]["outcome"], "took else");
    assert_eq!(
        webhook.recorded()[0],
        json!({"apiKey": "s3cret", "body": {"size": "small"}}),
        "the secret header was sent"
    );
    assert!(!small.to_string().contains("s3cret"), "and never recorded");
    let (_, stored_endpoint) = joch
        .get(&format!("/v1/namespaces/{NS}/endpoints/crm"))
        .await;
    assert!(!stored_endpoint.to_string().contains("s3cret"));

    let (_, large) = joch.post_call(call("shop-2", "large")).await;
    assert_eq!(
        large["status"]["output"]["handoff"],
        json!({"agent": "bulk-sales", "reason": "large order"})
    );
    let (_, run) = joch
        .get(&format!("/v1/namespaces/{NS}/executions/shop-2"))
        .await;
    assert_eq!(run["status"]["activeAgent"], "bulk-sales");
    let state = context(&joch, "shop-2").await["data"].clone();
    assert_eq!(state["flags"], json!({"seen_order": true}));
    assert_eq!(state["user"]["tier"], "gold");
}

#[tokio::test]
async fn a_failing_webhook_stops_the_chain_and_a_missing_path_names_itself() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    endpoint(
        &joch,
        "broken",
        &format!("{}/fail", webhook.base),
        json!({}),
    )
    .await;
    let tool = json!({
        "name": "t",
        "actions": [
            {"type": "webhook", "endpoint": "broken"},
            {"type": "flag.set", "flags": {"never": true}}
        ],
        "on_failure": [{"type": "respond", "message": "could not"}]
    });
    create(&joch, tool).await;
    let (_, call) = joch
        .post_call(
            json!({"spec": {"toolRef": {"name": "t"}, "executionRef": {"name": "r"}, "input": {}}}),
        )
        .await;
    assert_eq!(call["status"]["phase"], "Failed");
    assert_eq!(call["status"]["output"]["response"], "could not");
    assert!(
        call["status"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("HTTP 500")
    );
    assert_eq!(
        joch.get(&format!("/v1/namespaces/{NS}/callcontexts/r"))
            .await
            .0,
        StatusCode::NOT_FOUND,
        "nothing was written"
    );

    let missing =
        json!({"name": "m", "actions": [{"type": "respond", "message": "hi {{user.nickname}}"}]});
    create(&joch, missing).await;
    let (_, call) = joch
        .post_call(json!({"spec": {"toolRef": {"name": "m"}, "input": {}}}))
        .await;
    assert!(
        call["status"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("user.nickname"),
        "{call}"
    );
}

#[tokio::test]
async fn bad_definitions_are_refused_at_the_offending_action() {
    let (_webhook, joch) = setup().await;
    let bad = |actions: Value| json!({"name": "bad", "actions": actions});
    let cases = [
        (
            bad(json!([{"type": "respond", "message": "ok"}, {"type": "teleport"}])),
            "action [1]: unknown variant `teleport`",
        ),
        (
            bad(json!([{"type": "webhook", "endpoint": "nowhere"}])),
            "spec.backend.actions[0].endpoint",
        ),
        (
            bad(json!([{"type": "respond", "message": "{{ unclosed"}])),
            "spec.backend.actions[0].message",
        ),
        (
            bad(json!([{"type": "conditional", "if": "params.a >", "then": []}])),
            "spec.backend.actions[0].if",
        ),
        (
            bad(json!([{"type": "validate", "rules": [{"expr": "((("}]}])),
            "spec.backend.actions[0].rules[0].expr",
        ),
        (bad(json!([])), "spec.backend.actions"),
    ];
    for (manifest, field) in cases {
        let answer = create(&joch, manifest).await;
        assert_error(
            &answer,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        );
        let at = &answer.1["details"]["fields"][0];
        let said = format!(
            "{} {}",
            at["field"].as_str().unwrap(),
            at["message"].as_str().unwrap()
        );
        assert!(said.contains(field), "{field}: {}", answer.1);
    }
}

#[tokio::test]
async fn a_changed_tool_changes_the_next_call() {
    let (_webhook, joch) = setup().await;
    let mut v2 = save_meal();
    v2["on_success"] = json!([{"type": "respond", "message": "Logged {{params.meal_type}}, v2."}]);
    let (status, _) = joch
        .send(
            Method::PUT,
            &format!("/v1/namespaces/{NS}/tools/save_meal"),
            Some(v2),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, call) = joch
        .post_call(meal_call(
            "day-3",
            json!({"meal_type": "lunch", "dishes": ["x"]}),
        ))
        .await;
    assert_eq!(call["status"]["output"]["response"], "Logged lunch, v2.");
    assert_eq!(call["status"]["toolVersion"], "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_context_is_durable_isolated_and_loses_no_concurrent_append() {
    let webhook = Webhook::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("joch.db");
    let joch = Joch::builder().db(&db).start().await;
    endpoint(
        &joch,
        "meal.log",
        &format!("{}/record", webhook.base),
        json!({}),
    )
    .await;
    create(&joch, save_meal()).await;

    let joch_ref = Arc::new(joch);
    let calls: Vec<_> = (0..20)
        .map(|i| {
            let joch = Arc::clone(&joch_ref);
            tokio::spawn(async move {
                joch.post_call(meal_call(
                    "busy",
                    json!({"meal_type": "lunch", "dishes": [i]}),
                ))
                .await
            })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().1["status"]["phase"], "Succeeded");
    }
    joch_ref
        .post_call(meal_call(
            "other",
            json!({"meal_type": "dinner", "dishes": ["x"]}),
        ))
        .await;
    let mut joch = Arc::try_unwrap(joch_ref).ok().unwrap();
    joch.kill();

    let joch = Joch::builder().db(&db).start().await;
    let busy = context(&joch, "busy").await;
    let mut dishes: Vec<i64> = busy["data"]["workflow"]["logged_meals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["dishes"][0].as_i64().unwrap())
        .collect();
    dishes.sort();
    assert_eq!(
        dishes,
        (0..20).collect::<Vec<_>>(),
        "every concurrent append survived, and the restart"
    );
    assert_eq!(
        context(&joch, "other").await["data"]["workflow"]["logged_meals"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let (status, _) = joch.get("/v1/namespaces/elsewhere/callcontexts/busy").await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "namespaces never share a context"
    );
}

#[tokio::test]
async fn joch_apply_takes_the_seed_json_and_the_execution_names_the_user() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    endpoint(
        &joch,
        "meal.log",
        &format!("{}/record", webhook.base),
        json!({}),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("save_meal.json");
    std::fs::write(&file, save_meal().to_string()).unwrap();
    let out = joch.cli(&["apply", "-f", file.to_str().unwrap(), "-n", NS]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "tool/save_meal created"
    );

    let run = json!({"kind": "Execution", "metadata": {"name": "ann-day"}, "spec": {"user": {"id": "ann", "name": "Ann"}}});
    assert_eq!(
        joch.send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/executions"),
            Some(run)
        )
        .await
        .0,
        StatusCode::CREATED
    );
    let call = json!({"spec": {"toolRef": {"name": "save_meal"}, "executionRef": {"name": "ann-day"}, "input": {"meal_type": "breakfast", "dishes": ["eggs"]}}});
    let (_, done) = joch.post_call(call).await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{done}");
    assert_eq!(webhook.recorded()[0]["body"]["user_id"], "ann");
}

#[tokio::test]
async fn a_secret_header_never_lands_in_the_database_the_logs_or_metrics() {
    let webhook = Webhook::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("joch.db");
    let log = dir.path().join("joch.log");
    let secret = "sk-live-7f3a9c1e5b2d4f60";
    let joch = Joch::builder()
        .db(&db)
        .env("CRM_API_KEY", secret)
        .log("debug", &log)
        .start()
        .await;
    endpoint(
        &joch,
        "crm",
        &format!("{}/record", webhook.base),
        json!({"secretHeaders": {"x-api-key": {"env": "CRM_API_KEY"}}}),
    )
    .await;
    endpoint(
        &joch,
        "crm-down",
        &format!("{}/fail", webhook.base),
        json!({"secretHeaders": {"x-api-key": {"env": "CRM_API_KEY"}}}),
    )
    .await;
    let tool = |name: &str, endpoint: &str| {
        json!({"name": name, "parameters": [{"name": "n", "type": "number"}],
               "actions": [{"type": "webhook", "endpoint": endpoint, "body": {"n": "{{params.n}}"}}]})
    };
    create(&joch, tool("send", "crm")).await;
    create(&joch, tool("send_down", "crm-down")).await;
    let run = |tool: &str, n: u32| json!({"spec": {"toolRef": {"name": tool}, "executionRef": {"name": "run-s"}, "input": {"n": n}}});
    let (_, ok) = joch.post_call(run("send", 1)).await;
    assert_eq!(ok["status"]["phase"], "Succeeded", "{ok}");
    let (_, failed) = joch.post_call(run("send_down", 2)).await;
    assert_eq!(failed["status"]["phase"], "Failed", "{failed}");
    assert_eq!(
        webhook.recorded()[0]["apiKey"],
        secret,
        "the secret was sent"
    );

    let metrics = joch
        .http
        .get(format!("{}/metrics", joch.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (_, events) = joch
        .get(&format!("/v1/namespaces/{NS}/executions/run-s/events"))
        .await;
    drop(joch); // kill -9: whatever reached the files is there
    let mut stored = std::fs::read(&db).unwrap();
    for suffix in ["-wal", "-shm"] {
        if let Ok(more) = std::fs::read(format!("{}{suffix}", db.display())) {
            stored.extend(more);
        }
    }
    let logs = std::fs::read_to_string(&log).unwrap();
    let contains = |hay: &[u8]| hay.windows(secret.len()).any(|w| w == secret.as_bytes());
    assert!(!logs.is_empty(), "debug logs were written");
    assert!(!contains(&stored), "the database holds the secret");
    assert!(!contains(logs.as_bytes()), "the logs hold the secret");
    assert!(!contains(metrics.as_bytes()), "/metrics holds the secret");
    assert!(
        !contains(events.to_string().as_bytes()),
        "the events hold the secret"
    );
}
