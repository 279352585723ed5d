//! What a 2026-07-28 client's answers mean (docs/mcp.md, "Elicitation
//! answers"): an answer to a URL-mode notice (a person decides where the
//! Approval is listed) never decides it, whatever it says, with or without
//! authentication; an answer to an `askUser` form decides once; `cancel`
//! ("dismissed without an explicit choice") rejects nothing.

use reqwest::Method;
use rmcp::ClientHandler;
use rmcp::model::{CallToolResponse, ClientCapabilities, ClientConfig, Implementation};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, rest_tool, wait_for_phase};
use crate::mcp_stateless::{approved_writes, stateless, ticket};

/// A client that declares elicitation (forms and URLs) and answers by hand.
#[derive(Clone)]
struct Elicits;

impl ClientHandler for Elicits {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::builder().enable_elicitation().build();
        capabilities.elicitation = serde_json::from_value(json!({"form": {}, "url": {}})).unwrap();
        ClientConfig::new(capabilities, Implementation::new("e2e-elicits", "1"))
    }
}

/// Calls `ticket(n)`: the question asked and the state to retry with.
async fn asked(client: &Client, n: u64) -> (Value, String) {
    match client.call_tool_once(ticket(n)).await.unwrap() {
        CallToolResponse::InputRequired(asked) => (
            serde_json::to_value(&asked.input_requests).unwrap(),
            asked.request_state.expect("a requestState"),
        ),
        other => panic!("not input_required: {other:?}"),
    }
}

/// Retries `ticket(n)` with `state`, answering the question with `answer`.
async fn answer(client: &Client, n: u64, state: &str, answer: Value) -> CallToolResponse {
    let responses = [("approval".to_owned(), answer)].into();
    let retry = ticket(n)
        .with_request_state(state.to_owned())
        .with_input_responses(responses);
    client.call_tool_once(retry).await.unwrap()
}

async fn phase_of_approval(joch: &Joch, state: &str) -> Value {
    let name = state.strip_prefix("toolcall/").unwrap();
    let (_, approval) = joch
        .get(&format!("/v1/namespaces/{NS}/approvals/{name}"))
        .await;
    approval["status"]["phase"].clone()
}

/// Every answer a client may give to a notice, and to a form.
fn answers() -> [(&'static str, Value); 4] {
    [
        (
            "accept",
            json!({"action": "accept", "content": {"approve": true}}),
        ),
        (
            "accept, no",
            json!({"action": "accept", "content": {"approve": false}}),
        ),
        ("decline", json!({"action": "decline"})),
        ("cancel", json!({"action": "cancel"})),
    ]
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, Elicits>;

/// Gives every answer to a notice, each to a call of its own (at once: a
/// retry that decides nothing waits for a decision before it answers);
/// returns the states, each retry having been answered `input_required`.
async fn answer_notices(client: &Client) -> Vec<String> {
    let each = answers()
        .into_iter()
        .enumerate()
        .map(|(n, (said, reply))| async move {
            let (question, state) = asked(client, n as u64).await;
            assert_eq!(question["approval"]["params"]["mode"], "url", "{question}");
            let again = answer(client, n as u64, &state, reply).await;
            assert!(
                matches!(again, CallToolResponse::InputRequired(_)),
                "{said}: {again:?}"
            );
            state
        });
    futures_util::future::join_all(each).await
}

/// Every answer to a notice leaves the approval pending and runs nothing.
async fn a_notice_is_answered_without_deciding(joch: &Joch, webhook: &Webhook, client: &Client) {
    for state in answer_notices(client).await {
        assert_eq!(phase_of_approval(joch, &state).await, "Pending", "{state}");
    }
    assert_eq!(webhook.recorded().len(), 0, "nothing ran");
}

#[tokio::test]
async fn no_answer_to_a_url_notice_decides_the_approval() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    approved_writes(&joch, &webhook, json!({})).await;
    let client = stateless(&joch, Elicits).await;
    a_notice_is_answered_without_deciding(&joch, &webhook, &client).await;
}

#[tokio::test]
async fn no_answer_to_a_url_notice_decides_the_approval_with_authentication() {
    use crate::auth::{ROOT, token};
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let webhook = Webhook::start().await;
    let joch = Joch::builder().env("JOCH_ADMIN_TOKEN", ROOT).start().await;
    let tool = rest_tool(
        "ticket.create",
        &format!("{}/record", webhook.base),
        json!({"level": "external_write"}),
    );
    let policy = json!({"apiVersion": "joch.dev/v1alpha1", "kind": "Policy", "metadata": {"name": "people-approve-writes"},
        "spec": {"version": "1", "rules": [{"when": {"tool.name": "ticket.create"}, "require": {"approval": "human"}}]}});
    for (plural, body) in [("tools", tool), ("policies", policy)] {
        let path = format!("/v1/namespaces/{NS}/{plural}");
        let (status, created) = joch.send_as(ROOT, Method::POST, &path, Some(body)).await;
        assert!(status.is_success(), "{created}");
    }
    let url = format!("{}/v1/namespaces/{NS}/mcp", joch.base);
    let secret = token(&joch, NS, "bot", "agent").await;
    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(secret);
    let discover = rmcp::ClientLifecycleMode::Discover {
        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
    };
    let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
    let client = rmcp::ClientServiceExt::serve_with_lifecycle(Elicits, transport, discover)
        .await
        .expect("server/discover");
    for state in answer_notices(&client).await {
        let name = state.strip_prefix("toolcall/").unwrap();
        let path = format!("/v1/namespaces/{NS}/approvals/{name}");
        let (_, approval) = joch.send_as(ROOT, Method::GET, &path, None).await;
        assert_eq!(approval["status"]["phase"], "Pending", "{approval}");
    }
    assert_eq!(webhook.recorded().len(), 0, "nothing ran");
}

#[tokio::test]
async fn an_ask_user_form_is_decided_by_its_answer_once_and_cancel_rejects_nothing() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    approved_writes(&joch, &webhook, json!({"askUser": true})).await;
    let client = stateless(&joch, Elicits).await;

    let (question, state) = asked(&client, 1).await;
    assert_eq!(question["approval"]["params"]["mode"], "form", "{question}");
    let dismissed = answer(&client, 1, &state, json!({"action": "cancel"})).await;
    assert!(
        matches!(dismissed, CallToolResponse::InputRequired(_)),
        "{dismissed:?}"
    );
    assert_eq!(phase_of_approval(&joch, &state).await, "Pending");

    let yes = json!({"action": "accept", "content": {"approve": true}});
    let done = answer(&client, 1, &state, yes).await;
    assert!(
        matches!(done, CallToolResponse::Complete(ref r) if r.is_error == Some(false)),
        "{done:?}"
    );
    let no = json!({"action": "decline"});
    let again = answer(&client, 1, &state, no).await;
    assert!(
        matches!(again, CallToolResponse::Complete(ref r) if r.is_error == Some(false)),
        "decided once: {again:?}"
    );
    assert_eq!(phase_of_approval(&joch, &state).await, "Approved");
    wait_for_phase(&joch, state.strip_prefix("toolcall/").unwrap(), "Succeeded").await;
    assert_eq!(webhook.recorded().len(), 1);

    let (_, declined) = asked(&client, 2).await;
    answer(&client, 2, &declined, json!({"action": "decline"})).await;
    assert_eq!(phase_of_approval(&joch, &declined).await, "Rejected");
}
