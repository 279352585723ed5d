//! Authentication: bearer tokens bound to a namespace and a role; the root
//! token from the environment; approvers recorded by their token, never by
//! what a request claims.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS};

pub(crate) const ROOT: &str = "root-secret-for-tests";

pub(crate) async fn token(joch: &Joch, namespace: &str, name: &str, role: &str) -> String {
    let (status, created) = joch
        .send_as(
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
    let joch = Joch::builder().env("JOCH_ADMIN_TOKEN", ROOT).start().await;
    let tools = format!("/v1/namespaces/{NS}/tools");
    let calls = format!("/v1/namespaces/{NS}/toolcalls");

    let (status, body) = joch.get(&tools).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["code"], "unauthorized");
    let (status, _) = joch.send_as("wrong", Method::GET, &tools, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let agent = token(&joch, NS, "support-bot", "agent").await;
    let approver = token(&joch, NS, "alice", "approver").await;
    let admin = token(&joch, NS, "ops", "admin").await;
    let stranger = token(&joch, "elsewhere", "other-bot", "admin").await;

    let tool = json!({"metadata": {"name": "refund"}, "spec": {"description": "", "inputSchema": {"type": "object"}, "sideEffects": {"requiresApproval": true}, "backend": {"type": "noop"}}});
    let (status, _) = joch
        .send_as(&agent, Method::POST, &tools, Some(tool.clone()))
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "an agent cannot define tools"
    );
    let (status, _) = joch.send_as(&admin, Method::POST, &tools, Some(tool)).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = joch.send_as(&stranger, Method::GET, &tools, None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "other namespaces do not exist for it"
    );

    let call = json!({"metadata": {"name": "call-1"}, "spec": {"toolRef": {"name": "refund"}}});
    let (status, accepted) = joch
        .send_as(
            &agent,
            Method::POST,
            &format!("{calls}?wait=false"),
            Some(call),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");

    let approve = format!("/v1/namespaces/{NS}/approvals/call-1/approve");
    let claim = json!({"approvedBy": "the-ceo"});
    let (status, _) = joch
        .send_as(&agent, Method::POST, &approve, Some(claim.clone()))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "an agent cannot approve");
    let (status, approval) = joch
        .send_as(&approver, Method::POST, &approve, Some(claim))
        .await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    assert_eq!(
        approval["status"]["decidedBy"], "alice",
        "the token, not the claim"
    );

    let (status, _) = joch
        .send_as(
            &admin,
            Method::DELETE,
            &format!("/v1/namespaces/{NS}/tokens/support-bot"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = joch.send_as(&agent, Method::GET, &tools, None).await;
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
    let joch = Joch::builder().env("JOCH_ADMIN_TOKEN", ROOT).start().await;
    let approver = token(&joch, NS, "alice", "approver").await;
    let tool = json!({"metadata": {"name": "refund"}, "spec": {"description": "", "inputSchema": {"type": "object"}, "sideEffects": {"requiresApproval": true}, "backend": {"type": "noop"}}});
    joch.send_as(
        ROOT,
        Method::POST,
        &format!("/v1/namespaces/{NS}/tools"),
        Some(tool),
    )
    .await;
    let call = json!({"metadata": {"name": "mine"}, "spec": {"toolRef": {"name": "refund"}}});
    let (status, _) = joch
        .send_as(
            &approver,
            Method::POST,
            &format!("/v1/namespaces/{NS}/toolcalls?wait=false"),
            Some(call),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, body) = joch
        .send_as(
            &approver,
            Method::POST,
            &format!("/v1/namespaces/{NS}/approvals/mine/approve"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["message"].as_str().unwrap().contains("a call it made"));
}

/// A test identity provider: an HS256 key published as a JWKS file, and
/// the JWTs it signs for `carol@example.com` in [`NS`].
struct Idp {
    dir: tempfile::TempDir,
}

impl Idp {
    const ISSUER: &'static str = "https://idp.example";
    const SECRET: &'static [u8] = b"a-shared-secret-of-the-test-identity-provider";

    fn new() -> Idp {
        let dir = tempfile::tempdir().unwrap();
        // base64url of the secret, as a JWK of type "oct".
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut k = String::new();
        for chunk in Idp::SECRET.chunks(3) {
            let n =
                chunk.iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                k.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        let jwks = json!({"keys": [{"kty": "oct", "kid": "idp-1", "alg": "HS256", "k": k}]});
        std::fs::write(dir.path().join("jwks.json"), jwks.to_string()).unwrap();
        Idp { dir }
    }

    fn jwks(&self) -> String {
        self.dir
            .path()
            .join("jwks.json")
            .to_str()
            .unwrap()
            .to_owned()
    }

    /// A JWT for `aud`, expiring `ttl` seconds from now (negative: expired).
    fn jwt(&self, aud: &str, ttl: i64, role: &str) -> String {
        self.jwt_with(aud, ttl, role, json!({}))
    }

    /// [`Idp::jwt`] with more claims.
    fn jwt_with(&self, aud: &str, ttl: i64, role: &str, extra: Value) -> String {
        use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("idp-1".to_owned());
        let exp = chrono::Utc::now().timestamp() + ttl;
        let mut claims = json!({"sub": "carol@example.com", "iss": Idp::ISSUER, "aud": aud, "exp": exp, "namespace": NS, "role": role});
        claims
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap_or_default());
        encode(&header, &claims, &EncodingKey::from_secret(Idp::SECRET)).unwrap()
    }
}

#[tokio::test]
async fn jwts_of_the_identity_provider_authenticate_with_their_claims() {
    let idp = Idp::new();
    let jwks = idp.jwks();
    let joch = Joch::builder()
        .args(&[
            "--jwt-issuer",
            Idp::ISSUER,
            "--jwt-audience",
            "joch",
            "--jwt-jwks",
            &jwks,
        ])
        .start()
        .await;
    let tools = format!("/v1/namespaces/{NS}/tools");
    let (status, body) = joch
        .send_as(&idp.jwt("joch", 600, "approver"), Method::GET, &tools, None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let tool = json!({"metadata": {"name": "t"}, "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}});
    let (status, _) = joch
        .send_as(
            &idp.jwt("joch", 600, "approver"),
            Method::POST,
            &tools,
            Some(tool.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "the role claim applies");
    let (status, _) = joch
        .send_as(
            &idp.jwt("joch", 600, "admin"),
            Method::POST,
            &tools,
            Some(tool),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    for (why, token) in [
        ("another audience", idp.jwt("someone-else", 600, "admin")),
        (
            "joch's own URL, when the audience is configured",
            idp.jwt(&joch.base, 600, "admin"),
        ),
        ("expired", idp.jwt("joch", -600, "admin")),
    ] {
        let (status, _) = joch.send_as(&token, Method::GET, &tools, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{why}");
    }
    let (status, _) = joch
        .send_as(
            &idp.jwt("joch", 600, "admin"),
            Method::GET,
            "/v1/namespaces/elsewhere/tools",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the namespace claim applies");

    // The joch_tools claim is the JWT's tool selector.
    let limited = idp.jwt_with(
        "joch",
        600,
        "agent",
        json!({"joch_tools": {"names": ["crm.*"]}}),
    );
    let (status, list) = joch.send_as(&limited, Method::GET, &tools, None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["items"], json!([]), "t is not crm.*: {list}");
    let call = json!({"metadata": {"name": "jwt-hidden"}, "spec": {"toolRef": {"name": "t"}}});
    let calls = format!("/v1/namespaces/{NS}/toolcalls");
    let (status, body) = joch
        .send_as(&limited, Method::POST, &calls, Some(call))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("tool_not_found")),
        "{body}"
    );
    let admin = idp.jwt("joch", 600, "admin");
    let (_, refused) = joch
        .send_as(&admin, Method::GET, &format!("{calls}/jwt-hidden"), None)
        .await;
    assert_eq!(
        refused["status"]["principal"],
        json!({"kind": "jwt", "name": "carol@example.com", "role": "agent"})
    );
}

/// A JWT whose `namespace` claim lists several acts in each, and nowhere else.
#[tokio::test]
async fn a_jwt_acts_in_each_namespace_it_claims() {
    let idp = Idp::new();
    let jwks = idp.jwks();
    let joch = Joch::builder()
        .args(&["--jwt-issuer", Idp::ISSUER, "--jwt-audience", "joch"])
        .args(&["--jwt-jwks", &jwks])
        .start()
        .await;
    let both = idp.jwt_with(
        "joch",
        600,
        "approver",
        json!({"namespace": [NS, "payments"]}),
    );
    for (ns, expected) in [
        (NS, StatusCode::OK),
        ("payments", StatusCode::OK),
        ("elsewhere", StatusCode::NOT_FOUND),
    ] {
        let path = format!("/v1/namespaces/{ns}/tools");
        let (status, body) = joch.send_as(&both, Method::GET, &path, None).await;
        assert_eq!(status, expected, "{ns}: {body}");
    }
    let none = idp.jwt_with("joch", 600, "approver", json!({"namespace": []}));
    let path = format!("/v1/namespaces/{NS}/tools");
    let (status, _) = joch.send_as(&none, Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a JWT of no namespace");
}

/// Opens an MCP session at `url` (an `initialize`), with `token` if any.
async fn mcp_initialize(joch: &Joch, url: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = joch
        .http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "e2e", "version": "0"}}}),
        );
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

fn challenge_of(answer: &reqwest::Response) -> &str {
    answer.headers()["www-authenticate"].to_str().unwrap()
}

#[tokio::test]
async fn mcp_clients_discover_the_identity_provider_from_the_challenge() {
    let idp = Idp::new();
    let jwks = idp.jwks();
    let joch = Joch::builder()
        .args(&["--jwt-issuer", Idp::ISSUER, "--jwt-jwks", &jwks])
        .start()
        .await;
    let base = &joch.base;
    let mcp = format!("{base}/v1/namespaces/{NS}/mcp");
    let metadata = format!("{base}/.well-known/oauth-protected-resource");

    let answer = mcp_initialize(&joch, &mcp, None).await;
    assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        challenge_of(&answer),
        format!(r#"Bearer resource_metadata="{metadata}/v1/namespaces/{NS}/mcp""#)
    );
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["code"], "unauthorized", "errors stay JSON: {body}");
    let answer = mcp_initialize(&joch, &format!("{base}/mcp"), Some("not-a-token")).await;
    assert_eq!(
        challenge_of(&answer),
        format!(r#"Bearer resource_metadata="{metadata}/mcp", error="invalid_token""#)
    );
    let answer = joch
        .http
        .get(format!("{base}/v1/namespaces/{NS}/tools"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        challenge_of(&answer),
        format!(r#"Bearer resource_metadata="{metadata}""#),
        "other routes point at joch's own metadata"
    );

    for (suffix, resource) in [
        (format!("/v1/namespaces/{NS}/mcp"), mcp.clone()),
        ("/mcp".to_owned(), format!("{base}/mcp")),
        (String::new(), base.clone()),
    ] {
        let (status, doc) = joch
            .get(&format!("/.well-known/oauth-protected-resource{suffix}"))
            .await;
        assert_eq!(status, StatusCode::OK, "{suffix}: {doc}");
        assert_eq!(doc["resource"], resource.as_str(), "{suffix}");
        assert_eq!(doc["authorization_servers"], json!([Idp::ISSUER]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }
    let (status, doc) = joch
        .get("/.well-known/oauth-protected-resource/v1/namespaces/Not_A_Namespace/mcp")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{doc}");
    assert_eq!(doc["code"], "bad_request");

    for (aud, expected) in [
        (mcp.clone(), StatusCode::OK),
        (format!("{base}/mcp"), StatusCode::OK),
        (format!("{base}/"), StatusCode::OK),
        (
            format!("{base}/v1/namespaces/elsewhere/mcp"),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "https://another.example/mcp".to_owned(),
            StatusCode::UNAUTHORIZED,
        ),
        ("joch".to_owned(), StatusCode::UNAUTHORIZED),
    ] {
        let answer = mcp_initialize(&joch, &mcp, Some(&idp.jwt(&aud, 600, "agent"))).await;
        assert_eq!(answer.status(), expected, "aud {aud}");
    }
}
