//! Anonymous clients cannot grow the store (issue 34): sign-ins through the
//! identity provider are capped per client address, and expired sign-ins
//! and console sessions are swept, on SQLite and on PostgreSQL alike.

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, RETRY_AFTER, SET_COOKIE};
use serde_json::{Value, json};
use sqlx_core::connection::Connection;
use sqlx_core::row::Row;

use crate::harness::{Joch, TestStore};
use crate::storetest;

const ROOT: &str = "root-secret-for-the-sign-in-caps";
/// `--max-sign-ins-per-client`'s default.
const PER_CLIENT: usize = 20;

/// An identity provider that serves only its discovery document: enough
/// for joch to start sign-ins. Answers its issuer URL.
async fn discovery_only() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    let document = json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
    });
    let app = Router::new().route(
        "/.well-known/openid-configuration",
        get(move || std::future::ready(axum::Json(document.clone()))),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    issuer
}

/// joch on `store` with sign-in through `issuer`, sign-ins lasting `ttl`
/// seconds and swept every second.
async fn joch(store: &TestStore, issuer: &str, ttl: u64, jwks: &std::path::Path) -> Joch {
    let jwks_text = json!({"keys": [{"kty": "oct", "kid": "k", "alg": "HS256", "k": "c2VjcmV0"}]});
    std::fs::write(jwks, jwks_text.to_string()).unwrap();
    store
        .joch()
        .env("JOCH_ADMIN_TOKEN", ROOT)
        .args(&["--jwt-issuer", issuer, "--jwt-jwks", jwks.to_str().unwrap()])
        .args(&["--oidc-client-id", "joch-console"])
        .args(&["--sign-in-ttl-seconds", &ttl.to_string()])
        .args(&["--sign-in-sweep-seconds", "1"])
        .start()
        .await
}

/// Rows of `kind` in the store, read behind joch's back.
async fn rows(store: &TestStore, kind: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM objects WHERE kind = '{kind}'");
    match store {
        TestStore::Sqlite { db, .. } => {
            let conn = rusqlite::Connection::open(db).unwrap();
            conn.query_row(&sql, [], |row| row.get(0)).unwrap()
        }
        TestStore::Postgres(url) => {
            let mut conn = sqlx_postgres::PgConnection::connect(url).await.unwrap();
            let row = sqlx_core::query::query(&sql)
                .fetch_one(&mut conn)
                .await
                .unwrap();
            row.get(0)
        }
    }
}

/// Waits until `kind` has no rows left, at most `within`.
async fn swept(store: &TestStore, kind: &str, within: Duration) {
    let start = Instant::now();
    while rows(store, kind).await > 0 {
        assert!(start.elapsed() < within, "{kind} rows still stored");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `n` sign-in starts, 50 at a time: the answers' statuses, and one 429.
async fn start_sign_ins(joch: &Joch, n: usize) -> (Vec<StatusCode>, Option<(String, Value)>) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = format!("{}/ui/signin/oidc", joch.base);
    let (mut statuses, mut refusal) = (Vec::new(), None);
    for _ in 0..n / 50 {
        let mut starts = tokio::task::JoinSet::new();
        for _ in 0..50 {
            starts.spawn(client.get(&url).send());
        }
        while let Some(answer) = starts.join_next().await {
            let answer = answer.unwrap().unwrap();
            statuses.push(answer.status());
            if answer.status() == StatusCode::TOO_MANY_REQUESTS && refusal.is_none() {
                let after = answer.headers()[RETRY_AFTER].to_str().unwrap().to_owned();
                refusal = Some((after, answer.json().await.unwrap()));
            } else if answer.status().is_redirection() {
                let to = answer.headers()[LOCATION].to_str().unwrap();
                assert!(to.contains("/authorize?"), "{to}");
            }
        }
    }
    (statuses, refusal)
}

storetest!(anonymous_sign_ins_are_capped_and_swept, |store| {
    let issuer = discovery_only().await;
    let dir = tempfile::tempdir().unwrap();
    let ttl = 8;
    let joch = joch(&store, &issuer, ttl, &dir.path().join("jwks.json")).await;

    let began = Instant::now();
    let (statuses, refusal) = start_sign_ins(&joch, 1000).await;
    assert!(began.elapsed() < Duration::from_secs(ttl), "took too long");
    let started = statuses.iter().filter(|s| s.is_redirection()).count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((started, refused), (PER_CLIENT, 1000 - PER_CLIENT));
    let (after, body) = refusal.unwrap();
    assert_eq!(body["code"], "too_many_sign_ins", "{body}");
    assert!(body["message"].as_str().unwrap().contains("finish one"));
    let seconds: u64 = after.parse().unwrap();
    assert!((1..=ttl).contains(&seconds), "Retry-After: {after}");
    assert_eq!(body["details"]["retryAfterSeconds"], seconds);
    assert_eq!(rows(&store, "OidcSignIn").await, PER_CLIENT as i64);
    // The cap is the address's (the connection's peer): another loopback
    // address still gets its own.
    let elsewhere = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let answer = elsewhere
        .get(format!("{}/ui/signin/oidc", joch.base))
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_redirection(), "{}", answer.status());
    assert_eq!(rows(&store, "OidcSignIn").await, PER_CLIENT as i64 + 1);

    // Expired, they are swept (every second) without anyone asking again.
    swept(&store, "OidcSignIn", Duration::from_secs(ttl + 5)).await;
    let (statuses, _) = start_sign_ins(&joch, 50).await;
    let started = statuses.iter().filter(|s| s.is_redirection()).count();
    assert_eq!(started, PER_CLIENT, "room again once swept");
});

storetest!(an_expired_session_is_swept, |store| {
    let issuer = discovery_only().await;
    let dir = tempfile::tempdir().unwrap();
    let joch = joch(&store, &issuer, 600, &dir.path().join("jwks.json")).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let form = client
        .get(format!("{}/ui/signin", joch.base))
        .send()
        .await
        .unwrap();
    let cookie = form
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok()?.split(';').next())
        .find(|pair| pair.starts_with("joch_csrf="))
        .unwrap()
        .to_owned();
    let csrf = cookie.trim_start_matches("joch_csrf=").to_owned();
    let answer = client
        .post(format!("{}/ui/signin", joch.base))
        .header(COOKIE, &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}&token={ROOT}"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    assert_eq!(rows(&store, "ConsoleSession").await, 1);
    // Its expiry moved into the past behind joch's back: a session whose
    // browser never comes back.
    let sql = match &store {
        TestStore::Sqlite { .. } => {
            "UPDATE objects SET body = json_set(body, '$.expiresAtMs', 1) WHERE kind = 'ConsoleSession'"
        }
        TestStore::Postgres(_) => {
            "UPDATE objects SET body = jsonb_set(body::jsonb, '{expiresAtMs}', '1')::text WHERE kind = 'ConsoleSession'"
        }
    };
    assert_eq!(crate::audit_tamper::tamper(&store, sql).await, 1);
    swept(&store, "ConsoleSession", Duration::from_secs(5)).await;
});
