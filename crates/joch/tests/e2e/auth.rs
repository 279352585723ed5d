//! Authentication: bearer tokens bound to a namespace and a role; the root
//! token from the environment; approvers recorded by their token, never by
//! what a request claims.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS};

const ROOT: &str = "root-secret-for-tests";

async fn as_token(
    joch: &Joch,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = joch
        .http
        .request(method, format!("{}{path}", joch.base))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn token(joch: &Joch, namespace: &str, name: &str, role: &str) -> String {
    let (status, created) = as_token(
        joch,
        ROOT,
        Method::POST,
        &format!("/v1/namespaces/{namespace}/tokens"),
        Some(json!({"name": name, "role": role})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert!(
        created["spec"].get("hash").is_none(),
        "the hash is not shown"
    );
    created["token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn tokens_bind_a_namespace_and_a_role() {
    let joch = Joch::start_with_env(&[("JOCH_ADMIN_TOKEN", ROOT)]).await;
    let tools = format!("/v1/namespaces/{NS}/tools");
    let calls = format!("/v1/namespaces/{NS}/toolcalls");

    let (status, body) = joch.get(&tools).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["code"], "unauthorized");
    let (status, _) = as_token(&joch, "wrong", Method::GET, &tools, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let agent = token(&joch, NS, "support-bot", "agent").await;
    let approver = token(&joch, NS, "alice", "approver").await;
    let admin = token(&joch, NS, "ops", "admin").await;
    let stranger = token(&joch, "elsewhere", "other-bot", "admin").await;

    let tool = json!({"metadata": {"name": "refund"}, "spec": {"description": "", "inputSchema": {"type": "object"}, "sideEffects": {"requiresApproval": true}, "backend": {"type": "noop"}}});
    let (status, _) = as_token(&joch, &agent, Method::POST, &tools, Some(tool.clone())).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "an agent cannot define tools"
    );
    let (status, _) = as_token(&joch, &admin, Method::POST, &tools, Some(tool)).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = as_token(&joch, &stranger, Method::GET, &tools, None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "other namespaces do not exist for it"
    );

    let call = json!({"metadata": {"name": "call-1"}, "spec": {"toolRef": {"name": "refund"}}});
    let (status, accepted) = as_token(
        &joch,
        &agent,
        Method::POST,
        &format!("{calls}?wait=false"),
        Some(call),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");

    let approve = format!("/v1/namespaces/{NS}/approvals/call-1/approve");
    let claim = json!({"approvedBy": "the-ceo"});
    let (status, _) = as_token(&joch, &agent, Method::POST, &approve, Some(claim.clone())).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "an agent cannot approve");
    let (status, approval) = as_token(&joch, &approver, Method::POST, &approve, Some(claim)).await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    assert_eq!(
        approval["status"]["decidedBy"], "alice",
        "the token, not the claim"
    );

    let (status, _) = as_token(
        &joch,
        &admin,
        Method::DELETE,
        &format!("/v1/namespaces/{NS}/tokens/support-bot"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = as_token(&joch, &agent, Method::GET, &tools, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "revoked");

    // The MCP endpoint is behind the same door, namespaces included.
    let elsewhere = joch
        .http
        .post(format!("{}/v1/namespaces/elsewhere/mcp", joch.base))
        .bearer_auth(&approver)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), StatusCode::NOT_FOUND);
    let mcp = joch
        .http
        .post(format!("{}/v1/namespaces/{NS}/mcp", joch.base))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), StatusCode::UNAUTHORIZED);

    // The CLI carries a token from JOCH_TOKEN.
    let listed = std::process::Command::new(env!("CARGO_BIN_EXE_joch"))
        .args(["token", "list", "-n", NS])
        .env("JOCH_SERVER", &joch.base)
        .env("JOCH_TOKEN", &admin)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(
        text.contains("alice\tapprover") && !text.contains("support-bot"),
        "{text}"
    );
}

#[tokio::test]
async fn an_approver_cannot_decide_on_its_own_call() {
    let joch = Joch::start_with_env(&[("JOCH_ADMIN_TOKEN", ROOT)]).await;
    let approver = token(&joch, NS, "alice", "approver").await;
    let tool = json!({"metadata": {"name": "refund"}, "spec": {"description": "", "inputSchema": {"type": "object"}, "sideEffects": {"requiresApproval": true}, "backend": {"type": "noop"}}});
    as_token(
        &joch,
        ROOT,
        Method::POST,
        &format!("/v1/namespaces/{NS}/tools"),
        Some(tool),
    )
    .await;
    let call = json!({"metadata": {"name": "mine"}, "spec": {"toolRef": {"name": "refund"}}});
    let (status, _) = as_token(
        &joch,
        &approver,
        Method::POST,
        &format!("/v1/namespaces/{NS}/toolcalls?wait=false"),
        Some(call),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, body) = as_token(
        &joch,
        &approver,
        Method::POST,
        &format!("/v1/namespaces/{NS}/approvals/mine/approve"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["message"].as_str().unwrap().contains("a call it made"));
}

#[tokio::test]
async fn jwts_of_the_identity_provider_authenticate_with_their_claims() {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    let secret = b"a-shared-secret-of-the-test-identity-provider";
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    // base64url of the secret, as a JWK of type "oct".
    let k = {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in secret.chunks(3) {
            let n =
                chunk.iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    };
    std::fs::write(
        &jwks,
        json!({"keys": [{"kty": "oct", "kid": "idp-1", "alg": "HS256", "k": k}]}).to_string(),
    )
    .unwrap();
    let joch = Joch::start_with(&[
        "--jwt-issuer",
        "https://idp.example",
        "--jwt-audience",
        "joch",
        "--jwt-jwks",
        jwks.to_str().unwrap(),
    ])
    .await;
    let now = chrono::Utc::now().timestamp();
    let jwt = |aud: &str, exp: i64, role: &str| {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("idp-1".to_owned());
        let claims = json!({"sub": "carol@example.com", "iss": "https://idp.example", "aud": aud, "exp": exp, "namespace": NS, "role": role});
        encode(&header, &claims, &EncodingKey::from_secret(secret)).unwrap()
    };
    let tools = format!("/v1/namespaces/{NS}/tools");
    let (status, body) = as_token(
        &joch,
        &jwt("joch", now + 600, "approver"),
        Method::GET,
        &tools,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let tool = json!({"metadata": {"name": "t"}, "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}});
    let (status, _) = as_token(
        &joch,
        &jwt("joch", now + 600, "approver"),
        Method::POST,
        &tools,
        Some(tool.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "the role claim applies");
    let (status, _) = as_token(
        &joch,
        &jwt("joch", now + 600, "admin"),
        Method::POST,
        &tools,
        Some(tool),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    for (why, token) in [
        ("another audience", jwt("someone-else", now + 600, "admin")),
        ("expired", jwt("joch", now - 600, "admin")),
    ] {
        let (status, _) = as_token(&joch, &token, Method::GET, &tools, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{why}");
    }
    let (status, _) = as_token(
        &joch,
        &jwt("joch", now + 600, "admin"),
        Method::GET,
        "/v1/namespaces/elsewhere/tools",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the namespace claim applies");
}
