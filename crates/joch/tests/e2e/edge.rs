//! The edge (`server/src/edge.rs`): what a web page in the operator's
//! browser, or a DNS name rebound onto joch's address, could make a browser
//! send is refused on every route, in every mode.

use std::path::Path;

use reqwest::header::{CONTENT_TYPE, HOST, ORIGIN};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::auth::{ROOT, token};
use crate::harness::{Joch, NS};

/// An McpServer whose command leaves `marker` behind when it runs.
fn marking_server(name: &str, marker: &Path) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {"stdio": {"command": "/bin/sh", "args": ["-c", format!("touch {}", marker.display())]}}
    })
}

async fn raw(
    joch: &Joch,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, Value) {
    let mut request = joch.http.request(method, format!("{}{path}", joch.base));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let answer = request.body(body.to_owned()).send().await.unwrap();
    let status = answer.status();
    (status, answer.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_cross_site_page_cannot_create_anything_or_run_a_command() {
    let joch = Joch::start().await;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let servers = format!("/v1/namespaces/{NS}/mcpservers");
    let tools = format!("/v1/namespaces/{NS}/tools");
    let server = marking_server("evil", &marker).to_string();
    let tool = json!({"metadata": {"name": "evil.tool"}, "spec": {"inputSchema": {"type": "object"}, "backend": {"type": "noop"}}}).to_string();

    // What a page's fetch() or form sends without a preflight.
    let browser = [
        (ORIGIN.as_str(), "http://attacker.example"),
        ("sec-fetch-site", "cross-site"),
    ];
    let plain = [&browser[..], &[(CONTENT_TYPE.as_str(), "text/plain")]].concat();
    for (path, body) in [(&servers, &server), (&tools, &tool)] {
        let answer = raw(&joch, Method::POST, path, &plain, body).await;
        assert!(
            matches!(
                answer.0,
                StatusCode::UNSUPPORTED_MEDIA_TYPE | StatusCode::FORBIDDEN
            ),
            "{path}: {answer:?}"
        );
        // JSON from another site is refused for where it comes from.
        let json = [&browser[..], &[(CONTENT_TYPE.as_str(), "application/json")]].concat();
        let answer = raw(&joch, Method::POST, path, &json, body).await;
        assert_eq!(answer.0, StatusCode::FORBIDDEN, "{answer:?}");
        assert_eq!(answer.1["code"], "cross_site_request");
        // A type a form sends is refused whatever the origin.
        let form = [(CONTENT_TYPE.as_str(), "text/plain")];
        let answer = raw(&joch, Method::POST, path, &form, body).await;
        assert_eq!(answer.0, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{answer:?}");
        assert_eq!(answer.1["code"], "unsupported_media_type");
        assert!(
            answer.1["message"]
                .as_str()
                .unwrap()
                .contains("application/json")
        );
    }
    let (_, listed) = joch.get(&servers).await;
    assert_eq!(listed["items"], json!([]), "nothing was created");
    let (status, _) = joch.get(&format!("{tools}/evil.tool")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(!marker.exists(), "no command ran");

    // The same request from joch's own origin (the operator's CLI, its
    // console) goes through, and the command runs: the test can fail.
    let own = joch.base.clone();
    let same = [
        (ORIGIN.as_str(), own.as_str()),
        (CONTENT_TYPE.as_str(), "application/json"),
    ];
    let answer = raw(&joch, Method::POST, &servers, &same, &server).await;
    assert_eq!(answer.0, StatusCode::CREATED, "{answer:?}");
    for _ in 0..100 {
        if marker.exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        marker.exists(),
        "the operator's own request ran its command"
    );
}

#[tokio::test]
async fn an_allowed_origin_may_write() {
    let joch = Joch::builder()
        .args(&["--allowed-origin", "https://ops.example"])
        .start()
        .await;
    let tool = json!({"metadata": {"name": "ops.tool"}, "spec": {"inputSchema": {"type": "object"}, "backend": {"type": "noop"}}}).to_string();
    let path = format!("/v1/namespaces/{NS}/tools");
    let json = (CONTENT_TYPE.as_str(), "application/json");
    let answer = raw(
        &joch,
        Method::POST,
        &path,
        &[(ORIGIN.as_str(), "https://ops.example"), json],
        &tool,
    )
    .await;
    assert_eq!(answer.0, StatusCode::CREATED, "{answer:?}");
    let answer = raw(
        &joch,
        Method::POST,
        &path,
        &[(ORIGIN.as_str(), "https://other.example"), json],
        &tool,
    )
    .await;
    assert_eq!(answer.0, StatusCode::FORBIDDEN, "{answer:?}");
}

#[tokio::test]
async fn a_rebound_host_name_is_refused_on_every_route() {
    let joch = Joch::start().await;
    let port = joch.base.rsplit(':').next().unwrap().to_owned();
    let json = (CONTENT_TYPE.as_str(), "application/json");
    let routes = [
        (Method::GET, format!("/v1/namespaces/{NS}/toolcalls"), ""),
        (Method::POST, format!("/v1/namespaces/{NS}/tools"), "{}"),
        (
            Method::POST,
            "/mcp".to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        ),
        (Method::POST, "/v1/hooks/aos".to_owned(), "{}"),
        (Method::GET, "/ui/inbox".to_owned(), ""),
        (Method::GET, "/oauth/callback?state=x&code=y".to_owned(), ""),
        (Method::GET, "/healthz".to_owned(), ""),
    ];
    let rebound = format!("attacker.example:{port}");
    for (method, path, body) in &routes {
        let answer = raw(
            &joch,
            method.clone(),
            path,
            &[(HOST.as_str(), rebound.as_str()), json],
            body,
        )
        .await;
        assert_eq!(
            answer.0,
            StatusCode::MISDIRECTED_REQUEST,
            "{method} {path}: {answer:?}"
        );
        assert_eq!(answer.1["code"], "misdirected_request");
    }
    // The loopback names are joch's own.
    let own = format!("localhost:{port}");
    let answer = raw(
        &joch,
        Method::GET,
        "/ui/inbox",
        &[(HOST.as_str(), own.as_str())],
        "",
    )
    .await;
    assert_eq!(answer.0, StatusCode::OK);

    let listed = Joch::builder()
        .args(&["--allowed-host", "joch.internal"])
        .start()
        .await;
    let port = listed.base.rsplit(':').next().unwrap().to_owned();
    let named = format!("joch.internal:{port}");
    let answer = raw(
        &listed,
        Method::GET,
        "/healthz",
        &[(HOST.as_str(), named.as_str())],
        "",
    )
    .await;
    assert_eq!(answer.0, StatusCode::OK, "{answer:?}");
}

#[tokio::test]
async fn console_pages_refuse_frames() {
    let joch = Joch::start().await;
    let answer = joch
        .http
        .get(format!("{}/ui/inbox", joch.base))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let headers = answer.headers();
    assert_eq!(headers["content-security-policy"], "frame-ancestors 'none'");
    assert_eq!(headers["x-frame-options"], "DENY");
}

#[tokio::test]
async fn metrics_are_the_operator_s() {
    let joch = Joch::builder().env("JOCH_ADMIN_TOKEN", ROOT).start().await;
    let admin = token(&joch, NS, "ops", "admin").await;
    let tool = json!({"metadata": {"name": "noop"}, "spec": {"inputSchema": {"type": "object"}, "backend": {"type": "noop"}}});
    let (status, _) = joch
        .send_as(
            ROOT,
            Method::POST,
            &format!("/v1/namespaces/{NS}/tools"),
            Some(tool),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let call = json!({"spec": {"toolRef": {"name": "noop"}, "input": {}}});
    let (status, _) = joch
        .send_as(
            ROOT,
            Method::POST,
            &format!("/v1/namespaces/{NS}/toolcalls"),
            Some(call),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = joch.get("/metrics").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = joch.send_as(&admin, Method::GET, "/metrics", None).await;
    assert!(
        matches!(status, StatusCode::FORBIDDEN | StatusCode::NOT_FOUND),
        "{body}"
    );
    let answer = joch
        .http
        .get(format!("{}/metrics", joch.base))
        .bearer_auth(ROOT)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let text = answer.text().await.unwrap();
    assert!(text.contains("joch_tool_calls_total"), "{text}");
}
