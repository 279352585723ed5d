//! An agent cancels its own call, and no other, on every surface that
//! cancels: REST, MCP (`notifications/cancelled` for its `tools/call`) and
//! the library's remote gateway; the engine's gate decides on each.

use reqwest::{Method, StatusCode};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;

use crate::harness::NS;
use crate::rulebook::{ROOT, Setup, call_in, mcp_config, pending, refund_call, setup, token};

#[tokio::test]
async fn an_agent_cancels_its_own_call_and_no_other() {
    let s = setup().await;
    let maker = token(&s.joch, "bot-a", "agent", None).await;
    let other = token(&s.joch, "bot-b", "agent", None).await;
    let calls = format!("/v1/namespaces/{NS}/toolcalls?wait=false");
    let (status, body) = s
        .joch
        .send_as(&maker, Method::POST, &calls, Some(refund_call("own-1")))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    call_in(&s, "own-1", "AwaitingApproval").await;

    let cancel = format!("/v1/namespaces/{NS}/toolcalls/own-1/cancel");
    let refused = s.joch.send_as(&other, Method::POST, &cancel, None).await;
    crate::harness::assert_error(&refused, StatusCode::FORBIDDEN, "forbidden");
    call_in(&s, "own-1", "AwaitingApproval").await;

    let (status, cancelled) = s.joch.send_as(&maker, Method::POST, &cancel, None).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"]["phase"], "Failed", "{cancelled}");
    assert_eq!(cancelled["status"]["error"]["code"], "cancelled");
    let settled = call_in(&s, "own-1", "Failed").await;
    assert_eq!(settled["status"]["error"]["code"], "cancelled");

    // MCP: the maker withdraws its own `tools/call` (notifications/cancelled).
    let client = ()
        .serve(StreamableHttpClientTransport::from_config(mcp_config(
            &s, &maker,
        )))
        .await
        .unwrap();
    let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
        CallToolRequestParams::new("refund"),
    ));
    let handle = client
        .peer()
        .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
        .await
        .unwrap();
    let by_mcp = waiting_call(&s).await;
    let withdraw = json!({"requestId": handle.id, "reason": "changed my mind"});
    client
        .peer()
        .notify_cancelled(serde_json::from_value(withdraw).unwrap())
        .await
        .unwrap();
    let settled = call_in(&s, &by_mcp, "Failed").await;
    assert_eq!(settled["status"]["error"]["code"], "cancelled", "{settled}");

    // The library's remote gateway: another agent is refused, the maker cancels.
    use joch_tools::{RemoteGateway, ToolExecutor};
    let gateway = RemoteGateway::new(&s.joch.base, NS).with_token(&maker);
    let running = tokio::spawn({
        let gateway = gateway.clone();
        async move {
            gateway
                .execute_tool_call(&joch_tools::ToolCall::new("refund"))
                .await
        }
    });
    let by_library = waiting_call(&s).await;
    let stranger = RemoteGateway::new(&s.joch.base, NS).with_token(&other);
    match stranger.cancel(&by_library).await {
        Err(joch_tools::Error::Api { status, code, .. }) => {
            assert_eq!((status, code.as_str()), (403, "forbidden"));
        }
        other => panic!("another agent cancelled the call: {other:?}"),
    }
    let cancelled = gateway.cancel(&by_library).await.unwrap();
    assert_eq!(
        cancelled.status.phase,
        joch_core::Phase::Failed,
        "{cancelled:?}"
    );
    let _ = running.await.unwrap();
}

/// The call of the one pending approval.
async fn waiting_call(s: &Setup) -> String {
    let approval = pending(s).await;
    let path = format!("/v1/namespaces/{NS}/approvals/{approval}");
    let (_, approval) = s.joch.send_as(ROOT, Method::GET, &path, None).await;
    approval["spec"]["action"]["toolCallRef"]["name"]
        .as_str()
        .unwrap()
        .to_owned()
}
