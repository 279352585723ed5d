//! Protocol 2026-07-28 towards an upstream server (the official Rust SDK),
//! negotiated with `spec.protocol: auto`: a server that speaks it is
//! spoken to in it, and its `input_required` question reaches the client
//! that made the call (or ends the call, recorded, for a client that
//! cannot answer); a server that does not is spoken to as before. A
//! server's own task (SEP-2663) is followed within the joch call.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, DetailedTask, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    GetTaskParams, GetTaskResult, InputRequiredResult, ListPromptsResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Task, TaskPayload,
    TaskStatus, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::json;

use crate::harness::{Joch, NS, wait_for_phase};
use crate::mcp::{apply, server};
use crate::mcp_surface::peers::{User, answer, calls, connect, exchanges, serve};

/// A server whose tool `greet` asks the caller's name (`input_required`
/// in 2026-07-28; a session's `elicitation/create` before it), and which
/// notes the protocol version of each call and each answer it got.
#[derive(Clone)]
struct Greeter {
    versions: Option<Vec<ProtocolVersion>>,
    heard: Arc<Mutex<Vec<String>>>,
}

impl Greeter {
    fn new(versions: Option<Vec<ProtocolVersion>>) -> Self {
        Greeter {
            versions,
            heard: Arc::default(),
        }
    }

    fn heard(&self) -> Vec<String> {
        self.heard.lock().unwrap().clone()
    }
}

impl ServerHandler for Greeter {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .build(),
        )
    }

    async fn list_prompts(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let prompt = serde_json::from_value(json!({"name": "hello"})).unwrap();
        Ok(ListPromptsResult::with_all_items(vec![prompt]))
    }

    /// `hello` asks the name as `greet` does, in 2026-07-28 only.
    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let Some(answers) = &request.input_responses else {
            let asked = json!({"name": {"method": "elicitation/create", "params": {"mode": "form",
                "message": "Your name?", "requestedSchema": {"type": "object", "properties": {}}}}});
            let mut result =
                InputRequiredResult::from_input_requests(serde_json::from_value(asked).unwrap());
            result.request_state = Some("prompt".to_owned());
            return Ok(result.into());
        };
        assert_eq!(request.request_state.as_deref(), Some("prompt"));
        let name = answers["name"]["content"]["name"].as_str().unwrap_or("?");
        let result: GetPromptResult = serde_json::from_value(json!({"messages": [
            {"role": "user", "content": {"type": "text", "text": format!("hello {name}")}}]}))
        .unwrap();
        Ok(result.into())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        match &self.versions {
            Some(versions) => Cow::Owned(versions.clone()),
            None => Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS),
        }
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(crate::harness::one_read_only_tool("greet"))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let version = context.protocol_version().map(|v| v.to_string());
        self.note(format!("call {}", version.unwrap_or_default()));
        let question = json!({"mode": "form", "message": "Your name?", "requestedSchema":
            {"type": "object", "properties": {"name": {"type": "string"}}}});
        let stateless = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let answer = if !stateless {
            // Before 2026-07-28: a request on the call's stream.
            let params = serde_json::from_value(question).unwrap();
            match context.peer.create_elicitation(params).await {
                Ok(answer) => serde_json::to_value(answer).unwrap(),
                Err(e) => {
                    return Ok(
                        CallToolResult::error(vec![ContentBlock::text(e.to_string())]).into(),
                    );
                }
            }
        } else if let Some(answers) = &request.input_responses {
            assert_eq!(request.request_state.as_deref(), Some("asked-once"));
            answers["name"].clone()
        } else {
            let asked = json!({"name": {"method": "elicitation/create", "params": question}});
            let asked = serde_json::from_value(asked).unwrap();
            let mut result = InputRequiredResult::from_input_requests(asked);
            result.request_state = Some("asked-once".to_owned());
            return Ok(result.into());
        };
        self.note(format!("answer {answer}"));
        let text = format!(
            "hello {}",
            answer["content"]["name"].as_str().unwrap_or("?")
        );
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

impl Greeter {
    fn note(&self, what: String) {
        self.heard.lock().unwrap().push(what);
    }
}

/// A user who answers every form with the name `ada`.
fn ada() -> User {
    User::declaring(json!({"form": {}})).answering(json!({"name": "ada"}))
}

#[tokio::test]
async fn an_upstream_of_2026_07_28_asks_through_input_required_and_the_caller_answers() {
    let greeter = Greeter::new(None);
    let joch = Joch::start().await;
    apply(
        &joch,
        server(
            "greeter",
            &serve(greeter.clone()).await,
            json!({"protocol": "auto"}),
        ),
    )
    .await;

    let user = ada();
    let client = connect(&joch, user.clone()).await;
    let answered = answer(&client, "greeter.greet").await;
    // Once in a full run on a loaded machine the greeter's call timed out
    // after 30 s: say which step it stopped at.
    let heard = greeter.heard();
    let asked = user.asked.lock().unwrap().clone();
    assert_eq!(
        answered, "hello ada",
        "greeter heard {heard:?}, user asked {asked:?}"
    );
    assert_eq!(asked, ["Your name?"]);
    assert_eq!(heard[0], "call 2026-07-28", "{heard:?}");
    assert_eq!(heard.len(), 3, "asked, then answered: {heard:?}");
    let exchanges = exchanges(&joch).await;
    assert_eq!(exchanges.len(), 1, "{exchanges:?}");
    assert_eq!(exchanges[0]["method"], "elicitation/create");
    assert_eq!(exchanges[0]["relayed"], true, "{exchanges:?}");
    // A prompt get asks the same way.
    let prompt = client
        .get_prompt(GetPromptRequestParams::new("greeter.hello"))
        .await
        .unwrap();
    let prompt = serde_json::to_value(prompt).unwrap();
    assert_eq!(
        prompt["messages"][0]["content"]["text"], "hello ada",
        "{prompt}"
    );

    // A client that takes no elicitation: the call ends, recorded; the
    // server gets no answer nobody gave.
    let incapable = connect(&joch, User::default()).await;
    let refused = incapable
        .call_tool(CallToolRequestParams::new("greeter.greet"))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let failed = calls(&joch)
        .await
        .into_iter()
        .find(|c| c["status"]["phase"] == "Failed");
    let failed = failed.expect("a failed call");
    assert_eq!(
        failed["status"]["error"]["code"], "client_incapable",
        "{failed}"
    );
    assert_eq!(greeter.heard().len(), 4, "one more call, never answered");
    let failed_calls = calls(&joch).await;
    let failed_calls = failed_calls
        .iter()
        .filter(|c| c["status"]["phase"] == "Failed");
    assert_eq!(failed_calls.count(), 1);
}

#[tokio::test]
async fn an_upstream_before_2026_07_28_is_spoken_to_as_before_and_legacy_keeps_initialize() {
    let legacy = Greeter::new(Some(vec![ProtocolVersion::V_2025_11_25]));
    let modern = Greeter::new(None);
    let joch = Joch::start().await;
    // No `protocol`: `auto` is the default.
    apply(
        &joch,
        server("old", &serve(legacy.clone()).await, json!({})),
    )
    .await;
    let pinned = json!({"protocol": "legacy"});
    apply(&joch, server("new", &serve(modern.clone()).await, pinned)).await;
    let (_, stored) = joch
        .get(&format!("/v1/namespaces/{NS}/mcpservers/new"))
        .await;
    assert_eq!(stored["spec"]["protocol"], "legacy", "{stored}");

    let client = connect(&joch, ada()).await;
    assert_eq!(answer(&client, "old.greet").await, "hello ada");
    assert_eq!(answer(&client, "new.greet").await, "hello ada");
    assert_eq!(legacy.heard()[0], "call 2025-11-25", "{:?}", legacy.heard());
    assert_eq!(
        modern.heard()[0],
        "call 2025-11-25",
        "legacy speaks initialize: {:?}",
        modern.heard()
    );
}

/// A server of 2026-07-28 with the tasks extension: `work` runs as a task
/// (for a client that declares the extension) that says it is halfway,
/// asks the caller's name, and ends with a greeting; `forever` runs as a
/// task until it is cancelled. It notes every task request it gets.
#[derive(Clone, Default)]
struct Worker {
    polls: Arc<Mutex<u32>>,
    name: Arc<Mutex<Option<String>>>,
    heard: Arc<Mutex<Vec<String>>>,
}

impl Worker {
    fn note(&self, what: String) {
        self.heard.lock().unwrap().push(what);
    }

    fn heard(&self) -> Vec<String> {
        self.heard.lock().unwrap().clone()
    }

    fn task(id: &str, message: &str) -> Task {
        Task::new(
            id,
            TaskStatus::Working,
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:00:00Z",
        )
        .with_status_message(message)
        .with_poll_interval_ms(50)
    }
}

impl ServerHandler for Worker {
    fn get_info(&self) -> ServerConfig {
        let capabilities =
            json!({"tools": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
        ServerConfig::new(serde_json::from_value(capabilities).unwrap())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = ["work", "forever"].map(|name| {
            serde_json::from_value(json!({"name": name, "inputSchema": {"type": "object"},
                                          "annotations": {"readOnlyHint": true}}))
            .unwrap()
        });
        Ok(ListToolsResult::with_all_items(tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tasks = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        self.note(format!("call {} tasks={tasks}", request.name));
        if !tasks {
            return Ok(CallToolResult::success(vec![ContentBlock::text("done directly")]).into());
        }
        Ok(CreateTaskResult::new(Worker::task(&request.name, "starting")).into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let id = request.task_id;
        if id == "forever" {
            return Ok(GetTaskResult::new(DetailedTask::new(
                Worker::task(&id, "still going"),
                TaskPayload::Working,
            )));
        }
        let polls = {
            let mut polls = self.polls.lock().unwrap();
            *polls += 1;
            *polls
        };
        let name = self.name.lock().unwrap().clone();
        let (message, payload) = match (polls, name) {
            (1, _) => ("halfway", TaskPayload::Working),
            (_, None) => {
                let asked = json!({"name": {"method": "elicitation/create", "params": {
                    "mode": "form", "message": "Your name?", "requestedSchema":
                    {"type": "object", "properties": {"name": {"type": "string"}}}}}});
                let input_requests = serde_json::from_value(asked).unwrap();
                ("asking", TaskPayload::InputRequired { input_requests })
            }
            (_, Some(name)) => {
                let result =
                    CallToolResult::success(vec![ContentBlock::text(format!("done for {name}"))]);
                let serde_json::Value::Object(result) = serde_json::to_value(result).unwrap()
                else {
                    unreachable!()
                };
                ("done", TaskPayload::Completed { result })
            }
        };
        Ok(GetTaskResult::new(DetailedTask::new(
            Worker::task(&id, message),
            payload,
        )))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let answer = &request.input_responses["name"];
        let name = answer["content"]["name"].as_str().unwrap_or("?").to_owned();
        self.note(format!("update {name}"));
        *self.name.lock().unwrap() = Some(name);
        Ok(())
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.note(format!("cancel {}", request.task_id));
        Ok(())
    }
}

#[tokio::test]
async fn an_upstreams_own_task_is_followed_its_question_relayed_and_its_result_taken() {
    let worker = Worker::default();
    let joch = Joch::start().await;
    let url = serve(worker.clone()).await;
    apply(&joch, server("worker", &url, json!({"protocol": "auto"}))).await;

    let user = ada();
    let client = connect(&joch, user.clone()).await;
    assert_eq!(answer(&client, "worker.work").await, "done for ada");
    assert_eq!(*user.asked.lock().unwrap(), ["Your name?"]);
    let heard = worker.heard();
    assert_eq!(heard, ["call work tasks=true", "update ada"], "{heard:?}");

    // The task's statuses are the call's output chunks.
    let call = calls(&joch).await.pop().unwrap();
    assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
    let execution = call["spec"]["executionRef"]["name"].as_str().unwrap();
    let (_, events) = joch
        .get(&format!(
            "/v1/namespaces/{NS}/executions/{execution}/events"
        ))
        .await;
    let statuses: Vec<_> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "output_chunk")
        .flat_map(|e| e["data"]["chunks"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            format!(
                "{} {}",
                c["status"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            "working starting",
            "working halfway",
            "input_required asking",
            "completed done"
        ],
        "{events}"
    );
}

#[tokio::test]
async fn cancelling_the_joch_task_cancels_the_upstreams_task() {
    let worker = Worker::default();
    let joch = Joch::start().await;
    let url = serve(worker.clone()).await;
    apply(&joch, server("worker", &url, json!({"protocol": "auto"}))).await;

    let client = crate::mcp_tasks::tasker(&joch).await;
    let id = match client
        .call_tool_once(CallToolRequestParams::new("worker.forever"))
        .await
        .unwrap()
    {
        CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("not a task: {other:?}"),
    };
    wait_for_phase(&joch, &id, "Running").await;
    // Once the upstream has its task.
    for _ in 0..100 {
        if !worker.heard().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    client
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .unwrap();
    let call = wait_for_phase(&joch, &id, "Failed").await;
    assert_eq!(call["status"]["error"]["code"], "cancelled", "{call}");
    assert_eq!(
        worker.heard(),
        ["call forever tasks=true", "cancel forever"]
    );
}
