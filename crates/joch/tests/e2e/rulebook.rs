//! One rulebook on every surface: whatever surface made a call (REST, a
//! batch, AOS and Claude hooks, MCP over HTTP, the `joch mcp` stdio proxy,
//! the library's remote gateway), the approver token that made it cannot
//! approve it, and another approver's decision runs it once. A token's tool
//! selector hides tools on every surface, and a call of a hidden tool
//! answers as an unknown one while the ledger keeps the refusal.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};

use crate::harness::{Joch, NS};

pub(crate) const ROOT: &str = "root-secret-for-rulebook-tests";

pub(crate) struct Setup {
    pub(crate) joch: Joch,
    /// An approver: makes the calls, and may not approve them.
    alice: String,
    /// Another approver: decides.
    bob: String,
    /// An agent that sees `crm.*` only.
    crm: String,
}

pub(crate) async fn token(joch: &Joch, name: &str, role: &str, tools: Option<Value>) -> String {
    let (status, created) = joch
        .send_as(
            ROOT,
            Method::POST,
            &format!("/v1/namespaces/{NS}/tokens"),
            Some(json!({"name": name, "role": role, "tools": tools})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["token"].as_str().unwrap().to_owned()
}

pub(crate) async fn setup() -> Setup {
    let joch = Joch::builder().env("JOCH_ADMIN_TOKEN", ROOT).start().await;
    let tools = format!("/v1/namespaces/{NS}/tools");
    for (name, approval) in [("refund", true), ("crm.lookup", false)] {
        let tool = json!({"metadata": {"name": name}, "spec": {"description": name, "inputSchema": {"type": "object"}, "sideEffects": {"requiresApproval": approval}, "backend": {"type": "noop"}}});
        let (status, body) = joch.send_as(ROOT, Method::POST, &tools, Some(tool)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    Setup {
        alice: token(&joch, "alice", "approver", None).await,
        bob: token(&joch, "bob", "approver", None).await,
        crm: token(&joch, "crm-bot", "agent", Some(json!({"names": ["crm.*"]}))).await,
        joch,
    }
}

async fn call_of(s: &Setup, name: &str) -> Value {
    let path = format!("/v1/namespaces/{NS}/toolcalls/{name}");
    let (status, call) = s.joch.send_as(ROOT, Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{call}");
    call
}

/// The one pending approval, once the surface has recorded its call.
pub(crate) async fn pending(s: &Setup) -> String {
    for _ in 0..500 {
        let path = format!("/v1/namespaces/{NS}/approvals?phase=Pending");
        let (_, list) = s.joch.send_as(ROOT, Method::GET, &path, None).await;
        if let Some(name) = list["items"][0]["metadata"]["name"].as_str() {
            return name.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no call came to wait for approval");
}

/// Alice, who made the call, is refused and the call still waits; Bob
/// approves and it runs once. Returns the settled record.
async fn only_another_approver_decides(s: &Setup) -> Value {
    let name = pending(s).await;
    let approve = format!("/v1/namespaces/{NS}/approvals/{name}/approve");
    let (status, refused) = s
        .joch
        .send_as(&s.alice, Method::POST, &approve, Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert_eq!(refused["code"], "forbidden");
    let waiting = call_of(s, &name).await;
    assert_eq!(waiting["status"]["phase"], "AwaitingApproval", "{waiting}");
    assert_eq!(waiting["status"]["principal"]["name"], "alice", "{waiting}");
    assert_eq!(waiting["status"]["principal"]["kind"], "token");

    let (status, approval) = s
        .joch
        .send_as(&s.bob, Method::POST, &approve, Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    assert_eq!(approval["status"]["decidedBy"], "bob");
    assert_eq!(approval["status"]["decider"]["name"], "bob");
    let mut settled = call_of(s, &name).await;
    for _ in 0..500 {
        if settled["status"]["phase"] == "Succeeded" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        settled = call_of(s, &name).await;
    }
    assert_eq!(settled["status"]["phase"], "Succeeded", "{settled}");
    assert_eq!(settled["status"]["attempts"], 1, "{settled}");
    settled
}

pub(crate) fn refund_call(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"toolRef": {"name": "refund"}, "input": {}}})
}

#[tokio::test]
async fn rest_and_batches_keep_separation_of_duties() {
    let s = setup().await;
    let calls = format!("/v1/namespaces/{NS}/toolcalls?wait=false");
    let (status, body) = s
        .joch
        .send_as(&s.alice, Method::POST, &calls, Some(refund_call("rest-1")))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // The CLI decides through the same API, as its token.
    let name = pending(&s).await;
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_joch"))
        .args(["approve", &name, "-n", NS])
        .env("JOCH_SERVER", &s.joch.base)
        .env("JOCH_TOKEN", &s.alice)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&cli.stderr);
    assert!(
        !cli.status.success() && said.contains("forbidden"),
        "{said}"
    );
    only_another_approver_decides(&s).await;

    let batch = format!("/v1/namespaces/{NS}/executions/run-1/batches?wait=false");
    let body = json!({"calls": [refund_call("batch-1")]});
    let (status, answer) = s
        .joch
        .send_as(&s.alice, Method::POST, &batch, Some(body))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    only_another_approver_decides(&s).await;
}

#[tokio::test]
async fn a_client_supplied_principal_is_ignored() {
    let s = setup().await;
    let mut call = json!({"metadata": {"name": "forged"}, "spec": {"toolRef": {"name": "crm.lookup"}, "input": {}}});
    call["status"] = json!({"principal": {"kind": "token", "name": "bob", "role": "admin"}});
    let calls = format!("/v1/namespaces/{NS}/toolcalls");
    let (status, record) = s
        .joch
        .send_as(&s.crm, Method::POST, &calls, Some(call))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{record}");
    assert_eq!(record["status"]["principal"]["name"], "crm-bot");
    assert_eq!(record["status"]["principal"]["role"], "agent");
}

#[tokio::test]
async fn aos_hooks_keep_separation_of_duties() {
    let s = setup().await;
    let (joch, alice) = (s.joch.base.clone(), s.alice.clone());
    let asked = tokio::spawn(async move {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "steps/toolCallRequest", "params": {
            "toolCallRequest": {"executionId": "aos-1", "toolId": "refund", "inputs": []}}});
        let response = reqwest::Client::new()
            .post(format!("{joch}/v1/namespaces/{NS}/hooks/aos"))
            .bearer_auth(alice)
            .json(&body)
            .send()
            .await
            .unwrap();
        response.json::<Value>().await.unwrap()
    });
    let name = pending(&s).await;
    assert!(!asked.is_finished(), "the agent waits for a person");
    // Reporting a result does not approve one's own call either.
    let result = json!({"jsonrpc": "2.0", "id": 2, "method": "steps/toolCallResult", "params": {
        "toolCallResult": {"executionId": name, "toolId": "refund", "result": "done"}}});
    let path = format!("/v1/namespaces/{NS}/hooks/aos");
    let (_, reported) = s
        .joch
        .send_as(&s.alice, Method::POST, &path, Some(result))
        .await;
    assert!(reported["error"].is_object(), "{reported}");
    only_another_approver_decides_hook(&s, &name).await;
    let verdict = asked.await.unwrap();
    assert_eq!(verdict["result"]["decision"], "allow", "{verdict}");
}

/// As [`only_another_approver_decides`], for a hook-mode call: once
/// approved it is the agent's to run (`Running`), not settled.
async fn only_another_approver_decides_hook(s: &Setup, name: &str) {
    let approve = format!("/v1/namespaces/{NS}/approvals/{name}/approve");
    let (status, refused) = s
        .joch
        .send_as(&s.alice, Method::POST, &approve, Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert_eq!(
        call_of(s, name).await["status"]["phase"],
        "AwaitingApproval"
    );
    let (status, approval) = s
        .joch
        .send_as(&s.bob, Method::POST, &approve, Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    assert_eq!(approval["status"]["decidedBy"], "bob");
}

#[tokio::test]
async fn claude_hooks_cannot_ask_their_own_user_without_a_policy_saying_so() {
    let s = setup().await;
    let (joch, alice) = (s.joch.base.clone(), s.alice.clone());
    // `onDefer=ask` would let the agent's own user approve: with
    // authentication that needs a policy's askUser, so the hook waits.
    let asked = tokio::spawn(async move {
        let body = json!({"session_id": "s1", "hook_event_name": "PreToolUse", "tool_name": "refund", "tool_use_id": "toolu_1", "tool_input": {}});
        let response = reqwest::Client::new()
            .post(format!(
                "{joch}/v1/namespaces/{NS}/hooks/claude?onDefer=ask"
            ))
            .bearer_auth(alice)
            .json(&body)
            .send()
            .await
            .unwrap();
        response.json::<Value>().await.unwrap()
    });
    let name = pending(&s).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !asked.is_finished(),
        "not answered `ask`: it waits for an approver"
    );
    let post = json!({"session_id": "s1", "hook_event_name": "PostToolUse", "tool_name": "refund", "tool_use_id": name, "tool_response": "done"});
    let path = format!("/v1/namespaces/{NS}/hooks/claude");
    let (status, body) = s
        .joch
        .send_as(&s.alice, Method::POST, &path, Some(post))
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a reported result approves nothing: {body}"
    );
    only_another_approver_decides_hook(&s, &name).await;
    let verdict = asked.await.unwrap();
    assert_eq!(
        verdict["hookSpecificOutput"]["permissionDecision"], "allow",
        "{verdict}"
    );
}

pub(crate) fn mcp_config(s: &Setup, token: &str) -> StreamableHttpClientTransportConfig {
    StreamableHttpClientTransportConfig::with_uri(format!("{}/v1/namespaces/{NS}/mcp", s.joch.base))
        .auth_header(token.to_owned())
}

#[tokio::test]
async fn mcp_over_http_keeps_separation_of_duties() {
    let s = setup().await;
    let client = ()
        .serve(StreamableHttpClientTransport::from_config(mcp_config(
            &s, &s.alice,
        )))
        .await
        .unwrap();
    let called = tokio::spawn(async move {
        let answer = client.call_tool(CallToolRequestParams::new("refund")).await;
        (answer, client)
    });
    only_another_approver_decides(&s).await;
    let (answer, _client) = called.await.unwrap();
    assert_ne!(answer.unwrap().is_error, Some(true));
}

#[tokio::test]
async fn the_stdio_proxy_acts_as_its_token() {
    let s = setup().await;
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_joch"));
    command
        .args(["mcp", "-n", NS])
        .env("JOCH_SERVER", &s.joch.base)
        .env("JOCH_TOKEN", &s.alice)
        .stderr(std::process::Stdio::null());
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let called = tokio::spawn(async move {
        let answer = client.call_tool(CallToolRequestParams::new("refund")).await;
        (answer, client)
    });
    let settled = only_another_approver_decides(&s).await;
    assert_eq!(settled["status"]["principal"]["name"], "alice");
    let (answer, _client) = called.await.unwrap();
    assert_ne!(answer.unwrap().is_error, Some(true));
}

#[tokio::test]
async fn the_remote_gateway_keeps_separation_of_duties() {
    use joch_tools::{RemoteGateway, ToolExecutor};
    let s = setup().await;
    let gateway = RemoteGateway::new(&s.joch.base, NS).with_token(&s.alice);
    let running = tokio::spawn({
        let gateway = gateway.clone();
        async move {
            gateway
                .execute_tool_call(&joch_tools::ToolCall::new("refund"))
                .await
        }
    });
    let name = pending(&s).await;
    match gateway.approve(&name).await {
        Err(joch_tools::Error::Api { status, code, .. }) => {
            assert_eq!((status, code.as_str()), (403, "forbidden"));
        }
        other => panic!("alice approved her own call: {other:?}"),
    }
    let bob = RemoteGateway::new(&s.joch.base, NS).with_token(&s.bob);
    bob.approve(&name).await.unwrap();
    let done = running.await.unwrap().unwrap();
    assert_eq!(done.phase, joch_core::Phase::Succeeded, "{done:?}");
}

#[tokio::test]
async fn a_tool_selector_hides_tools_on_every_surface() {
    let s = setup().await;
    // REST: the list, the tool itself, and a call answer as if it did not exist.
    let (_, list) = s
        .joch
        .send_as(
            &s.crm,
            Method::GET,
            &format!("/v1/namespaces/{NS}/tools"),
            None,
        )
        .await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["crm.lookup"]);
    let (status, body) = s
        .joch
        .send_as(
            &s.crm,
            Method::GET,
            &format!("/v1/namespaces/{NS}/tools/refund"),
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("tool_not_found"))
    );
    let calls = format!("/v1/namespaces/{NS}/toolcalls");
    let (status, body) = s
        .joch
        .send_as(&s.crm, Method::POST, &calls, Some(refund_call("hidden-1")))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("tool_not_found")),
        "{body}"
    );
    let (status, body) = s
        .joch
        .send_as(
            &s.crm,
            Method::POST,
            &calls,
            Some(json!({"spec": {"toolRef": {"name": "nope"}}})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("tool_not_found")),
        "a hidden tool answers as an unknown one: {body}"
    );
    // The ledger keeps the refusal, and who made it.
    let refused = call_of(&s, "hidden-1").await;
    assert_eq!(refused["status"]["phase"], "Denied", "{refused}");
    assert_eq!(refused["status"]["error"]["code"], "tool_not_found");
    assert_eq!(refused["status"]["principal"]["name"], "crm-bot");
    let (status, _) = s
        .joch
        .send_as(
            &s.crm,
            Method::POST,
            &calls,
            Some(json!({"spec": {"toolRef": {"name": "crm.lookup"}}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);

    // MCP: listed and called the same way.
    let client = ()
        .serve(StreamableHttpClientTransport::from_config(mcp_config(
            &s, &s.crm,
        )))
        .await
        .unwrap();
    let listed: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(listed, ["crm.lookup"]);
    let hidden = client
        .call_tool(CallToolRequestParams::new("refund"))
        .await
        .unwrap();
    assert_eq!(hidden.is_error, Some(true));
    let text = serde_json::to_string(&hidden.content).unwrap();
    assert!(text.contains("tool_not_found"), "{text}");

    // Hooks: the agent is told no, and does not run it.
    let body = json!({"session_id": "s1", "hook_event_name": "PreToolUse", "tool_name": "refund", "tool_use_id": "toolu_9", "tool_input": {}});
    let path = format!("/v1/namespaces/{NS}/hooks/claude");
    let (status, verdict) = s
        .joch
        .send_as(&s.crm, Method::POST, &path, Some(body))
        .await;
    assert_eq!(status, StatusCode::OK, "{verdict}");
    assert_eq!(
        verdict["hookSpecificOutput"]["permissionDecision"], "deny",
        "{verdict}"
    );
    let hooked = call_of(&s, "toolu_9").await;
    assert_eq!(
        hooked["status"]["error"]["code"], "tool_not_found",
        "{hooked}"
    );
    assert_eq!(hooked["status"]["principal"]["name"], "crm-bot");
}

/// The names of the items a list answers `token` with.
async fn listed(s: &Setup, token: &str, path: &str) -> Vec<String> {
    let (status, list) = s.joch.send_as(token, Method::GET, path, None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A call of a tool outside a token's selector does not exist for it
/// either: its record, its place in the ledger (filtered or not), its
/// approval, and the console's pages of them answer as for a missing call.
#[tokio::test]
async fn a_tool_selector_hides_calls_and_their_approvals() {
    use crate::console::{send, signed_in};
    let s = setup().await;
    let calls = format!("/v1/namespaces/{NS}/toolcalls");
    let mut hidden = refund_call("hr-1");
    hidden["spec"]["input"] = json!({"salary": 123_456});
    let (status, body) = s
        .joch
        .send_as(
            ROOT,
            Method::POST,
            &format!("{calls}?wait=false"),
            Some(hidden),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let own = json!({"metadata": {"name": "crm-1"}, "spec": {"toolRef": {"name": "crm.lookup"}}});
    let (status, body) = s
        .joch
        .send_as(&s.crm, Method::POST, &calls, Some(own))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(pending(&s).await, "hr-1");

    // REST: the record and its approval answer as missing ones.
    for (path, code) in [
        (format!("{calls}/hr-1"), "toolcall_not_found"),
        (
            format!("/v1/namespaces/{NS}/approvals/hr-1"),
            "approval_not_found",
        ),
    ] {
        let (status, body) = s.joch.send_as(&s.crm, Method::GET, &path, None).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::NOT_FOUND, Some(code)),
            "{path}: {body}"
        );
        let (status, _) = s.joch.send_as(ROOT, Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
    }
    let (status, body) = s
        .joch
        .send_as(&s.crm, Method::POST, &format!("{calls}/hr-1/cancel"), None)
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("toolcall_not_found")),
        "cancelling it too: {body}"
    );
    let (status, own) = s
        .joch
        .send_as(&s.crm, Method::GET, &format!("{calls}/crm-1"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{own}");

    // REST lists, filtered or not, leave them out and keep its own calls.
    assert_eq!(listed(&s, &s.crm, &calls).await, ["crm-1"]);
    assert!(
        listed(&s, &s.crm, &format!("{calls}?tool=refund"))
            .await
            .is_empty()
    );
    assert_eq!(
        listed(&s, &s.crm, &format!("{calls}?tool=crm.lookup")).await,
        ["crm-1"]
    );
    assert_eq!(listed(&s, ROOT, &calls).await, ["crm-1", "hr-1"]);
    let approvals = format!("/v1/namespaces/{NS}/approvals");
    assert!(listed(&s, &s.crm, &approvals).await.is_empty());
    assert_eq!(listed(&s, ROOT, &approvals).await, ["hr-1"]);

    // The console: the call's page answers as a missing call's, the ledger
    // leaves it out.
    let session = signed_in(&s.joch, &s.crm).await;
    let page = |path: String| {
        let (joch, session) = (&s.joch, &session);
        async move { send(joch, Method::GET, &path, session, "").await }
    };
    let shown = page(format!("/ui/calls/hr-1?ns={NS}")).await;
    let missing = page(format!("/ui/calls/nope?ns={NS}")).await;
    assert_eq!(shown.status(), StatusCode::NOT_FOUND);
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let shown = shown.text().await.unwrap();
    assert!(!shown.contains("123456"), "{shown}");
    let ledger = page(format!("/ui/calls?ns={NS}")).await;
    assert_eq!(ledger.status(), StatusCode::OK);
    let ledger = ledger.text().await.unwrap();
    assert!(
        ledger.contains("crm-1") && !ledger.contains("hr-1"),
        "{ledger}"
    );
    let filtered = page(format!("/ui/calls?ns={NS}&tool=refund")).await;
    let filtered = filtered.text().await.unwrap();
    assert!(!filtered.contains("hr-1"), "{filtered}");
    let root = signed_in(&s.joch, ROOT).await;
    let seen = send(
        &s.joch,
        Method::GET,
        &format!("/ui/calls/hr-1?ns={NS}"),
        &root,
        "",
    )
    .await;
    assert_eq!(seen.status(), StatusCode::OK);
}

/// The call once it reached `phase` (polled for up to 10 s).
pub(crate) async fn call_in(s: &Setup, name: &str, phase: &str) -> Value {
    let mut call = call_of(s, name).await;
    for _ in 0..500 {
        if call["status"]["phase"] == phase {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        call = call_of(s, name).await;
    }
    assert_eq!(call["status"]["phase"], phase, "{call}");
    call
}

#[tokio::test]
async fn a_standing_approval_never_decides_its_deciders_own_calls() {
    let s = setup().await;
    let carol = token(&s.joch, "carol", "agent", None).await;
    let calls = format!("/v1/namespaces/{NS}/toolcalls?wait=false");
    let call = |token: String, name: &'static str| {
        let (joch, calls) = (&s.joch, calls.clone());
        async move {
            let (status, body) = joch
                .send_as(&token, Method::POST, &calls, Some(refund_call(name)))
                .await;
            assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        }
    };
    // Alice approves Bob's call, always.
    call(s.bob.clone(), "standing-1").await;
    assert_eq!(pending(&s).await, "standing-1");
    let approve = format!("/v1/namespaces/{NS}/approvals/standing-1/approve");
    let body = json!({"always": true});
    let (status, approval) = s
        .joch
        .send_as(&s.alice, Method::POST, &approve, Some(body))
        .await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    call_in(&s, "standing-1", "Succeeded").await;
    let path = format!("/v1/namespaces/{NS}/standingapprovals/refund");
    let (_, standing) = s.joch.send_as(ROOT, Method::GET, &path, None).await;
    assert_eq!(standing["spec"]["decider"]["name"], "alice", "{standing}");

    // Her own call of the tool waits for another person, as any would.
    call(s.alice.clone(), "standing-2").await;
    let own = call_in(&s, "standing-2", "AwaitingApproval").await;
    assert!(own["status"].get("standing").is_none(), "{own}");
    assert_eq!(pending(&s).await, "standing-2");

    // Carol's is decided by Alice's standing approval, and says so.
    call(carol, "standing-3").await;
    let decided = call_in(&s, "standing-3", "Succeeded").await;
    let by = &decided["status"]["standing"];
    assert_eq!(by["decision"], "approve", "{decided}");
    assert_eq!(by["decidedBy"], "alice", "{decided}");
    assert_eq!(by["decider"]["kind"], "token", "{decided}");
    assert_eq!(by["decider"]["name"], "alice", "{decided}");
    assert_eq!(by["approvalRef"]["name"], "standing-1", "{decided}");
    assert_eq!(decided["status"]["principal"]["name"], "carol");
    let reasons = decided["status"]["hookDecisions"].to_string();
    assert!(reasons.contains("standing approve by alice"), "{reasons}");

    // Bob, not the decider, may still decide Alice's waiting call.
    only_another_approver_decides(&s).await;
}
