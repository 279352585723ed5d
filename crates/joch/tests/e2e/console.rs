//! The console's guard over HTTP, without a browser: sign-in, session and
//! CSRF cookies, refusals as structured JSON. (The pages themselves are
//! driven in Chromium by tests/interop/test_console.py.)

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Client, Method, Response, StatusCode};
use serde_json::Value;

use crate::harness::Joch;

const ROOT: &str = "root-secret-for-the-console";

fn client() -> Client {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The `name=value` of a `Set-Cookie` the answer carries, and its attributes.
fn set_cookie(response: &Response, name: &str) -> Option<(String, String)> {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| {
            let (pair, attributes) = v.split_once(';').unwrap_or((v, ""));
            (pair.to_owned(), attributes.to_owned())
        })
}

async fn json(response: Response) -> (StatusCode, Value) {
    let status = response.status();
    (status, response.json().await.unwrap())
}

pub(crate) async fn send(
    joch: &Joch,
    method: Method,
    path: &str,
    cookie: &str,
    form: &str,
) -> Response {
    client()
        .request(method, format!("{}{path}", joch.base))
        .header(COOKIE, cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form.to_owned())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn sign_in_sessions_and_csrf_are_guarded() {
    let joch = Joch::builder().env("JOCH_ADMIN_TOKEN", ROOT).start().await;
    let page = send(&joch, Method::GET, "/ui/inbox", "", "").await;
    assert_eq!(page.status(), StatusCode::SEE_OTHER);
    assert_eq!(page.headers()[LOCATION], "/ui/signin");
    let action = send(
        &joch,
        Method::POST,
        "/ui/approvals/a/decide",
        "",
        "verb=approve",
    )
    .await;
    assert_eq!(json(action).await.1["code"], "unauthorized");

    let form = send(&joch, Method::GET, "/ui/signin", "", "").await;
    let (csrf, attributes) = set_cookie(&form, "joch_csrf").expect("a CSRF cookie");
    assert!(attributes.contains("HttpOnly") && attributes.contains("SameSite=Strict"));
    assert!(!attributes.contains("Secure"), "plain http: {attributes}");
    let token = csrf.trim_start_matches("joch_csrf=");
    let forged = send(
        &joch,
        Method::POST,
        "/ui/signin",
        &csrf,
        &format!("csrf=x&token={ROOT}"),
    )
    .await;
    assert_eq!(
        json(forged).await,
        (StatusCode::FORBIDDEN, json_error("csrf_refused"))
    );
    let wrong = send(
        &joch,
        Method::POST,
        "/ui/signin",
        &csrf,
        &format!("csrf={token}&token=nope"),
    )
    .await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

    let signed = send(
        &joch,
        Method::POST,
        "/ui/signin",
        &csrf,
        &format!("csrf={token}&token={ROOT}"),
    )
    .await;
    assert_eq!(signed.status(), StatusCode::SEE_OTHER);
    let (session, attributes) = set_cookie(&signed, "joch_session").expect("a session cookie");
    assert!(attributes.contains("HttpOnly") && attributes.contains("SameSite=Strict"));
    assert!(attributes.contains("Max-Age=28800"), "{attributes}");
    let inbox = send(&joch, Method::GET, "/ui/inbox", &session, "").await;
    assert_eq!(inbox.status(), StatusCode::OK);
    let html = inbox.text().await.unwrap();
    let meta = html.split("name=\"csrf-token\" content=\"").nth(1).unwrap();
    let session_csrf = &meta[..meta.find('"').unwrap()];

    let bare = send(
        &joch,
        Method::POST,
        "/ui/approvals/a/decide",
        &session,
        "verb=approve",
    )
    .await;
    assert_eq!(
        json(bare).await,
        (StatusCode::FORBIDDEN, json_error("csrf_refused"))
    );
    let visitor = send(
        &joch,
        Method::POST,
        "/ui/approvals/a/decide",
        &session,
        &format!("verb=approve&csrf={token}"),
    )
    .await;
    assert_eq!(
        json(visitor).await.1["code"],
        "csrf_refused",
        "a session has its own token"
    );
    let decided = send(
        &joch,
        Method::POST,
        "/ui/approvals/a/decide",
        &session,
        &format!("verb=approve&csrf={session_csrf}"),
    )
    .await;
    assert_eq!(
        json(decided).await.1["code"],
        "approval_not_found",
        "past the guard, the engine answers"
    );
    let bad = send(
        &joch,
        Method::POST,
        "/ui/approvals/a/decide",
        &session,
        &format!("verb=maybe&csrf={session_csrf}"),
    )
    .await;
    assert_eq!(json(bad).await.0, StatusCode::UNPROCESSABLE_ENTITY);

    let out = send(
        &joch,
        Method::POST,
        "/ui/signout",
        &session,
        &format!("csrf={session_csrf}"),
    )
    .await;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert!(
        set_cookie(&out, "joch_session")
            .unwrap()
            .1
            .contains("Max-Age=0")
    );
    let after = send(&joch, Method::GET, "/ui/inbox", &session, "").await;
    assert_eq!(
        after.headers()[LOCATION],
        "/ui/signin",
        "signed out for good"
    );
}

fn json_error(code: &str) -> Value {
    let message = "this form or action lacks its CSRF token; reload the page and try again";
    serde_json::json!({"code": code, "message": message, "details": {}})
}

#[tokio::test]
async fn the_console_is_embedded_and_local_without_authentication() {
    let joch = Joch::builder()
        .args(&["--public-url", "https://joch.example"])
        .start()
        .await;
    let page = send(&joch, Method::GET, "/ui/inbox", "", "").await;
    assert_eq!(
        page.status(),
        StatusCode::OK,
        "loopback without auth: as the API"
    );
    let (_, attributes) = set_cookie(&page, "joch_csrf").unwrap();
    assert!(attributes.contains("Secure"), "behind https: {attributes}");
    assert!(page.text().await.unwrap().contains("local · admin"));
    let script = send(&joch, Method::GET, "/ui/assets/htmx.js", "", "").await;
    assert_eq!(script.headers()["content-type"], "text/javascript");
    assert!(script.text().await.unwrap().contains("htmx"));
    let missing = send(&joch, Method::GET, "/ui/assets/nope.js", "", "").await;
    assert_eq!(json(missing).await.1["code"], "not_found");
}

/// Reads the SSE answer until an `inbox` event's data satisfies `wanted`.
async fn next_inbox(stream: &mut Response, wanted: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    let read = async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = text.find("\n\n") {
                let event: String = text.drain(..end + 2).collect();
                if event.contains("event: inbox") && wanted(&event) {
                    return event;
                }
            }
        }
        panic!("the stream ended");
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .expect("an inbox event in time")
}

/// On PostgreSQL, a replica's inbox hears of approvals opened and decided on
/// another replica at once (LISTEN/NOTIFY), not at its next re-read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_inbox_follows_another_replicas_approvals() {
    let Some(store) = crate::replicas::fresh_database("console_inbox").await else {
        return;
    };
    let (a, b) = tokio::join!(
        crate::replicas::replica(&store),
        crate::replicas::replica(&store)
    );
    let webhook = crate::harness::Webhook::start().await;
    let effects = serde_json::json!({"level": "external_write", "requiresApproval": true});
    b.create_tool(crate::harness::rest_tool(
        "held",
        &format!("{}/ok", webhook.base),
        effects,
    ))
    .await;
    let path = format!("/ui/inbox/stream?ns={}", crate::harness::NS);
    let mut stream = send(&a, Method::GET, &path, "", "").await;
    next_inbox(&mut stream, |e| e.contains("No call is waiting")).await;

    let call = serde_json::json!({"metadata": {"name": "held-1"}, "spec": {"toolRef": {"name": "held"}, "input": {}}});
    let path = format!("/v1/namespaces/{}/toolcalls?wait=false", crate::harness::NS);
    let (status, _) = b.send(Method::POST, &path, Some(call)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let opened = std::time::Instant::now();
    next_inbox(&mut stream, |e| e.contains("data-approval=\"held-1\"")).await;
    let heard = opened.elapsed();
    assert!(
        heard < std::time::Duration::from_millis(2_500),
        "heard after {heard:?}, not at once"
    );

    let path = format!(
        "/v1/namespaces/{}/approvals/held-1/approve",
        crate::harness::NS
    );
    let (status, _) = b
        .send(
            Method::POST,
            &path,
            Some(serde_json::json!({"approvedBy": "bea"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    next_inbox(&mut stream, |e| e.contains("No call is waiting")).await;
}

/// A measurement, not a check run by default: the ledger page's first page
/// (and a filtered one, and the next page) over a store of a million
/// settled calls, as `joch serve` answers them. Writes the ledger first
/// (minutes in a debug build). `JOCH_LEDGER_CALLS` sets the size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement over a million-call store; run with --ignored --nocapture"]
async fn the_ledger_pages_of_a_million_calls() {
    use std::sync::Arc;
    use std::time::Instant;

    let calls: usize = std::env::var("JOCH_LEDGER_CALLS").map_or(1_000_000, |n| n.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("joch.db");
    let store: Arc<dyn joch_store::Store> = Arc::new(joch_store::SqliteStore::open(&db).unwrap());
    let started = Instant::now();
    let mut writers = Vec::new();
    for w in 0..16 {
        let store = Arc::clone(&store);
        writers.push(tokio::spawn(async move {
            for i in (w..calls).step_by(16) {
                let input = serde_json::json!({"q": i % 100});
                let mut call = joch_core::ToolCall::of(
                    format!("call-{i:08}"),
                    format!("tool-{}", i % 20),
                    input,
                );
                call.metadata.namespace = crate::harness::NS.to_owned();
                call.metadata.creation_timestamp = Some(joch_core::Time(chrono::Utc::now()));
                call.spec.agent_ref = Some(joch_core::ObjectRef::new(format!("agent-{}", i % 5)));
                call.status.phase = if i % 50 == 0 {
                    joch_core::Phase::Failed
                } else {
                    joch_core::Phase::Succeeded
                };
                store
                    .create_object(&mut call, joch_store::Durability::Deferred)
                    .await
                    .unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let mut last = joch_core::ToolCall::of("call-last", "tool-0", serde_json::json!({}));
    last.metadata.namespace = crate::harness::NS.to_owned();
    store
        .create_object(&mut last, joch_store::Durability::Sync)
        .await
        .unwrap();
    drop(store);
    eprintln!(
        "wrote {calls} calls in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let joch = Joch::builder().db(&db).start().await;
    let ns = crate::harness::NS;
    // A second of the ledger a tenth of the way in: far older than the
    // newest page, so the seq order alone would read 900,000 calls first.
    let early =
        chrono::Utc::now() - chrono::Duration::from_std(started.elapsed().mul_f64(0.9)).unwrap();
    let second = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let range = format!(
        "&from={}&to={}",
        second(early),
        second(early + chrono::Duration::seconds(1))
    );
    let since = format!("&from={}", second(early));
    let ranged_tool = format!("{range}&tool=tool-3");
    for (what, query) in [
        ("first page", ""),
        ("by agent", "&agent=agent-3"),
        ("by tool and phase", "&tool=tool-0&phase=Failed"),
        ("matching nothing", "&tool=tool-7&phase=Failed"),
        ("a second, 10% in", range.as_str()),
        ("since 10% in", since.as_str()),
        ("a second, 10% in, one tool", ranged_tool.as_str()),
    ] {
        let mut times = Vec::new();
        let mut next = None;
        for _ in 0..21 {
            let t = Instant::now();
            let path = format!("/ui/calls?ns={ns}{query}");
            let page = send(&joch, Method::GET, &path, "", "").await;
            assert_eq!(page.status(), StatusCode::OK);
            let html = page.text().await.unwrap();
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            next = next_page(&html);
        }
        times.sort_by(f64::total_cmp);
        // The next page, and the 20th: keyset paging does not slow down.
        let (mut next_ms, mut twentieth_ms) = (f64::NAN, f64::NAN);
        for n in 2..=20 {
            let Some(query) = next.take() else { break };
            let t = Instant::now();
            let page = send(&joch, Method::GET, &format!("/ui/calls?{query}"), "", "").await;
            assert_eq!(page.status(), StatusCode::OK);
            next = next_page(&page.text().await.unwrap());
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            match n {
                2 => next_ms = ms,
                20 => twentieth_ms = ms,
                _ => {}
            }
        }
        eprintln!(
            "{what}: p50 {:.1} ms, max {:.1} ms; next page {next_ms:.1} ms, 20th {twentieth_ms:.1} ms",
            times[10], times[20]
        );
    }
    // The overview: every call is within its hour, so each bucket is
    // counted on the index and sampled.
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let page = send(&joch, Method::GET, &format!("/ui/overview?ns={ns}"), "", "").await;
        assert_eq!(page.status(), StatusCode::OK);
        let _ = page.text().await.unwrap();
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    eprintln!("overview: p50 {:.1} ms, max {:.1} ms", times[2], times[4]);
}

/// The query of the page's "Next page" link, if it has one.
fn next_page(html: &str) -> Option<String> {
    let before = html
        .split("\" rel=\"next\"")
        .next()
        .filter(|_| html.contains("rel=\"next\""))?;
    let query = before.rsplit("href=\"/ui/calls?").next()?;
    Some(query.replace("&amp;", "&"))
}

/// The session cookie of a console signed in with `token`.
pub(crate) async fn signed_in(joch: &Joch, token: &str) -> String {
    let form = send(joch, Method::GET, "/ui/signin", "", "").await;
    let (csrf, _) = set_cookie(&form, "joch_csrf").expect("a CSRF cookie");
    let value = csrf.trim_start_matches("joch_csrf=").to_owned();
    let body = format!("csrf={value}&token={token}");
    let signed = send(joch, Method::POST, "/ui/signin", &csrf, &body).await;
    assert_eq!(signed.status(), StatusCode::SEE_OTHER);
    set_cookie(&signed, "joch_session").expect("a session").0
}

/// Reading policies is the engine's rule, asked by the REST gate and the
/// console page alike: an agent is refused on both, an approver reads both.
#[tokio::test]
async fn reading_policies_is_one_rule_on_both_surfaces() {
    use crate::auth::{ROOT as API_ROOT, token};
    let joch = Joch::builder()
        .env("JOCH_ADMIN_TOKEN", API_ROOT)
        .start()
        .await;
    let ns = crate::harness::NS;
    for (role, allowed) in [("agent", false), ("approver", true)] {
        let secret = token(&joch, ns, &format!("a-{role}"), role).await;
        let path = format!("/v1/namespaces/{ns}/policies");
        let (status, body) = joch.send_as(&secret, Method::GET, &path, None).await;
        let session = signed_in(&joch, &secret).await;
        let page = send(
            &joch,
            Method::GET,
            &format!("/ui/policies?ns={ns}"),
            &session,
            "",
        )
        .await;
        let overview = send(
            &joch,
            Method::GET,
            &format!("/ui/overview?ns={ns}"),
            &session,
            "",
        )
        .await;
        let overview = overview.text().await.unwrap();
        if allowed {
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(page.status(), StatusCode::OK);
            assert!(overview.contains("href=\"/ui/policies?"), "in the menu");
            assert!(overview.contains("Cost today"));
        } else {
            assert_eq!(status, StatusCode::FORBIDDEN);
            assert_eq!(
                body["message"],
                "a principal with role agent cannot read policies"
            );
            // The same refusal, as a page of the console.
            assert_eq!(page.status(), status);
            let html = page.text().await.unwrap();
            assert!(html.contains("<h1>Not allowed</h1>"), "{html}");
            let said = format!(
                "data-code=\"forbidden\">{}",
                body["message"].as_str().unwrap()
            );
            assert!(html.contains(&said), "{html}");
            assert!(
                !overview.contains("href=\"/ui/policies?"),
                "not in the menu"
            );
            assert!(!overview.contains("Cost today"), "costs are not read");
        }
    }
}

/// A principal of every namespace (the root token) may switch namespace
/// from every page, and the approvals page counts the calls waiting in
/// each, each a link there; a token bound to one namespace is offered none.
#[tokio::test]
async fn the_console_spans_the_namespaces_its_viewer_acts_in() {
    use crate::auth::{ROOT as API_ROOT, token};
    use crate::harness::NS;
    let joch = Joch::builder()
        .env("JOCH_ADMIN_TOKEN", API_ROOT)
        .start()
        .await;
    let mut tool = crate::harness::rest_tool(
        "wire",
        "http://127.0.0.1:9/",
        serde_json::json!({"level": "financial"}),
    );
    tool["spec"]["sideEffects"]["requiresApproval"] = true.into();
    let call = serde_json::json!({"spec": {"toolRef": {"name": "wire"}, "input": {}}});
    for (ns, calls) in [("payments", 2), (NS, 1)] {
        let path = format!("/v1/namespaces/{ns}/tools");
        let (status, body) = joch
            .send_as(API_ROOT, Method::POST, &path, Some(tool.clone()))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let path = format!("/v1/namespaces/{ns}/toolcalls?wait=false");
        for _ in 0..calls {
            let (_, made) = joch
                .send_as(API_ROOT, Method::POST, &path, Some(call.clone()))
                .await;
            assert_eq!(made["status"]["phase"], "AwaitingApproval", "{made}");
        }
    }
    let page = |path: &'static str, session: String| {
        let joch = &joch;
        async move {
            let answer = send(joch, Method::GET, path, &session, "").await;
            assert_eq!(answer.status(), StatusCode::OK, "{path}");
            answer.text().await.unwrap()
        }
    };

    let root = signed_in(&joch, API_ROOT).await;
    let inbox = page("/ui/inbox?ns=default", root.clone()).await;
    assert!(
        inbox.contains(r#"<a href="/ui/inbox?ns=payments">payments</a> · 2 waiting"#),
        "{inbox}"
    );
    assert!(inbox.contains(&format!(
        r#"<a href="/ui/inbox?ns={NS}">{NS}</a> · 1 waiting"#
    )));
    assert!(inbox.contains(r#"aria-current="page">default</a> · 0 waiting"#));
    let ledger = page("/ui/calls?ns=payments", root).await;
    assert!(
        ledger.contains(r#"<form class="switch" method="get" action="/ui/calls">"#),
        "{ledger}"
    );

    let bound = token(&joch, NS, "one-namespace", "approver").await;
    let inbox = page("/ui/inbox?ns=payments", signed_in(&joch, &bound).await).await;
    assert!(!inbox.contains("payments") && !inbox.contains("Waiting by namespace"));
    assert!(!inbox.contains("class=\"switch\""), "{inbox}");
}
