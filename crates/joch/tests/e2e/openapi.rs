//! `/openapi.json` describes the routes the server really has.

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::harness::{Joch, NS};

#[tokio::test]
async fn every_documented_operation_is_routed() {
    let joch = Joch::start().await;
    let (status, doc) = joch.get("/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "{doc}");
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() > 30, "only {} paths", paths.len());

    let mut operations = 0;
    for (path, item) in paths {
        let concrete = path.replace("{ns}", NS).replace("{name}", "absent");
        for (method, operation) in item.as_object().unwrap() {
            let Ok(method) = Method::from_bytes(method.to_uppercase().as_bytes()) else {
                continue;
            };
            operations += 1;
            assert!(
                operation["responses"]["default"].is_object(),
                "{method} {path} documents no error answer"
            );
            // An empty object is a bad body for most operations; what matters
            // is that a handler, not the fallback, answered.
            let body = (method != Method::GET).then(|| serde_json::json!({}));
            let follow_free = concrete.replace("/events", "/events?after=0");
            let (status, answer) = joch.send(method.clone(), &follow_free, body).await;
            let code = answer["code"].as_str().unwrap_or_default();
            assert!(
                code != "route_not_found" && code != "method_not_allowed",
                "{method} {path} is documented but not routed: {status} {answer}"
            );
            assert!(
                !status.is_server_error(),
                "{method} {path}: {status} {answer}"
            );
        }
    }
    assert!(operations > 50, "only {operations} operations");
}

#[tokio::test]
async fn parameters_and_bodies_come_from_the_handlers() {
    let joch = Joch::start().await;
    let (_, doc) = joch.get("/openapi.json").await;
    let call = &doc["paths"]["/v1/namespaces/{ns}/toolcalls"]["post"];
    let names: Vec<&str> = call["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ns", "wait"]);
    let decision = &doc["paths"]["/v1/namespaces/{ns}/approvals/{name}/approve"]["post"]["requestBody"]
        ["content"]["application/json"]["schema"];
    let fields: Vec<&String> = decision["properties"].as_object().unwrap().keys().collect();
    for field in ["approvedBy", "rationale", "always"] {
        assert!(
            fields.iter().any(|f| *f == field),
            "{field} missing: {fields:?}"
        );
    }
    let list = &doc["paths"]["/v1/namespaces/{ns}/tools"]["get"]["parameters"];
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "labelSelector" && p["in"] == "query"),
        "{list}"
    );
    let error: &Value = &doc["components"]["schemas"]["Error"];
    assert_eq!(
        error["required"],
        serde_json::json!(["code", "message", "details"])
    );
}
