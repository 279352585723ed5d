//! The gate, end to end: every action of docs/identity.md's table, for
//! every role, through REST and the console, on one server. An action a
//! role may not take answers `403 forbidden`; one it may take answers
//! anything else (a missing resource is 404: the gate let it through).

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::console::{send, signed_in};
use crate::harness::{Joch, NS};

const ROOT: &str = "root-secret-for-gate-tests";
const ROLES: [&str; 3] = ["agent", "approver", "admin"];

/// Who may: agent, approver, admin.
type May = (bool, bool, bool);
const ALL: May = (true, true, true);
const APPROVERS: May = (false, true, true);
const ADMIN: May = (false, false, true);

fn tool(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"description": "", "inputSchema": {"type": "object"}, "sideEffects": {"requiresApproval": true}, "backend": {"type": "noop"}}})
}

/// `(method, path below the namespace, body, who may)`; `{role}` in a path
/// or body is the role asking, so that each writes its own resource.
fn rest_actions() -> Vec<(Method, String, Option<Value>, May)> {
    let policy = json!({"metadata": {"name": "p-{role}"}, "spec": {"version": "1", "rules": [{"action": "allow"}]}});
    let call = json!({"metadata": {"name": "c-{role}"}, "spec": {"toolRef": {"name": "gated"}}});
    let resolve = json!({"phase": "Failed", "reason": "gate test"});
    let rows = [
        (Method::POST, "toolcalls?wait=false", Some(call), ALL),
        (Method::GET, "toolcalls", None, ALL),
        (Method::POST, "toolcalls/none/cancel", None, ALL),
        (
            Method::PUT,
            "toolcalls/none",
            Some(json!({"metadata": {"name": "none"}, "spec": {"toolRef": {"name": "gated"}}})),
            ADMIN,
        ),
        (
            Method::POST,
            "toolcalls/none/replay",
            Some(json!({})),
            ADMIN,
        ),
        (Method::POST, "toolcalls/none/resolve", Some(resolve), ADMIN),
        (Method::POST, "executions/none/complete", None, ALL),
        (
            Method::POST,
            "approvals/waiting/deny",
            Some(json!({"message": "no"})),
            APPROVERS,
        ),
        (Method::GET, "tools", None, ALL),
        (Method::POST, "tools", Some(tool("t-{role}")), ADMIN),
        (Method::DELETE, "tools/none", None, ADMIN),
        (Method::GET, "executions", None, ALL),
        (Method::GET, "executions/none/events", None, ALL),
        (
            Method::POST,
            "executions",
            Some(json!({"metadata": {"name": "e-{role}"}, "spec": {}})),
            ADMIN,
        ),
        (Method::GET, "approvals", None, ALL),
        (Method::GET, "callcontexts/none", None, ALL),
        (Method::GET, "artifacts/none", None, ALL),
        (Method::GET, "policies", None, APPROVERS),
        (Method::POST, "policies", Some(policy.clone()), ADMIN),
        (
            Method::POST,
            "policies/test",
            Some(json!({"policy": policy})),
            ADMIN,
        ),
        (Method::GET, "standingapprovals", None, APPROVERS),
        (Method::DELETE, "standingapprovals/none", None, ADMIN),
        (Method::GET, "endpoints", None, APPROVERS),
        (Method::DELETE, "endpoints/none", None, ADMIN),
        (Method::GET, "budgets", None, APPROVERS),
        (Method::DELETE, "budgets/none", None, ADMIN),
        (Method::GET, "mcpservers", None, APPROVERS),
        (Method::DELETE, "mcpservers/none", None, ADMIN),
        (Method::POST, "mcpservers/none/refresh", None, ADMIN),
        (
            Method::POST,
            "mcpservers/none/accept",
            Some(json!({})),
            ADMIN,
        ),
        (Method::GET, "", None, APPROVERS),
        (
            Method::PUT,
            "",
            Some(json!({"metadata": {"name": NS}, "spec": {}})),
            ADMIN,
        ),
        (Method::GET, "tokens", None, ADMIN),
        (
            Method::POST,
            "tokens",
            Some(json!({"name": "k-{role}", "role": "agent"})),
            ADMIN,
        ),
        (Method::DELETE, "tokens/none", None, ADMIN),
        (Method::GET, "credentials", None, ADMIN),
        (Method::DELETE, "credentials/none", None, ADMIN),
        (Method::GET, "audit", None, APPROVERS),
        (Method::GET, "audit/verify", None, APPROVERS),
        (Method::GET, "audit/checkpoints", None, APPROVERS),
        (Method::GET, "costs", None, APPROVERS),
    ];
    rows.into_iter()
        .map(|(m, p, b, may)| (m, p.to_owned(), b, may))
        .collect()
}

fn allowed(may: May, role: &str) -> bool {
    match role {
        "agent" => may.0,
        "approver" => may.1,
        _ => may.2,
    }
}

async fn token(joch: &Joch, role: &str) -> String {
    let body = json!({"name": format!("{role}-token"), "role": role});
    let path = format!("/v1/namespaces/{NS}/tokens");
    let (status, created) = joch.send_as(ROOT, Method::POST, &path, Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["token"].as_str().unwrap().to_owned()
}

/// The csrf token of a signed-in console session.
async fn session_csrf(joch: &Joch, session: &str) -> String {
    let page = send(
        joch,
        Method::GET,
        &format!("/ui/inbox?ns={NS}"),
        session,
        "",
    )
    .await;
    let html = page.text().await.unwrap();
    let meta = html.split("name=\"csrf-token\" content=\"").nth(1).unwrap();
    meta[..meta.find('"').unwrap()].to_owned()
}

#[tokio::test]
async fn every_action_for_every_role_through_rest_and_the_console() {
    let joch = Joch::builder().env("JOCH_ADMIN_TOKEN", ROOT).start().await;
    let tools = format!("/v1/namespaces/{NS}/tools");
    let (status, body) = joch
        .send_as(ROOT, Method::POST, &tools, Some(tool("gated")))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // A call waiting for a person, made by root: every role may try to decide it.
    let waiting = json!({"metadata": {"name": "waiting"}, "spec": {"toolRef": {"name": "gated"}}});
    let calls = format!("/v1/namespaces/{NS}/toolcalls?wait=false");
    let (status, body) = joch
        .send_as(ROOT, Method::POST, &calls, Some(waiting))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    let mut wrong = Vec::new();
    for role in ROLES {
        let token = token(&joch, role).await;
        for (method, path, body, may) in rest_actions() {
            let path = format!("/v1/namespaces/{NS}/{path}")
                .trim_end_matches('/')
                .replace("{role}", role);
            let body =
                body.map(|b| serde_json::from_str(&b.to_string().replace("{role}", role)).unwrap());
            let (status, answer) = joch.send_as(&token, method.clone(), &path, body).await;
            let refused = status == StatusCode::FORBIDDEN;
            if refused == allowed(may, role) || (refused && answer["code"] != "forbidden") {
                wrong.push(format!("{role} {method} {path}: {status} {answer}"));
            }
        }
        // The console: its pages and its writes reach the same gate.
        let session = signed_in(&joch, &token).await;
        let csrf = session_csrf(&joch, &session).await;
        let console = [
            (Method::GET, "/ui/calls", "", ALL),
            (Method::GET, "/ui/executions", "", ALL),
            (Method::GET, "/ui/upstreams", "", APPROVERS),
            (Method::GET, "/ui/policies", "", APPROVERS),
            (Method::GET, "/ui/tokens", "", ADMIN),
            (Method::GET, "/ui/credentials", "", ADMIN),
            (Method::POST, "/ui/calls/none/replay", "", ADMIN),
            (
                Method::POST,
                "/ui/calls/none/resolve",
                "&phase=Failed&reason=gate",
                ADMIN,
            ),
            (Method::POST, "/ui/tokens/none/revoke", "", ADMIN),
            (Method::POST, "/ui/upstreams/none/accept", "&tool=t", ADMIN),
            (Method::POST, "/ui/credentials/none/revoke", "", ADMIN),
        ];
        for (method, path, fields, may) in console {
            let form = format!("csrf={csrf}{fields}");
            let page = send(
                &joch,
                method.clone(),
                &format!("{path}?ns={NS}"),
                &session,
                &form,
            )
            .await;
            let status = page.status();
            if (status == StatusCode::FORBIDDEN) == allowed(may, role) {
                let text = page.text().await.unwrap_or_default();
                wrong.push(format!(
                    "console {role} {method} {path}: {status} {text:.200}"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the gate answered wrongly:\n{}",
        wrong.join("\n")
    );
}
