//! An upstream of 2026-07-28 (the official Rust SDK) asks during a call
//! through `input_required` (SEP-2322), and the client of joch's front is
//! of 2026-07-28 too: the questions reach the client as its call's own
//! `input_required`, the upstream's `requestState` stays on the ToolCall,
//! and the client's answers go back upstream once, whichever replica and
//! however many retries carry them. Several questions, several rounds, a
//! tampered state refused, a capability the client did not declare
//! answered `-32021` and recorded, a round nobody answers ended at its
//! deadline. On a session, an upstream's `roots/list` is relayed to a
//! client that declared roots, and refused for another.

use std::sync::{Arc, Mutex};

use reqwest::StatusCode;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, InputRequiredResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};

use crate::harness::{Joch, NS};
use crate::mcp::{apply, server};
use crate::mcp_surface::peers::serve;
use crate::replicas::{fresh_database, replica};

/// A server whose tool `survey` asks, in round 1, a name (elicitation)
/// and a summary (sampling), in round 2 the client's roots, then answers;
/// it notes each `requestState` it is sent.
#[derive(Clone, Default)]
struct Surveyor {
    states: Arc<Mutex<Vec<String>>>,
}

impl ServerHandler for Surveyor {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(crate::harness::one_read_only_tool("survey"))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let state = request.request_state.clone().unwrap_or_default();
        self.states.lock().unwrap().push(state.clone());
        let answers = request.input_responses.clone().unwrap_or_default();
        let asked = match state.as_str() {
            "" => json!({
                "name": {"method": "elicitation/create", "params": {"mode": "form",
                    "message": "Your name?", "requestedSchema": {"type": "object",
                    "properties": {"name": {"type": "string"}}}}},
                "summary": {"method": "sampling/createMessage", "params": {"maxTokens": 10,
                    "messages": [{"role": "user", "content": {"type": "text", "text": "Sum up"}}]}},
            }),
            "round-1" => json!({"roots": {"method": "roots/list"}}),
            "round-2" => {
                let roots = answers["roots"]["roots"].as_array().map_or(0, Vec::len);
                let text = format!("{} roots", roots);
                return Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into());
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("not a state of mine: {other}"),
                    None,
                ));
            }
        };
        let next = if state.is_empty() {
            "round-1"
        } else {
            let name = &answers["name"]["content"]["name"];
            assert_eq!(name, "ada", "round 1's answers: {answers:?}");
            "round-2"
        };
        let mut result =
            InputRequiredResult::from_input_requests(serde_json::from_value(asked).unwrap());
        result.request_state = Some(next.to_owned());
        Ok(result.into())
    }
}

impl Surveyor {
    fn sent(&self, state: &str) -> usize {
        self.states
            .lock()
            .unwrap()
            .iter()
            .filter(|s| *s == state)
            .count()
    }
}

/// What a client that declares everything answers each question.
fn answers(asked: &Value) -> Value {
    let mut answers = json!({});
    for (key, question) in asked.as_object().unwrap() {
        answers[key] = match question["method"].as_str().unwrap() {
            "elicitation/create" => json!({"action": "accept", "content": {"name": "ada"}}),
            "sampling/createMessage" => json!({"role": "assistant", "model": "m",
                "content": {"type": "text", "text": "short"}}),
            _ => json!({"roots": [{"uri": "file:///work", "name": "work"}]}),
        };
    }
    answers
}

/// A `tools/call` of 2026-07-28 declaring `capabilities`, retrying with
/// `state` and `responses` if given: the HTTP status and the JSON-RPC answer.
async fn survey(
    joch: &Joch,
    capabilities: Value,
    state: Option<&str>,
    responses: Option<Value>,
) -> (StatusCode, Value) {
    let mut params = json!({"name": "up.survey", "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }});
    if let Some(state) = state {
        params["requestState"] = json!(state);
    }
    if let Some(responses) = responses {
        params["inputResponses"] = responses;
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let response = joch
        .http
        .post(format!("{}/v1/namespaces/{NS}/mcp", joch.base))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "up.survey")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    // JSON, or an event stream whose last event is the answer.
    let answer = serde_json::from_str(&text).unwrap_or_else(|_| {
        let last = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .next_back();
        serde_json::from_str(last.unwrap_or("null").trim()).unwrap()
    });
    (status, answer)
}

const EVERYTHING: &str = r#"{"elicitation": {}, "sampling": {}, "roots": {}}"#;

fn everything() -> Value {
    serde_json::from_str(EVERYTHING).unwrap()
}

/// The ToolCall a joch `requestState` names.
async fn call_of(joch: &Joch, state: &str) -> Value {
    let name = state
        .trim_start_matches("input/")
        .rsplit_once('/')
        .unwrap()
        .0;
    let (status, call) = joch
        .get(&format!("/v1/namespaces/{NS}/toolcalls/{name}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{call}");
    call
}

#[tokio::test]
async fn an_upstreams_rounds_reach_a_stateless_client_and_its_answers_go_back_once() {
    let surveyor = Surveyor::default();
    let joch = Joch::start().await;
    apply(
        &joch,
        server("up", &serve(surveyor.clone()).await, json!({})),
    )
    .await;

    // Round 1: two questions, as the upstream asked them.
    let (_, first) = survey(&joch, everything(), None, None).await;
    let asked = &first["result"];
    assert_eq!(asked["resultType"], "input_required", "{first}");
    let keys: Vec<_> = asked["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["name", "summary"], "{first}");
    let state = asked["requestState"].as_str().unwrap().to_owned();
    assert!(
        state.starts_with("input/") && state.ends_with("/1"),
        "{state}"
    );
    let record = call_of(&joch, &state).await;
    assert_eq!(record["status"]["phase"], "Running", "{record}");
    assert_eq!(record["status"]["inputRequired"]["round"], 1, "{record}");
    assert_eq!(
        record["status"]["inputRequired"]["state"], "round-1",
        "{record}"
    );

    // Two retries with the answers at once: the upstream hears them once,
    // and both are asked round 2.
    let responses = answers(&asked["inputRequests"]);
    let (a, b) = tokio::join!(
        survey(&joch, everything(), Some(&state), Some(responses.clone())),
        survey(&joch, everything(), Some(&state), Some(responses.clone())),
    );
    assert_eq!(surveyor.sent("round-1"), 1, "{:?}", surveyor.states);
    for (_, retried) in [&a, &b] {
        let again = &retried["result"];
        assert_eq!(again["resultType"], "input_required", "{retried}");
        assert!(again["inputRequests"]["roots"].is_object(), "{retried}");
        assert!(
            again["requestState"].as_str().unwrap().ends_with("/2"),
            "{retried}"
        );
    }
    let state = a.1["result"]["requestState"].as_str().unwrap().to_owned();

    // A state the client changed names no round.
    let (_, tampered) = survey(
        &joch,
        everything(),
        Some(&format!("{state}-TAMPERED")),
        Some(json!({})),
    )
    .await;
    assert_eq!(tampered["error"]["code"], -32602, "{tampered}");

    // Round 2 answered: the result, from the upstream's round-2 state.
    let roots = answers(&a.1["result"]["inputRequests"]);
    let (_, done) = survey(&joch, everything(), Some(&state), Some(roots.clone())).await;
    assert_eq!(done["result"]["content"][0]["text"], "1 roots", "{done}");
    // Once settled, a retry reads the outcome; nothing is sent again.
    let (_, again) = survey(&joch, everything(), Some(&state), Some(roots)).await;
    assert_eq!(again["result"]["content"][0]["text"], "1 roots", "{again}");
    assert_eq!(surveyor.sent("round-2"), 1, "{:?}", surveyor.states);
    let record = call_of(&joch, &state).await;
    assert_eq!(record["status"]["phase"], "Succeeded", "{record}");
    assert_eq!(record["status"]["inputRequired"]["round"], 2, "{record}");
}

#[tokio::test]
async fn a_question_the_client_did_not_declare_is_answered_32021_and_recorded() {
    let surveyor = Surveyor::default();
    let joch = Joch::start().await;
    apply(
        &joch,
        server("up", &serve(surveyor.clone()).await, json!({})),
    )
    .await;
    // Elicitation only: the upstream's sampling question cannot go to it.
    let (status, refused) = survey(&joch, json!({"elicitation": {}}), None, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    let required = &refused["error"]["data"]["requiredCapabilities"];
    assert!(required["sampling"].is_object(), "{refused}");
    let (_, calls) = joch
        .get(&format!("/v1/namespaces/{NS}/toolcalls?tool=up.survey"))
        .await;
    let call = &calls["items"][0];
    assert_eq!(call["status"]["phase"], "Failed", "{calls}");
    assert_eq!(
        call["status"]["error"]["code"], "client_incapable",
        "{calls}"
    );
}

#[tokio::test]
async fn a_round_asked_on_one_replica_is_answered_on_another() {
    let Some(store) = fresh_database("mcp_rounds_replicas").await else {
        return;
    };
    let surveyor = Surveyor::default();
    let (a, b) = tokio::join!(replica(&store), replica(&store));
    apply(&a, server("up", &serve(surveyor.clone()).await, json!({}))).await;
    let (_, first) = survey(&a, everything(), None, None).await;
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let responses = answers(&first["result"]["inputRequests"]);
    let (_, second) = survey(&b, everything(), Some(&state), Some(responses)).await;
    let state = second["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    let roots = answers(&second["result"]["inputRequests"]);
    let (_, done) = survey(&a, everything(), Some(&state), Some(roots)).await;
    assert_eq!(done["result"]["content"][0]["text"], "1 roots", "{done}");
    assert_eq!(surveyor.sent("round-1"), 1, "{:?}", surveyor.states);
}

#[tokio::test]
async fn a_round_nobody_answers_ends_the_call_at_the_deadline() {
    let surveyor = Surveyor::default();
    let joch = Joch::builder()
        .args(&["--hook-result-timeout-seconds", "1"])
        .start()
        .await;
    apply(
        &joch,
        server("up", &serve(surveyor.clone()).await, json!({})),
    )
    .await;
    let (_, first) = survey(&joch, everything(), None, None).await;
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let mut record = call_of(&joch, &state).await;
    for _ in 0..50 {
        if record["status"]["phase"] != "Running" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        record = call_of(&joch, &state).await;
    }
    assert_eq!(record["status"]["phase"], "Failed", "{record}");
    assert_eq!(
        record["status"]["error"]["code"], "input_abandoned",
        "{record}"
    );
    // A late retry reads the outcome; the upstream hears nothing more.
    let responses = answers(&first["result"]["inputRequests"]);
    let (_, late) = survey(&joch, everything(), Some(&state), Some(responses)).await;
    assert_eq!(late["result"]["isError"], true, "{late}");
    assert_eq!(surveyor.sent("round-1"), 0, "{:?}", surveyor.states);
}

// Roots are deprecated by SEP-2577 (protocol 2026-07-28), not in 2025-11-25.
#[allow(deprecated)]
mod roots {
    use super::*;

    /// A server of 2025-11-25 whose tool `where` asks its client's roots on
    /// the session, during the call, and answers how many it got.
    #[derive(Clone, Default)]
    struct Rooted;

    impl ServerHandler for Rooted {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _: Option<PaginatedRequestParams>,
            _: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            Ok(crate::harness::one_read_only_tool("where"))
        }

        async fn call_tool(
            &self,
            _: CallToolRequestParams,
            context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            let text = match context.peer.list_roots().await {
                Ok(listed) => format!("{} roots", listed.roots.len()),
                Err(e) => format!("no roots: {e}"),
            };
            Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
        }
    }

    /// A session client whose workspace is one root, if it declares roots.
    #[derive(Clone)]
    struct Workspace {
        declares: bool,
    }

    impl rmcp::ClientHandler for Workspace {
        fn get_info(&self) -> rmcp::model::ClientConfig {
            let capabilities = match self.declares {
                true => serde_json::from_value(json!({"roots": {}})).unwrap(),
                false => rmcp::model::ClientCapabilities::default(),
            };
            rmcp::model::ClientConfig::new(
                capabilities,
                rmcp::model::Implementation::new("ws", "1"),
            )
        }

        async fn list_roots(
            &self,
            _: RequestContext<rmcp::RoleClient>,
        ) -> Result<rmcp::model::ListRootsResult, ErrorData> {
            let root = rmcp::model::Root::new("file:///work");
            Ok(rmcp::model::ListRootsResult::new(vec![root]))
        }
    }

    #[tokio::test]
    async fn a_sessions_roots_are_relayed_only_if_its_client_declared_them() {
        use rmcp::ServiceExt;
        let joch = Joch::start().await;
        let url = serve(Rooted).await;
        apply(&joch, server("up", &url, json!({"protocol": "legacy"}))).await;
        let mcp = format!("{}/v1/namespaces/{NS}/mcp", joch.base);
        let mut told = Vec::new();
        for declares in [true, false] {
            let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(mcp.clone());
            let client = Workspace { declares }.serve(transport).await.unwrap();
            let result = client
                .call_tool(CallToolRequestParams::new("up.where"))
                .await
                .unwrap();
            told.push(result.content[0].as_text().unwrap().text.clone());
        }
        assert_eq!(told[0], "1 roots", "{told:?}");
        // Never an empty list nobody gave: the server is told no client answers.
        assert!(told[1].starts_with("no roots"), "{told:?}");
    }
}
