//! Every bad input gets the right status and a structured `code`, and
//! leaves nothing behind.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::{Joch, NS, assert_error, rest_tool};

/// Method, path, content type, body, expected status, expected code.
type Case<'a> = (Method, String, &'a str, Vec<u8>, StatusCode, &'a str);

#[tokio::test]
async fn each_bad_request_has_its_status_and_code() {
    let joch = Joch::start().await;
    let tools = format!("/v1/namespaces/{NS}/tools");
    let calls = format!("/v1/namespaces/{NS}/toolcalls");
    let good = rest_tool("t", "http://127.0.0.1:1/x", json!({}));
    joch.create_tool(good.clone()).await;

    let with = |patch: &dyn Fn(&mut serde_json::Value)| {
        let mut t = good.clone();
        patch(&mut t);
        t
    };
    let cases: Vec<Case> = vec![
        (
            Method::POST,
            tools.clone(),
            "application/json",
            b"{\"metadata\": ".to_vec(),
            StatusCode::BAD_REQUEST,
            "malformed_body",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/yaml",
            b"a: [".to_vec(),
            StatusCode::BAD_REQUEST,
            "malformed_body",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/json",
            b"[1]".to_vec(),
            StatusCode::BAD_REQUEST,
            "malformed_body",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/json",
            with(&|t| t["apiVersion"] = json!("v1")).to_string().into(),
            StatusCode::BAD_REQUEST,
            "invalid_api_version",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/json",
            with(&|t| t["kind"] = json!("Pod")).to_string().into(),
            StatusCode::BAD_REQUEST,
            "invalid_kind",
        ),
        (
            Method::POST,
            calls.clone(),
            "application/json",
            good.to_string().into(),
            StatusCode::BAD_REQUEST,
            "invalid_kind",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/json",
            with(&|t| t["metadata"]["name"] = json!("no spaces"))
                .to_string()
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/json",
            with(&|t| t["metadata"]["name"] = json!(""))
                .to_string()
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/json",
            with(&|t| t["metadata"]["name"] = json!("x".repeat(300)))
                .to_string()
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/json",
            with(&|t| t["metadata"]["namespace"] = json!("other"))
                .to_string()
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/json",
            with(&|t| t["spec"]["inputSchema"] = json!({"type": "not-a-type"}))
                .to_string()
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/json",
            with(&|t| t["spec"]["sideEffects"]["level"] = json!("dangerous"))
                .to_string()
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/json",
            with(&|t| t["spec"]["backend"] = json!({"type": "carrier_pigeon"}))
                .to_string()
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/json",
            with(&|t| t["spec"]["backend"]["endpoint"]["url"] = json!("file:///etc/passwd"))
                .to_string()
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/json",
            with(&|t| t["spec"]["unknownField"] = json!(1))
                .to_string()
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        ),
        (
            Method::POST,
            tools.clone(),
            "application/json",
            good.to_string().into(),
            StatusCode::CONFLICT,
            "already_exists",
        ),
        (
            Method::POST,
            calls.clone(),
            "application/json",
            json!({"spec": {"toolRef": {"name": "nope"}}})
                .to_string()
                .into(),
            StatusCode::NOT_FOUND,
            "tool_not_found",
        ),
        (
            Method::POST,
            calls.clone(),
            "application/json",
            json!({"metadata": {"name": "bad id!"}, "spec": {"toolRef": {"name": "t"}}})
                .to_string()
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        ),
        (
            Method::POST,
            calls.clone(),
            "application/json",
            json!({"spec": {}}).to_string().into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
        ),
        (
            Method::POST,
            calls.clone(),
            "application/json",
            json!({"spec": {"toolRef": {"name": "t"}}})
                .to_string()
                .into(),
            StatusCode::CREATED,
            "",
        ),
        (
            Method::POST,
            format!("{calls}?wait=maybe"),
            "application/json",
            json!({"spec": {"toolRef": {"name": "t"}}})
                .to_string()
                .into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/namespaces/Bad_NS/tools".to_owned(),
            "application/json",
            good.to_string().into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{calls}?limit=abc"),
            "application/json",
            vec![],
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{calls}?limit=0"),
            "application/json",
            vec![],
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{calls}?phase=Done"),
            "application/json",
            vec![],
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{calls}?continue=zzz"),
            "application/json",
            vec![],
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{calls}?labelSelector=a%20b"),
            "application/json",
            vec![],
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{calls}?colour=blue"),
            "application/json",
            vec![],
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::GET,
            format!("{calls}/missing"),
            "application/json",
            vec![],
            StatusCode::NOT_FOUND,
            "toolcall_not_found",
        ),
        (
            Method::GET,
            "/v2/whatever".to_owned(),
            "application/json",
            vec![],
            StatusCode::NOT_FOUND,
            "route_not_found",
        ),
        (
            Method::PATCH,
            tools.clone(),
            "application/json",
            vec![],
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
    ];
    for (method, path, content_type, body, status, code) in cases {
        let answer = joch
            .send_raw(method.clone(), &path, content_type, body.clone())
            .await;
        if status.is_success() {
            assert_eq!(answer.0, status, "{method} {path}: {}", answer.1);
            continue;
        }
        assert_error(&answer, status, code);
    }

    let (_, list) = joch.get(&tools).await;
    assert_eq!(
        list["items"].as_array().unwrap().len(),
        1,
        "no bad request left a tool behind: {list}"
    );
    let (_, calls_list) = joch.get(&calls).await;
    assert_eq!(
        calls_list["items"].as_array().unwrap().len(),
        1,
        "only the one good call is recorded"
    );
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_the_limit_is_configurable() {
    let joch = Joch::builder()
        .args(&["--max-body-bytes", "2048"])
        .start()
        .await;
    let mut tool = rest_tool("big", "http://127.0.0.1:1/x", json!({}));
    tool["spec"]["description"] = json!("x".repeat(4096));
    let answer = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/tools"),
            Some(tool.clone()),
        )
        .await;
    assert_error(&answer, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    tool["spec"]["description"] = json!("small");
    assert_eq!(
        joch.send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/tools"),
            Some(tool)
        )
        .await
        .0,
        StatusCode::CREATED
    );
}
