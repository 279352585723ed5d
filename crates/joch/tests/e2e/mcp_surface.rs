//! An upstream's resources and prompts through joch's MCP front, governed
//! and recorded as calls; and an upstream's question during a call, relayed
//! to a client that can answer it and refused for one that cannot. The
//! upstream and the clients are the official Rust SDK, on loopback.

pub(crate) mod peers;

use reqwest::StatusCode;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

use crate::audit::chained;
use crate::harness::{Joch, NS};
use crate::mcp::{apply, server};
use crate::policies::apply_policy;
use crate::trust::metric;
use peers::{
    Docs, User, a_call_runs, answer, calls, connect, exchanges, newest_settled, start_docs,
    start_docs_with,
};

#[tokio::test]
async fn resource_reads_and_prompt_gets_are_governed_and_recorded_as_calls() {
    let url = start_docs().await;
    let joch = Joch::start().await;
    apply(&joch, server("docs", &url, json!({}))).await;
    apply_policy(&joch, "no-secrets", json!({"version": "1",
        "appliesTo": {"tools": ["docs:resource"]},
        "rules": [{"when": {"input.uri": "secret://*"}, "action": {"deny": {"reason": "secrets stay put"}}}]}))
    .await;
    // Tool results would be cut to handles and enveloped; reads and gets are not.
    let settings = json!({"spec": {"maxInlineBytes": 5, "outputEnvelope": "nonce"}});
    let (status, body) = joch
        .send(
            reqwest::Method::PUT,
            &format!("/v1/namespaces/{NS}"),
            Some(settings),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let client = connect(&joch, User::default()).await;

    let listed = client.list_all_resources().await.unwrap();
    let uris: Vec<_> = listed.iter().map(|r| r.uri.clone()).collect();
    assert_eq!(uris, ["docs.note://a", "docs.secret://b"]);
    let read = client
        .read_resource(ReadResourceRequestParams::new("docs.note://a"))
        .await
        .unwrap();
    let read = serde_json::to_value(read).unwrap();
    assert_eq!(
        read["contents"][0]["text"], "contents of note://a",
        "{read}"
    );
    assert_eq!(read["contents"][0]["uri"], "docs.note://a", "{read}");
    let denied = client
        .read_resource(ReadResourceRequestParams::new("docs.secret://b"))
        .await
        .unwrap_err();
    assert!(denied.to_string().contains("secrets stay put"), "{denied}");

    let prompts = client.list_all_prompts().await.unwrap();
    assert_eq!(prompts[0].name, "docs.greet");
    let got = client
        .get_prompt(GetPromptRequestParams::new("docs.greet"))
        .await
        .unwrap();
    let got = serde_json::to_value(got).unwrap();
    assert_eq!(
        got["messages"][0]["content"]["text"], "hello from greet",
        "{got}"
    );

    let recorded = calls(&joch).await;
    let find = |operation: &str, phase: &str| {
        recorded
            .iter()
            .any(|c| c["spec"]["operation"] == operation && c["status"]["phase"] == phase)
    };
    assert!(find("resources/read", "Succeeded"), "{recorded:?}");
    assert!(find("resources/read", "Denied"), "{recorded:?}");
    assert!(find("prompts/get", "Succeeded"), "{recorded:?}");
    let denied = recorded
        .iter()
        .find(|c| c["status"]["phase"] == "Denied")
        .unwrap();
    assert_eq!(denied["spec"]["toolRef"]["name"], "docs:resource");
    assert_eq!(denied["spec"]["input"]["uri"], "secret://b");

    // In the audit chain and the metrics like any call.
    let name = denied["metadata"]["name"].as_str().unwrap();
    assert_eq!(chained(&joch, name).await, ["Denied"]);
    let series =
        format!(r#"joch_tool_calls_total{{namespace="{NS}",tool="docs:resource",phase="Denied"}}"#);
    assert_eq!(metric(&joch, &series).await, Some(1.0), "{series}");

    // SEP-2164: a resource that is not there, upstream (which says so with
    // the older -32002) or at no server, is -32602 naming the URI asked for.
    for uri in ["docs.gone://x", "nobody://x"] {
        let missing = client
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
            .unwrap_err();
        let rmcp::service::ServiceError::McpError(e) = missing else {
            panic!("not an MCP error: {missing:?}")
        };
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{e:?}");
        assert_eq!(e.data.as_ref().unwrap()["uri"], uri, "{e:?}");
    }
}

#[tokio::test]
async fn an_upstreams_question_reaches_a_capable_client_and_is_refused_for_another() {
    let url = start_docs().await;
    let joch = Joch::start().await;
    apply(&joch, server("docs", &url, json!({}))).await;

    let user = User::declaring(json!({"form": {}}));
    let capable = connect(&joch, user.clone()).await;
    let result = capable
        .call_tool(CallToolRequestParams::new("docs.ask"))
        .await
        .unwrap();
    let text = serde_json::to_value(&result).unwrap()["content"][0]["text"].clone();
    assert_eq!(text, "answered Accept", "{result:?}");
    assert_eq!(*user.asked.lock().unwrap(), ["Proceed?"]);

    let incapable = connect(&joch, User::default()).await;
    let result = incapable
        .call_tool(CallToolRequestParams::new("docs.ask"))
        .await
        .unwrap();
    let text = serde_json::to_value(&result).unwrap()["content"][0]["text"].clone();
    assert!(
        text.as_str().unwrap_or_default().starts_with("refused"),
        "{result:?}"
    );

    // Each exchange is recorded on its call's timeline, refused or relayed.
    let exchanges = exchanges(&joch).await;
    let relayed: Vec<_> = exchanges.iter().map(|e| e["relayed"].clone()).collect();
    assert_eq!(exchanges.len(), 2, "{exchanges:?}");
    assert!(
        relayed.contains(&json!(true)) && relayed.contains(&json!(false)),
        "{exchanges:?}"
    );
    let refused = exchanges.iter().find(|e| e["relayed"] == false).unwrap();
    assert_eq!(refused["error"]["code"], "client_incapable", "{refused}");
    assert_eq!(refused["method"], "elicitation/create");
}

#[tokio::test]
async fn a_client_cancelling_a_call_cancels_it_upstream_and_the_record_says_so() {
    let docs = Docs::default();
    let url = start_docs_with(docs.clone()).await;
    let joch = Joch::start().await;
    apply(&joch, server("docs", &url, json!({}))).await;
    let client = connect(&joch, User::default()).await;
    let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
        CallToolRequestParams::new("docs.wait"),
    ));
    let handle = client
        .peer()
        .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
        .await
        .unwrap();
    // Once the call runs upstream, the client withdraws it.
    let running = a_call_runs(&joch).await;
    assert!(running, "the call never ran");
    let cancel =
        serde_json::from_value(json!({"requestId": handle.id, "reason": "changed my mind"}));
    client
        .peer()
        .notify_cancelled(cancel.unwrap())
        .await
        .unwrap();
    let settled = newest_settled(&joch).await;
    assert_eq!(settled["status"]["phase"], "Failed", "{settled}");
    assert_eq!(settled["status"]["error"]["code"], "cancelled", "{settled}");
    for _ in 0..50 {
        if docs.cancelled.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        docs.cancelled.load(std::sync::atomic::Ordering::SeqCst),
        "the upstream was not told"
    );
}

#[tokio::test]
async fn url_questions_reach_only_clients_that_take_them_and_withdrawn_ones_are_withdrawn() {
    let url = start_docs().await;
    let joch = Joch::start().await;
    apply(&joch, server("docs", &url, json!({}))).await;

    let form_only = connect(&joch, User::declaring(json!({"form": {}}))).await;
    assert!(
        answer(&form_only, "docs.ask_url")
            .await
            .starts_with("refused")
    );
    let pages = User::declaring(json!({"url": {}}));
    let takes_pages = connect(&joch, pages.clone()).await;
    assert_eq!(
        answer(&takes_pages, "docs.ask_url").await,
        "answered Accept"
    );
    assert_eq!(*pages.asked.lock().unwrap(), ["Open the page"]);

    // The upstream withdraws its question: the client is told.
    let user = User::declaring(json!({"form": {}}));
    let client = connect(&joch, user.clone()).await;
    assert_eq!(answer(&client, "docs.withdraw").await, "withdrawn");
    assert!(
        user.heard("withdrawn").await,
        "{:?}",
        user.asked.lock().unwrap()
    );
}

#[tokio::test]
async fn a_token_limited_to_some_tools_sees_a_servers_resources_only_if_it_may_read_them() {
    const ROOT: &str = "root-secret-for-surface-tests";
    let url = start_docs().await;
    let joch = Joch::builder().env("JOCH_ADMIN_TOKEN", ROOT).start().await;
    let (status, body) = joch
        .send_as(
            ROOT,
            reqwest::Method::POST,
            &format!("/v1/namespaces/{NS}/mcpservers"),
            Some(server("docs", &url, json!({}))),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let connect_as = |name: &'static str, names: Value| {
        let joch = &joch;
        async move {
            let (status, created) = joch
                .send_as(
                    ROOT,
                    reqwest::Method::POST,
                    &format!("/v1/namespaces/{NS}/tokens"),
                    Some(json!({"name": name, "role": "agent", "tools": {"names": names}})),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{created}");
            let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                format!("{}/v1/namespaces/{NS}/mcp", joch.base),
            )
            .auth_header(created["token"].as_str().unwrap().to_owned());
            User::default()
                .serve(StreamableHttpClientTransport::from_config(config))
                .await
                .unwrap()
        }
    };
    let tools_only = connect_as("tools-only", json!(["docs.*"])).await;
    assert!(tools_only.list_all_resources().await.unwrap().is_empty());
    let refused = tools_only
        .read_resource(ReadResourceRequestParams::new("docs.note://a"))
        .await;
    assert!(refused.is_err(), "{refused:?}");

    let reader = connect_as("reader", json!(["docs:resource"])).await;
    assert_eq!(reader.list_all_resources().await.unwrap().len(), 2);
    assert!(
        reader
            .read_resource(ReadResourceRequestParams::new("docs.note://a"))
            .await
            .is_ok()
    );
    assert!(
        reader.list_all_prompts().await.unwrap().is_empty(),
        "prompts are docs:prompt's"
    );
}

// `resources/subscribe` is the 2025-11-25 way, which the front serves.
#[allow(deprecated)]
#[tokio::test]
async fn resource_updates_reach_subscribed_sessions_and_list_changes_every_session_or_joch() {
    let url = start_docs().await;
    let joch = Joch::start().await;
    apply(&joch, server("docs", &url, json!({}))).await;
    let subscriber = User::default();
    let client = connect(&joch, subscriber.clone()).await;
    client
        .subscribe(rmcp::model::SubscribeRequestParams::new("docs.note://a"))
        .await
        .unwrap();
    let bystander = User::default();
    let other = connect(&joch, bystander.clone()).await;

    assert_eq!(answer(&other, "docs.touch").await, "touched");
    assert!(
        subscriber.heard("updated docs.note://a").await,
        "{:?}",
        subscriber.asked
    );
    assert!(
        subscriber.heard("prompts changed").await,
        "{:?}",
        subscriber.asked
    );
    assert!(
        bystander.heard("prompts changed").await,
        "{:?}",
        bystander.asked
    );
    assert!(
        !bystander
            .asked
            .lock()
            .unwrap()
            .iter()
            .any(|a| a.starts_with("updated"))
    );
    // The server said its tools changed: joch re-listed them.
    let mut listed = StatusCode::NOT_FOUND;
    for _ in 0..100 {
        (listed, _) = joch
            .get(&format!("/v1/namespaces/{NS}/tools/docs.late"))
            .await;
        if listed == StatusCode::OK {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(listed, StatusCode::OK, "the new tool was not adopted");
}

#[tokio::test]
async fn a_prompt_get_deferred_by_a_policy_answers_once_a_person_approves() {
    let url = start_docs().await;
    let joch = Joch::start().await;
    apply(&joch, server("docs", &url, json!({}))).await;
    apply_policy(
        &joch,
        "ask-first",
        json!({"version": "1",
        "appliesTo": {"tools": ["docs:prompt"]},
        "rules": [{"when": {"input.name": "gr*"}, "require": {"approval": "human"}}]}),
    )
    .await;
    let client = connect(&joch, User::default()).await;
    let getting = tokio::spawn(async move {
        client
            .get_prompt(GetPromptRequestParams::new("docs.greet"))
            .await
    });
    let mut waiting = None;
    for _ in 0..100 {
        waiting = calls(&joch)
            .await
            .into_iter()
            .find(|c| c["status"]["phase"] == "AwaitingApproval");
        if waiting.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let waiting = waiting.expect("the get waits for a person");
    assert_eq!(waiting["spec"]["operation"], "prompts/get");
    let name = waiting["metadata"]["name"].as_str().unwrap();
    // The Approval may be written a moment after the call.
    for _ in 0..100 {
        let (status, _) = joch
            .get(&format!("/v1/namespaces/{NS}/approvals/{name}"))
            .await;
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (status, body) = joch
        .send(
            reqwest::Method::POST,
            &format!("/v1/namespaces/{NS}/approvals/{name}/approve"),
            Some(json!({"approvedBy": "alice"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let got = serde_json::to_value(getting.await.unwrap().unwrap()).unwrap();
    assert_eq!(
        got["messages"][0]["content"]["text"], "hello from greet",
        "{got}"
    );
}
