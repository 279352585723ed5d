//! MCP protocol 2026-07-28 through joch's front, with rmcp's client in
//! `server/discover` mode (no session): a call deferred to a person answers
//! `input_required`, and the retry carrying its `requestState` gets the
//! decided outcome, on whichever replica it reaches, the tool having run once;
//! a client of the tasks extension gets its call as a task, which outlives
//! the replica that started it and can be cancelled while it waits.

use std::sync::Arc;

use reqwest::{Method, StatusCode};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    ElicitRequestParams, ElicitResult, ElicitationAction, GetPromptRequestParams, GetTaskParams,
    Implementation, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
};
use rmcp::service::{RequestContext, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData};
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, rest_tool};
use crate::policies::apply_policy;
use crate::replicas::{approve_the_pending_call, fresh_database, replica};

/// A 2026-07-28 client of `joch`'s MCP front, answering as `handler` does.
pub(crate) async fn stateless<H: ClientHandler>(
    joch: &Joch,
    handler: H,
) -> RunningService<RoleClient, H> {
    let url = format!("{}/v1/namespaces/{NS}/mcp", joch.base);
    let discover = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    handler
        .serve_with_lifecycle(StreamableHttpClientTransport::from_uri(url), discover)
        .await
        .expect("server/discover")
}

pub(crate) fn ticket(n: u64) -> CallToolRequestParams {
    let Value::Object(args) = json!({"n": n}) else {
        unreachable!()
    };
    CallToolRequestParams::new("ticket.create").with_arguments(args)
}

/// A webhook tool whose calls a person approves.
pub(crate) async fn approved_writes(joch: &Joch, webhook: &Webhook, routing: Value) {
    joch.create_tool(rest_tool(
        "ticket.create",
        &format!("{}/record", webhook.base),
        json!({"level": "external_write"}),
    ))
    .await;
    apply_policy(
        joch,
        "people-approve-writes",
        json!({"version": "1", "rules": [
            {"when": {"tool.name": "ticket.create"}, "require": {"approval": "human", "approvalRouting": routing}}
        ]}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn input_required_is_answered_on_another_replica_after_the_approval() {
    let Some(store) = fresh_database("mcp_input_required").await else {
        return;
    };
    let webhook = Webhook::start().await;
    let (a, b) = tokio::join!(replica(&store), replica(&store));
    approved_writes(&a, &webhook, json!({})).await;

    // On A: recorded, deferred, answered at once with where to decide.
    let client_a = stateless(&a, ()).await;
    let first = client_a.call_tool_once(ticket(1)).await.unwrap();
    let CallToolResponse::InputRequired(first) = first else {
        panic!("not input_required: {first:?}")
    };
    let state = first.request_state.clone().expect("a requestState");
    assert!(
        first.input_requests.is_none(),
        "a client without elicitation is asked nothing: {first:?}"
    );
    let url = first.meta.as_ref().unwrap()["joch.dev/approvalUrl"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        url.contains(&format!("/v1/namespaces/{NS}/approvals/")),
        "{url}"
    );
    assert_eq!(
        webhook.recorded().len(),
        0,
        "nothing ran before the decision"
    );

    // The state names no call of this tool: refused, nothing decided.
    let mut forged = CallToolRequestParams::new("other").with_request_state(state.clone());
    forged.arguments = Some(Default::default());
    assert!(client_a.call_tool_once(forged).await.is_err());
    let bogus = ticket(1).with_request_state("toolcall/not-a-call");
    assert!(client_a.call_tool_once(bogus).await.is_err());

    // Decided on B; the retry reaches B too and gets the outcome.
    approve_the_pending_call(&b, "bob").await;
    let client_b = stateless(&b, ()).await;
    let retry = ticket(1).with_request_state(state.clone());
    let done = client_b.call_tool_once(retry.clone()).await.unwrap();
    let CallToolResponse::Complete(done) = done else {
        panic!("not complete: {done:?}")
    };
    assert_eq!(done.is_error, Some(false), "{done:?}");
    // Again, on A: the same outcome, read from the record; the tool ran once.
    let again = client_a.call_tool_once(retry).await.unwrap();
    let CallToolResponse::Complete(again) = again else {
        panic!("not complete: {again:?}")
    };
    assert_eq!(again.structured_content, done.structured_content);
    assert_eq!(webhook.recorded().len(), 1, "the approved call ran once");
    let name = state.strip_prefix("toolcall/").unwrap();
    let call = b.get_call(name).await;
    assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
}

/// A user who approves whatever they are asked, and says what they saw.
#[derive(Clone, Default)]
struct Approver {
    asked: Arc<std::sync::Mutex<Vec<Value>>>,
}

impl ClientHandler for Approver {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("e2e-approver", "1"),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked
            .lock()
            .unwrap()
            .push(serde_json::to_value(&request).unwrap());
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": true})))
    }
}

#[tokio::test]
async fn the_clients_user_approves_through_the_form_of_input_required() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    approved_writes(&joch, &webhook, json!({"askUser": true})).await;
    let user = Approver::default();
    let client = stateless(&joch, user.clone()).await;

    // rmcp's client drives the rounds: asks its user, retries with the answer.
    let done = client.call_tool(ticket(7)).await.unwrap();
    assert_eq!(done.is_error, Some(false), "{done:?}");
    assert_eq!(webhook.recorded().len(), 1);
    let asked = user.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["requestedSchema"]["required"][0], "approve");

    let (_, approvals) = joch.get(&format!("/v1/namespaces/{NS}/approvals")).await;
    let approval = &approvals["items"][0];
    assert_eq!(approval["status"]["phase"], "Approved", "{approval}");
    assert_eq!(
        approval["status"]["decidedBy"],
        "mcp-elicitation:e2e-approver"
    );
    let (_, calls) = joch.get(&format!("/v1/namespaces/{NS}/toolcalls")).await;
    assert_eq!(
        calls["items"].as_array().unwrap().len(),
        1,
        "one call, resumed: {calls}"
    );
}

/// Resource reads and prompt gets are calls: deferred to a person, they
/// answer `input_required` as `tools/call` does, and the retry resumes them.
#[tokio::test]
async fn a_deferred_prompt_get_or_resource_read_answers_input_required() {
    let upstream = crate::mcp_surface::peers::start_docs().await;
    let joch = Joch::start().await;
    crate::mcp::apply(&joch, crate::mcp::server("docs", &upstream, json!({}))).await;
    apply_policy(
        &joch,
        "ask-first",
        json!({"version": "1", "appliesTo": {"tools": ["docs:prompt", "docs:resource"]},
               "rules": [{"when": {}, "require": {"approval": "human", "approvalRouting": {"askUser": true}}}]}),
    )
    .await;

    // A client whose user answers the form: rmcp's client drives the rounds.
    let user = Approver::default();
    let client = stateless(&joch, user.clone()).await;
    let got = client
        .get_prompt(GetPromptRequestParams::new("docs.greet"))
        .await
        .unwrap();
    let got = serde_json::to_value(got).unwrap();
    assert_eq!(
        got["messages"][0]["content"]["text"], "hello from greet",
        "{got}"
    );
    assert_eq!(user.asked.lock().unwrap().len(), 1);

    // A client that cannot answer: the state, then the retry once approved.
    let reader = stateless(&joch, Plain).await;
    let read = reader
        .read_resource_once(ReadResourceRequestParams::new("docs.note://a"))
        .await
        .unwrap();
    let ReadResourceResponse::InputRequired(waiting) = read else {
        panic!("not input_required: {read:?}")
    };
    let state = waiting.request_state.clone().expect("a requestState");
    let name = state.strip_prefix("toolcall/").expect("names the call");
    let (status, body) = joch
        .send(
            reqwest::Method::POST,
            &format!("/v1/namespaces/{NS}/approvals/{name}/approve"),
            Some(json!({"approvedBy": "alice"})),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let mut retry = ReadResourceRequestParams::new("docs.note://a");
    retry.request_state = Some(state.clone());
    let ReadResourceResponse::Complete(read) = reader.read_resource_once(retry).await.unwrap()
    else {
        panic!("the retry after the approval still waits")
    };
    let read = serde_json::to_value(read).unwrap();
    assert_eq!(
        read["contents"][0]["text"], "contents of note://a",
        "{read}"
    );
    assert_eq!(read["contents"][0]["uri"], "docs.note://a", "{read}");

    let (_, calls) = joch.get(&format!("/v1/namespaces/{NS}/toolcalls")).await;
    let operations: Vec<_> = calls["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["spec"]["operation"].clone(), c["status"]["phase"].clone()))
        .collect();
    assert_eq!(operations.len(), 2, "one call each, resumed: {calls}");
    assert!(operations.contains(&(json!("resources/read"), json!("Succeeded"))));
    assert!(operations.contains(&(json!("prompts/get"), json!("Succeeded"))));
}

/// A client that declares nothing.
#[derive(Clone, Default)]
pub(crate) struct Plain;

impl ClientHandler for Plain {}

/// A client that runs its calls as tasks (and takes no elicitation).
#[derive(Clone, Default)]
pub(crate) struct Tasker;

impl ClientHandler for Tasker {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_tasks().build(),
            Implementation::new("e2e-tasker", "1"),
        )
    }
}

async fn start_task(client: &RunningService<RoleClient, Tasker>, n: u64) -> String {
    match client.call_tool_once(ticket(n)).await.unwrap() {
        CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("not a task: {other:?}"),
    }
}

async fn task_of(client: &RunningService<RoleClient, Tasker>, id: &str) -> Value {
    let got = client.get_task(GetTaskParams::new(id)).await.unwrap();
    serde_json::to_value(got).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_outlives_a_kill_9_of_the_replica_that_started_it() {
    let Some(store) = fresh_database("mcp_task_kill").await else {
        return;
    };
    let webhook = Webhook::start().await;
    let (mut a, b) = tokio::join!(replica(&store), replica(&store));
    approved_writes(&a, &webhook, json!({})).await;

    let client_a = stateless(&a, Tasker).await;
    let id = start_task(&client_a, 1).await;
    let waiting = task_of(&client_a, &id).await;
    assert_eq!(waiting["status"], "working", "{waiting}");
    assert!(
        waiting["statusMessage"]
            .as_str()
            .unwrap()
            .contains("/approvals/"),
        "{waiting}"
    );
    drop(client_a);
    a.kill();

    approve_the_pending_call(&b, "bob").await;
    let client_b = stateless(&b, Tasker).await;
    let done = loop {
        let task = task_of(&client_b, &id).await;
        if task["status"] != "working" {
            break task;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        webhook.recorded().len(),
        1,
        "the task's call ran once, on B"
    );
}

#[tokio::test]
async fn a_task_waiting_for_a_person_is_cancelled_and_never_runs() {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    approved_writes(&joch, &webhook, json!({})).await;
    let client = stateless(&joch, Tasker).await;
    let id = start_task(&client, 2).await;

    client
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .unwrap();
    let task = task_of(&client, &id).await;
    assert_eq!(task["status"], "cancelled", "{task}");
    let call = joch.get_call(&id).await;
    assert_eq!(call["status"]["phase"], "Failed", "{call}");
    assert_eq!(call["status"]["error"]["code"], "cancelled", "{call}");
    let (_, approval) = joch
        .get(&format!("/v1/namespaces/{NS}/approvals/{id}"))
        .await;
    assert_eq!(approval["status"]["phase"], "Expired", "{approval}");
    // Approving it now is refused: it was withdrawn.
    let (status, _) = joch
        .send(
            reqwest::Method::POST,
            &format!("/v1/namespaces/{NS}/approvals/{id}/approve"),
            Some(json!({"approvedBy": "bob"})),
        )
        .await;
    assert!(status.is_client_error(), "{status}");
    // Another task id is no task of this client's.
    assert!(client.get_task(GetTaskParams::new("nope")).await.is_err());
    assert_eq!(webhook.recorded().len(), 0);
}

#[tokio::test]
async fn a_requeststate_is_no_credential_another_agent_cannot_resume_the_call() {
    use crate::auth::{ROOT, token};
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let joch = Joch::builder().env("JOCH_ADMIN_TOKEN", ROOT).start().await;
    let tool = json!({"metadata": {"name": "ticket.create"}, "spec": {"description": "",
        "inputSchema": {"type": "object"}, "sideEffects": {"requiresApproval": true},
        "backend": {"type": "noop"}}});
    let (status, _) = joch
        .send_as(
            ROOT,
            reqwest::Method::POST,
            &format!("/v1/namespaces/{NS}/tools"),
            Some(tool),
        )
        .await;
    assert!(status.is_success(), "{status}");
    let url = format!("{}/v1/namespaces/{NS}/mcp", joch.base);
    let as_agent = async |name: &str| {
        let secret = token(&joch, NS, name, "agent").await;
        let config =
            StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(secret);
        let discover = ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        };
        ().serve_with_lifecycle(StreamableHttpClientTransport::from_config(config), discover)
            .await
            .expect("server/discover")
    };
    let maker = as_agent("bot-a").await;
    let other = as_agent("bot-b").await;
    let CallToolResponse::InputRequired(first) = maker.call_tool_once(ticket(1)).await.unwrap()
    else {
        panic!("not input_required")
    };
    let stolen = ticket(1).with_request_state(first.request_state.unwrap());
    let refused = other.call_tool_once(stolen).await.unwrap_err();
    assert!(
        refused.to_string().contains("no call of yours"),
        "{refused}"
    );
}

/// A client that takes URL-mode elicitation only (it opens links).
struct Opener;

impl ClientHandler for Opener {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        let mut elicitation = rmcp::model::ElicitationCapability::default();
        elicitation.url = Some(rmcp::model::UrlElicitationCapability::new());
        capabilities.elicitation = Some(elicitation);
        ClientConfig::new(capabilities, Implementation::new("e2e-opener", "1"))
    }
}

/// joch with a vault, and a tool `mail.read` over an Endpoint taking each
/// user's own token; its authorization URL (nothing listens there: no
/// user consents in these tests).
async fn per_user_mail() -> (Joch, &'static str) {
    let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let joch = Joch::builder().env("JOCH_VAULT_KEY", key).start().await;
    let authorize = "http://127.0.0.1:9/authorize";
    let endpoint = json!({"kind": "Endpoint", "metadata": {"name": "mail"}, "spec": {
        "url": "http://127.0.0.1:9/mail",
        "auth": {"oauth2": {"grant": "authorization_code", "perUser": true, "clientId": "joch",
            "authorizationUrl": authorize, "tokenUrl": "http://127.0.0.1:9/token"}}}});
    let path = format!("/v1/namespaces/{NS}/endpoints");
    let (status, body) = joch.send(Method::POST, &path, Some(endpoint)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    joch.create_tool(
        json!({"name": "mail.read", "actions": [{"type": "webhook", "endpoint": "mail"}]}),
    )
    .await;
    (joch, authorize)
}

/// The URL of the question in an `input_required` answer.
fn asked_url(asked: &rmcp::model::InputRequiredResult) -> String {
    let asked = serde_json::to_value(asked.input_requests.as_ref().expect("a question")).unwrap();
    assert_eq!(asked["approval"]["params"]["mode"], "url", "{asked}");
    asked["approval"]["params"]["url"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_call_waiting_for_consent_gives_its_authorization_url_in_input_required() {
    let (joch, authorize) = per_user_mail().await;
    let client = stateless(&joch, Opener).await;
    let first = client
        .call_tool_once(CallToolRequestParams::new("mail.read").with_arguments(Default::default()))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(first) = first else {
        panic!("not input_required: {first:?}")
    };
    let url = asked_url(&first);
    assert!(url.starts_with(&format!("{authorize}?")), "{url}");
    assert!(url.contains("code_challenge_method=S256"), "{url}");
}

#[tokio::test]
async fn a_consent_asked_after_a_persons_approval_reaches_the_retrying_client() {
    let (joch, authorize) = per_user_mail().await;
    let rule = json!({"when": {"tool.name": "mail.read"}, "require": {"approval": "human"}});
    apply_policy(
        &joch,
        "people-approve-mail",
        json!({"version": "1", "rules": [rule]}),
    )
    .await;
    let client = stateless(&joch, Opener).await;
    let read = CallToolRequestParams::new("mail.read").with_arguments(Default::default());
    let CallToolResponse::InputRequired(first) = client.call_tool_once(read.clone()).await.unwrap()
    else {
        panic!("not input_required")
    };
    assert!(
        !asked_url(&first).starts_with(authorize),
        "a person decides first"
    );

    approve_the_pending_call(&joch, "root").await;
    let state = first.request_state.expect("a state");
    let started = std::time::Instant::now();
    let retry = read.with_request_state(state.clone());
    let CallToolResponse::InputRequired(second) = client.call_tool_once(retry).await.unwrap()
    else {
        panic!("not input_required")
    };
    let url = asked_url(&second);
    assert!(
        url.starts_with(&format!("{authorize}?")),
        "now the user's consent: {url}"
    );
    assert!(
        started.elapsed().as_secs() < 5,
        "asked at once, not after the retry's wait"
    );
    assert_ne!(
        second.request_state,
        Some(state),
        "the state says the consent was asked"
    );
}
