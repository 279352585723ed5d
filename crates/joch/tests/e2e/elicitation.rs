//! MCP elicitation: joch's MCP endpoint asks a client that takes it for
//! the value a `userInput` policy wants, and for the decision on a call
//! whose policy says `askUser`. The official Python client is exercised in
//! tests/interop/test_mcp.py.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, Implementation,
};
use rmcp::service::{RequestContext, RoleClient};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ErrorData, ServiceExt};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, rest_tool};
use crate::policies::apply_policy;

/// An MCP client that takes elicitation: its user gives the code 4242 when
/// asked for a value and says no to any approval. Keeps what it was asked.
#[derive(Clone, Default)]
struct User {
    asked: Arc<std::sync::Mutex<Vec<Value>>>,
}

impl ClientHandler for User {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("e2e-user", "1"),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let asked = serde_json::to_value(&request).unwrap();
        let answer = match asked["requestedSchema"]["required"][0].as_str() {
            Some("approve") => json!({"approve": false, "reason": "not today"}),
            _ => json!({"confirmation": 4242}),
        };
        self.asked.lock().unwrap().push(asked);
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(answer))
    }
}

#[tokio::test]
async fn a_client_that_takes_elicitation_is_asked_for_values_and_opted_in_approvals() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    let mut wire = rest_tool(
        "wire",
        &format!("{}/echo", webhook.base),
        json!({"level": "financial"}),
    );
    wire["spec"]["inputSchema"] =
        json!({"type": "object", "properties": {"confirmation": {"type": "integer"}}});
    joch.create_tool(wire).await;
    let send = rest_tool(
        "send",
        &format!("{}/echo", webhook.base),
        json!({"level": "external_write"}),
    );
    joch.create_tool(send).await;
    apply_policy(&joch, "ask", json!({"version": "1", "rules": [
        {"when": {"tool.name": "wire"}, "require": {"userInput": {"targetArg": "confirmation", "prompt": "Type the code"}}},
        {"when": {"tool.name": "send"}, "require": {"approval": "human", "approvalRouting": {"askUser": true}}, "approverReason": "sends mail"}
    ]}))
    .await;

    let user = User::default();
    let url = format!("{}/v1/namespaces/{NS}/mcp", joch.base);
    let client = user
        .clone()
        .serve(StreamableHttpClientTransport::from_uri(url))
        .await
        .unwrap();
    let args = |v: Value| v.as_object().cloned().unwrap();
    let wired = client
        .call_tool(CallToolRequestParams::new("wire").with_arguments(args(json!({"amount": 10}))))
        .await
        .unwrap();
    let sent = client
        .call_tool(CallToolRequestParams::new("send").with_arguments(args(json!({"to": "x"}))))
        .await
        .unwrap();
    client.cancel().await.unwrap();

    assert_eq!(wired.is_error, Some(false), "{wired:?}");
    assert_eq!(
        wired.structured_content,
        Some(json!({"echo": {"amount": 10, "confirmation": 4242}}))
    );
    assert_eq!(sent.is_error, Some(true), "{sent:?}");
    let denial: Value = serde_json::from_str(&sent.content[0].as_text().unwrap().text).unwrap();
    assert_eq!(denial["error"], "Denied by approver");
    assert_eq!(denial["reason"], "not today");
    assert_eq!(webhook.hits(), 1, "only the call given a value ran");

    let asked = user.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    // The value is asked with the type the tool declares.
    assert_eq!(
        asked[0]["requestedSchema"]["properties"]["confirmation"]["type"],
        "integer"
    );
    assert!(
        asked[1]["message"].as_str().unwrap().contains("sends mail"),
        "{}",
        asked[1]
    );
    for (name, phase) in [
        (call_of(&joch, "wire").await, "Approved"),
        (
            denial["tool_call_id"].as_str().unwrap().to_owned(),
            "Rejected",
        ),
    ] {
        let (_, approval) = joch
            .get(&format!("/v1/namespaces/{NS}/approvals/{name}"))
            .await;
        assert_eq!(approval["status"]["phase"], phase, "{approval}");
        assert_eq!(approval["status"]["decidedBy"], "mcp-elicitation:e2e-user");
    }
}

/// The name of the one call of `tool`.
async fn call_of(joch: &Joch, tool: &str) -> String {
    let (_, calls) = joch
        .get(&format!("/v1/namespaces/{NS}/toolcalls?tool={tool}"))
        .await;
    calls["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned()
}
