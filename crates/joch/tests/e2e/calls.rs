//! The call path end to end: record, run, settle, read back, restart.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, rest_tool};

fn echo_tool(webhook: &Webhook, name: &str, level: &str) -> Value {
    rest_tool(
        name,
        &format!("{}/echo", webhook.base),
        json!({"level": level}),
    )
}

crate::storetest!(
    a_call_is_recorded_and_reads_back_identically_after_kill_and_restart,
    |store| {
        let webhook = Webhook::start().await;
        let mut joch = store.joch().start().await;
        joch.create_tool(echo_tool(
            &webhook,
            "zendesk.create_ticket",
            "external_write",
        ))
        .await;

        let (status, call) = joch
            .post_call(json!({
                "metadata": {"name": "call_abc123", "labels": {"team": "support"}},
                "spec": {
                    "toolRef": {"name": "zendesk.create_ticket"},
                    "executionRef": {"name": "exec-20260510-001"},
                    "agentRef": {"name": "support-triage"},
                    "input": {"subject": "Refund request", "priority": "high"},
                    "sideEffects": {"idempotencyKey": "zendesk-create-12345"},
                    "hookContext": {"aosTurnId": "turn-1", "aosStepId": "step-1"},
                    "callerId": "user-42",
                    "skillNames": ["refunds"],
                    "context": {"name": "repo"}
                }
            }))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{call}");
        assert_eq!(
            call["metadata"]["name"], "call_abc123",
            "a caller's id is kept verbatim"
        );
        assert_eq!(call["status"]["phase"], "Succeeded");
        assert_eq!(
            call["status"]["output"],
            json!({"echo": {"subject": "Refund request", "priority": "high"}})
        );
        assert_eq!(call["status"]["attempts"], 1);
        assert_eq!(
            call["spec"]["sideEffects"],
            json!({"level": "external_write", "idempotent": false, "idempotencyKey": "zendesk-create-12345"})
        );
        assert_eq!(call["status"]["checksum"].as_str().map(str::len), Some(64));
        for field in ["startedAt", "completedAt", "latencyMs"] {
            assert!(
                !call["status"][field].is_null(),
                "status.{field} missing: {call}"
            );
        }
        assert_eq!(webhook.hits(), 1);

        let before = joch.get_call("call_abc123").await;
        assert_eq!(before, call, "the answer is the record");
        joch.kill();
        let joch = store.joch().start().await;
        assert_eq!(joch.get_call("call_abc123").await, before);
        assert_eq!(webhook.hits(), 1, "a restart runs nothing");
    }
);

#[tokio::test]
async fn a_json_string_input_is_recorded_as_the_object_with_the_same_checksum() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    joch.create_tool(echo_tool(&webhook, "echo", "read_only"))
        .await;
    let (_, as_object) = joch.call("echo", json!({"b": [1, 2], "a": "x"})).await;
    let (status, as_string) = joch.call("echo", json!(r#"{"a":"x","b":[1,2]}"#)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(as_string["spec"]["input"], json!({"a": "x", "b": [1, 2]}));
    assert_eq!(
        as_string["status"]["checksum"],
        as_object["status"]["checksum"]
    );
    assert_ne!(as_string["metadata"]["name"], as_object["metadata"]["name"]);
}

crate::storetest!(minted_ids_are_unique_time_ordered_uuids, |store| {
    let webhook = Webhook::start().await;
    let joch = store.joch().start().await;
    joch.create_tool(echo_tool(&webhook, "echo", "read_only"))
        .await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        let (_, call) = joch.call("echo", json!({})).await;
        let id = call["metadata"]["name"].as_str().unwrap().to_owned();
        assert_eq!(id.len(), 36, "{id}");
        assert_eq!(id.as_bytes()[14], b'7', "UUID v7: {id}");
        ids.push(id);
    }
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, ids, "unique, and sorted as they were minted");
});

crate::storetest!(
    bad_arguments_are_recorded_as_failed_calls_that_never_run,
    |store| {
        let webhook = Webhook::start().await;
        let joch = store.joch().start().await;
        let mut tool = echo_tool(&webhook, "strict", "external_write");
        tool["spec"]["inputSchema"] =
            json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}});
        joch.create_tool(tool).await;

        for (input, code) in [
            (json!({"n": "seven"}), "input_schema_violation"),
            (json!({}), "input_schema_violation"),
            (json!([1, 2]), "invalid_arguments"),
            (json!("{not json"), "invalid_arguments"),
        ] {
            let (status, call) = joch.call("strict", input.clone()).await;
            assert_eq!(status, StatusCode::CREATED, "{call}");
            assert_eq!(call["status"]["phase"], "Failed", "{input}");
            assert_eq!(call["status"]["error"]["code"], code, "{input}");
            assert_eq!(call["status"]["attempts"], 0);
            assert_eq!(
                call["spec"]["input"], input,
                "the record keeps what was sent"
            );
            let stored = joch
                .get_call(call["metadata"]["name"].as_str().unwrap())
                .await;
            assert_eq!(stored, call);
        }
        let (_, violation) = joch.call("strict", json!({"n": "seven"})).await;
        assert_eq!(
            violation["status"]["error"]["details"]["violations"][0]["path"],
            "/n"
        );
        assert_eq!(webhook.hits(), 0);
    }
);

#[tokio::test]
async fn webhook_failures_are_failed_calls_with_the_reason_recorded() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    let cases = [
        (
            "fails",
            format!("{}/fail", webhook.base),
            "backend_http_status",
        ),
        (
            "text",
            format!("{}/text", webhook.base),
            "backend_invalid_response",
        ),
        ("slow", format!("{}/slow", webhook.base), "backend_timeout"),
        (
            "refused",
            "http://127.0.0.1:1/nothing".to_owned(),
            "backend_unreachable",
        ),
    ];
    for (name, url, code) in cases {
        joch.create_tool(rest_tool(name, &url, json!({"level": "external_write"})))
            .await;
        let (status, call) = joch.call(name, json!({"x": 1})).await;
        assert_eq!(status, StatusCode::CREATED, "{call}");
        assert_eq!(call["status"]["phase"], "Failed", "{name}: {call}");
        assert_eq!(call["status"]["error"]["code"], code, "{name}: {call}");
        assert_eq!(call["status"]["attempts"], 1);
        assert_eq!(
            joch.get_call(call["metadata"]["name"].as_str().unwrap())
                .await,
            call
        );
    }
    let (_, failed) = joch.call("fails", json!({})).await;
    assert_eq!(
        failed["status"]["error"]["details"],
        json!({"status": 500, "body": "database exploded"})
    );
}

#[tokio::test]
async fn an_output_that_breaks_the_output_schema_fails_the_call_but_is_kept() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    let mut tool = echo_tool(&webhook, "typed", "read_only");
    tool["spec"]["outputSchema"] = json!({"type": "object", "required": ["ticketId"]});
    joch.create_tool(tool).await;
    let (_, call) = joch.call("typed", json!({"a": 1})).await;
    assert_eq!(call["status"]["phase"], "Failed");
    assert_eq!(call["status"]["error"]["code"], "output_schema_violation");
    assert_eq!(call["status"]["output"], json!({"echo": {"a": 1}}));
}

crate::storetest!(
    wait_false_answers_202_with_the_pending_record_and_settles_in_the_background,
    |store| {
        let webhook = Webhook::start().await;
        let joch = store.joch().start().await;
        joch.create_tool(echo_tool(&webhook, "echo", "external_write"))
            .await;
        let (status, pending) = joch
            .send(
                reqwest::Method::POST,
                &format!("/v1/namespaces/{NS}/toolcalls?wait=false"),
                Some(json!({"spec": {"toolRef": {"name": "echo"}, "input": {"q": 1}}})),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{pending}");
        assert_eq!(pending["status"]["phase"], "Pending");
        let name = pending["metadata"]["name"].as_str().unwrap().to_owned();
        let mut settled = Value::Null;
        for _ in 0..100 {
            settled = joch.get_call(&name).await;
            if settled["status"]["phase"] == "Succeeded" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(settled["status"]["phase"], "Succeeded", "{settled}");
        assert_eq!(settled["status"]["output"], json!({"echo": {"q": 1}}));
    }
);

crate::storetest!(a_reused_call_id_is_refused_and_runs_nothing, |store| {
    let webhook = Webhook::start().await;
    let joch = store.joch().start().await;
    // A read-only call is written only once it settles, yet a taken name
    // is refused before it runs too.
    for (n, level) in ["external_write", "read_only"].into_iter().enumerate() {
        let tool = format!("echo-{n}");
        joch.create_tool(echo_tool(&webhook, &tool, level)).await;
        let call = json!({"metadata": {"name": format!("call_{n}")},
            "spec": {"toolRef": {"name": tool}, "input": {}}});
        assert_eq!(joch.post_call(call.clone()).await.0, StatusCode::CREATED);
        let again = joch.post_call(call).await;
        crate::harness::assert_error(&again, StatusCode::CONFLICT, "already_exists");
        assert_eq!(webhook.hits(), n + 1, "{level}");
    }
});

#[tokio::test]
async fn observability_keeps_secrets_out_of_the_record_but_the_caller_gets_the_result() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    let mut tool = echo_tool(&webhook, "login", "privileged");
    tool["spec"]["observability"] =
        json!({"logResult": false, "redactFields": ["password", "card.number"]});
    joch.create_tool(tool).await;
    let input =
        json!({"user": "ann", "password": "hunter2", "card": {"number": "4111", "brand": "visa"}});
    let (_, answer) = joch.call("login", input.clone()).await;
    assert_eq!(
        answer["status"]["output"],
        json!({"echo": input}),
        "the caller gets the full output"
    );
    let record = joch
        .get_call(answer["metadata"]["name"].as_str().unwrap())
        .await;
    assert_eq!(
        record["spec"]["input"],
        json!({"user": "ann", "password": "[REDACTED]", "card": {"number": "[REDACTED]", "brand": "visa"}})
    );
    assert_eq!(record["status"]["output"], "[REDACTED]");
    assert!(!record.to_string().contains("hunter2"));
}

#[tokio::test]
async fn the_next_call_uses_a_replaced_tool_and_records_its_version() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    joch.create_tool(rest_tool(
        "moving",
        "http://127.0.0.1:1/old",
        json!({"level": "read_only"}),
    ))
    .await;
    let (_, first) = joch.call("moving", json!({})).await;
    assert_eq!(
        (
            first["status"]["phase"].as_str(),
            first["status"]["toolVersion"].as_str()
        ),
        (Some("Failed"), Some("1"))
    );
    let (status, _) = joch
        .send(
            reqwest::Method::PUT,
            &format!("/v1/namespaces/{NS}/tools/moving"),
            Some(echo_tool(&webhook, "moving", "read_only")),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, second) = joch.call("moving", json!({})).await;
    assert_eq!(
        (
            second["status"]["phase"].as_str(),
            second["status"]["toolVersion"].as_str()
        ),
        (Some("Succeeded"), Some("2"))
    );
}

#[tokio::test]
async fn a_traceparent_header_links_the_record_to_the_callers_trace() {
    let joch = Joch::start().await;
    joch.create_tool(json!({
        "metadata": {"name": "nothing"},
        "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
    }))
    .await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let post = |header: &'static str| {
        joch.http
            .post(format!("{}/v1/namespaces/{NS}/toolcalls", joch.base))
            .header("traceparent", header)
            .json(&json!({"spec": {"toolRef": {"name": "nothing"}}}))
            .send()
    };
    let kept: Value = post(traceparent).await.unwrap().json().await.unwrap();
    assert_eq!(kept["spec"]["traceparent"], traceparent);
    // An invalid header is ignored, as W3C Trace Context asks.
    let ignored: Value = post("00-nonsense").await.unwrap().json().await.unwrap();
    assert_eq!(ignored["status"]["phase"], "Succeeded");
    assert!(ignored["spec"].get("traceparent").is_none(), "{ignored}");
    // One in the body must be well formed.
    let (status, body) = joch
        .post_call(json!({"spec": {"toolRef": {"name": "nothing"}, "traceparent": "nope"}}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
}

#[tokio::test]
async fn cloud_metadata_and_link_local_addresses_are_never_called() {
    let joch = Joch::start().await;
    for (name, url) in [
        ("metadata", "http://169.254.169.254/latest/meta-data/iam/"),
        ("link-local-v6", "http://[fe80::1]:8080/hook"),
    ] {
        joch.create_tool(rest_tool(name, url, json!({"level": "read_only"})))
            .await;
        // Refused before any connection is attempted: nothing leaves the host.
        let (_, call) = joch.call(name, json!({})).await;
        assert_eq!(call["status"]["phase"], "Failed", "{call}");
        assert_eq!(call["status"]["error"]["code"], "outbound_forbidden");
        assert_eq!(call["status"]["attempts"], 1);
    }
}

#[tokio::test]
async fn a_namespace_allow_list_bounds_where_tools_may_call() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    joch.create_tool(echo_tool(&webhook, "echo", "read_only"))
        .await;
    let settings = |hosts: Value| json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Namespace", "spec": {"outbound": {"allowedHosts": hosts}}});
    let path = format!("/v1/namespaces/{NS}");
    let (status, body) = joch
        .send(
            reqwest::Method::PUT,
            &path,
            Some(settings(json!(["*.example.com"]))),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let (_, refused) = joch.call("echo", json!({"n": 1})).await;
    assert_eq!(refused["status"]["phase"], "Failed", "{refused}");
    assert_eq!(refused["status"]["error"]["code"], "outbound_not_allowed");
    assert_eq!(webhook.hits(), 0, "nothing was sent");

    joch.send(
        reqwest::Method::PUT,
        &path,
        Some(settings(json!(["127.0.0.1"]))),
    )
    .await;
    let (_, allowed) = joch.call("echo", json!({"n": 2})).await;
    assert_eq!(allowed["status"]["phase"], "Succeeded", "{allowed}");
    assert_eq!(webhook.hits(), 1);
}

crate::storetest!(
    rate_limits_answer_429_with_retry_after_and_record_the_decision,
    |store| {
        let joch = store.joch().start().await;
        joch.create_tool(json!({
        "metadata": {"name": "nothing"},
        "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
    }))
    .await;
        let limits = json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Namespace", "spec": {"rateLimits": [
            {"name": "per-agent", "per": "agent", "callsPerMinute": 6, "burst": 2}
        ]}});
        let (status, body) = joch
            .send(
                reqwest::Method::PUT,
                &format!("/v1/namespaces/{NS}"),
                Some(limits),
            )
            .await;
        assert!(status.is_success(), "{body}");
        let by = |agent: &str, n: u32| {
            let call = json!({"spec": {"toolRef": {"name": "nothing"}, "agentRef": {"name": agent}, "input": {"n": n}}});
            joch.http
                .post(format!("{}/v1/namespaces/{NS}/toolcalls", joch.base))
                .json(&call)
                .send()
        };
        assert_eq!(by("a", 1).await.unwrap().status(), StatusCode::CREATED);
        assert_eq!(by("a", 2).await.unwrap().status(), StatusCode::CREATED);
        let limited = by("a", 3).await.unwrap();
        assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry: u64 = limited.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=10).contains(&retry), "{retry}");
        let record: Value = limited.json().await.unwrap();
        assert_eq!(record["status"]["phase"], "Denied");
        assert_eq!(record["status"]["error"]["code"], "rate_limited");
        assert_eq!(
            record["status"]["hookDecisions"][0]["policyId"],
            "ratelimit/per-agent"
        );
        // Another agent has its own allowance.
        assert_eq!(by("b", 4).await.unwrap().status(), StatusCode::CREATED);
    }
);

crate::storetest!(a_daily_quota_is_a_rate_limit_over_a_day, |store| {
    let joch = store.joch().start().await;
    joch.create_tool(json!({
        "metadata": {"name": "nothing"},
        "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
    }))
    .await;
    let settings = |limits: Value| json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Namespace", "spec": {"rateLimits": limits}});
    let path = format!("/v1/namespaces/{NS}");
    let both =
        settings(json!([{"name": "x", "per": "namespace", "callsPerMinute": 1, "callsPerDay": 1}]));
    let (status, body) = joch.send(reqwest::Method::PUT, &path, Some(both)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let quota = settings(json!([{"name": "daily", "per": "namespace", "callsPerDay": 2}]));
    let (status, body) = joch.send(reqwest::Method::PUT, &path, Some(quota)).await;
    assert!(status.is_success(), "{body}");
    assert_eq!(
        joch.call("nothing", json!({"n": 1})).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        joch.call("nothing", json!({"n": 2})).await.0,
        StatusCode::CREATED
    );
    let (status, over) = joch.call("nothing", json!({"n": 3})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{over}");
    let wait = over["status"]["error"]["details"]["retryAfterSeconds"]
        .as_u64()
        .unwrap();
    assert!(wait > 3_600, "the next call is hours away: {wait}");
});

#[tokio::test]
async fn a_redirect_to_another_host_is_not_followed() {
    let elsewhere = Webhook::start().await;
    let target = format!("{}/echo", elsewhere.base);
    let redirector = axum::Router::new().route(
        "/moved",
        axum::routing::post(move || {
            let target = target.clone();
            async move { axum::response::Redirect::temporary(&target) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/moved", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, redirector).await.unwrap() });
    let joch = Joch::start().await;
    joch.create_tool(rest_tool("moved", &url, json!({"level": "read_only"})))
        .await;
    let (_, call) = joch.call("moved", json!({})).await;
    assert_eq!(call["status"]["phase"], "Failed", "{call}");
    assert_eq!(elsewhere.hits(), 0, "the redirect was not followed");
}

/// A call needing no durable intent is written once, settled; one that runs
/// past the intent grace is visible as Running first; a write is written
/// twice (Running, synced before its side effect, then settled); a call
/// claiming a key is written at admission (Pending, Running, settled).
#[tokio::test]
async fn calls_that_need_no_intent_are_written_once_unless_they_run_long() {
    let webhook = Webhook::start().await;
    let joch = Joch::builder()
        .args(&["--intent-grace-ms", "100"])
        .start()
        .await;
    joch.create_tool(echo_tool(&webhook, "read", "read_only"))
        .await;
    joch.create_tool(echo_tool(&webhook, "write", "external_write"))
        .await;
    joch.create_tool(rest_tool(
        "slow-read",
        &format!("{}/slow-echo", webhook.base),
        json!({"level": "read_only"}),
    ))
    .await;
    let versions = |call: &Value| {
        (
            call["status"]["phase"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            call["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    };

    let (_, read) = joch.call("read", json!({"q": 1})).await;
    assert_eq!(versions(&read), ("Succeeded".into(), "1".into()));
    let (_, write) = joch.call("write", json!({"q": 1})).await;
    assert_eq!(versions(&write), ("Succeeded".into(), "2".into()));
    let (_, keyed) = joch
        .post_call(
            json!({"spec": {"toolRef": {"name": "read"}, "input": {"q": 2},
            "sideEffects": {"idempotencyKey": "k-1"}}}),
        )
        .await;
    assert_eq!(versions(&keyed), ("Succeeded".into(), "3".into()));
    // A write that will not run (its arguments are not an object) needs no intent either.
    let (_, refused) = joch.call("write", json!("not an object")).await;
    assert_eq!(
        versions(&refused),
        ("Failed".into(), "1".into()),
        "{refused}"
    );

    // The slow call (300 ms) shows as Running while it runs.
    let running = format!("/v1/namespaces/{NS}/toolcalls?phase=Running");
    let watch = async {
        for _ in 0..100 {
            let (_, list) = joch.get(&running).await;
            if let Some(call) = list["items"].as_array().and_then(|items| items.first()) {
                return Some(call.clone());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    };
    let ((_, slow), seen) = tokio::join!(joch.call("slow-read", json!({})), watch);
    let seen = seen.expect("the slow call was listed as Running while it ran");
    assert_eq!(seen["metadata"]["name"], slow["metadata"]["name"]);
    assert_eq!(seen["metadata"]["resourceVersion"], "1");
    assert_eq!(versions(&slow), ("Succeeded".into(), "2".into()));
    let (_, stored) = joch
        .get(&format!(
            "/v1/namespaces/{NS}/toolcalls/{}",
            read["metadata"]["name"].as_str().unwrap_or_default()
        ))
        .await;
    assert_eq!(stored["status"]["output"], read["status"]["output"]);
}
