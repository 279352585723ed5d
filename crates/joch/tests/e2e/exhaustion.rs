//! Issue 24: nothing a client sends exhausts joch. Slow and idle
//! connections are cut, connections beyond the cap are answered at once,
//! and names a client chooses never become metric labels.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{Joch, NS};

const HALF_A_REQUEST: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n";

fn addr(joch: &Joch) -> String {
    joch.base.trim_start_matches("http://").to_owned()
}

/// Reads until the server closes (EOF or reset); what it sent, or `None`
/// if it was still open at `deadline` (or just after, if that has passed).
async fn read_until_closed(stream: &mut TcpStream, deadline: Instant) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // Past the deadline, one last look: a socket already closed answers at once.
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left.max(Duration::from_millis(50)), stream.read(&mut buf)).await
        {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// A fresh client's `/healthz`, on a connection of its own: its status,
/// or the error, and how long it took.
async fn health(joch: &Joch) -> (Result<StatusCode, String>, Duration) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let started = Instant::now();
    let answer = client
        .get(format!("{}/healthz", joch.base))
        .send()
        .await
        .map(|r| r.status())
        .map_err(|e| e.to_string());
    (answer, started.elapsed())
}

#[tokio::test]
async fn half_open_connections_are_cut_within_the_header_timeout() {
    // The test itself holds 1,200 sockets.
    let _ = rlimit::increase_nofile_limit(4096);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("joch.log");
    let joch = Joch::builder()
        .open_files(1024)
        .args(&["--header-read-timeout-ms", "2000"])
        .log("info", &log)
        .start()
        .await;
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("open_files=\"1024\"") || logged.contains("open_files=1024"),
        "joch logs the limit it runs with: {logged}"
    );

    let mut held = Vec::new();
    for _ in 0..1200 {
        let mut stream = TcpStream::connect(addr(&joch)).await.unwrap();
        let _ = stream.write_all(HALF_A_REQUEST).await;
        held.push((stream, Instant::now()));
    }
    // Beyond the cap, joch answers at once: 503 while the slow ones hold
    // every slot (a refusal that finds no room to linger may be a reset,
    // so a client retries, as Retry-After says).
    let mut during = Vec::new();
    for _ in 0..30 {
        let (answer, took) = health(&joch).await;
        assert!(took < Duration::from_secs(1), "at once: {took:?}");
        during.push(answer);
        if matches!(during.last(), Some(Ok(_))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        matches!(
            during.last(),
            Some(Ok(StatusCode::OK | StatusCode::SERVICE_UNAVAILABLE))
        ),
        "a client is answered during the attack: {during:?}"
    );
    // Each within the header timeout of its first byte, and some slack
    // for a loaded machine.
    let closes = held.into_iter().map(|(mut stream, sent)| {
        let deadline = sent + Duration::from_millis(2000 + 2000);
        tokio::spawn(async move { read_until_closed(&mut stream, deadline).await })
    });
    // Those over the cap were refused at once (the cap's own test reads
    // that answer); how many were depends on how fast they connected.
    let mut open = 0;
    for close in closes {
        if close.await.unwrap().is_none() {
            open += 1;
        }
    }
    let log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(open, 0, "every one cut within the header timeout\n{log}");
    let (after, _) = health(&joch).await;
    assert_eq!(after, Ok(StatusCode::OK), "served after");
}

#[tokio::test]
async fn a_connection_beyond_the_cap_is_answered_503_at_once() {
    let joch = Joch::builder()
        .args(&["--max-connections", "4"])
        .start()
        .await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(addr(&joch)).await.unwrap());
    }
    let started = Instant::now();
    let mut extra = TcpStream::connect(addr(&joch)).await.unwrap();
    extra
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut extra, started + Duration::from_secs(2))
        .await
        .expect("closed after the answer");
    assert!(started.elapsed() < Duration::from_secs(1));
    let text = String::from_utf8(answer).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole answer");
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    let error: Value = serde_json::from_str(body).unwrap();
    assert_eq!(error["code"], "too_many_connections");
    drop(held);
}

#[tokio::test]
async fn a_body_that_trickles_is_refused_and_its_connection_cut() {
    let joch = Joch::builder()
        .args(&["--header-read-timeout-ms", "1000"])
        .start()
        .await;
    let mut slow = TcpStream::connect(addr(&joch)).await.unwrap();
    let head = format!(
        "POST /v1/namespaces/{NS}/toolcalls HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Content-Type: application/json\r\nContent-Length: 200\r\n\r\n"
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    // One byte a second: headers were on time, the body never will be.
    let trickle = async {
        for byte in b"{\"spec\": {\"toolRef\"".iter().cycle().take(200) {
            if slow.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(4), trickle).await;
    let (status, elapsed) = health(&joch).await;
    assert_eq!(status, Ok(StatusCode::OK), "others are served meanwhile");
    assert!(elapsed < Duration::from_secs(1));
    let answered = read_until_closed(&mut slow, started + Duration::from_secs(5))
        .await
        .expect("the trickling connection is closed");
    let text = String::from_utf8_lossy(&answered);
    assert!(text.starts_with("HTTP/1.1 4"), "refused with a 4xx: {text}");
    assert!(text.contains("\"code\""), "a JSON error: {text}");
}

#[tokio::test]
async fn an_idle_connection_is_closed_but_a_follow_stays_open() {
    let joch = Joch::builder()
        .args(&["--idle-timeout-seconds", "1"])
        .start()
        .await;
    let mut idle = TcpStream::connect(addr(&joch)).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut follow = TcpStream::connect(addr(&joch)).await.unwrap();
    let path = format!("/v1/namespaces/{NS}/executions/quiet/events?follow=true");
    follow
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let started = Instant::now();
    let answered = read_until_closed(&mut idle, started + Duration::from_secs(4))
        .await
        .expect("the idle connection is closed");
    assert!(
        answered.starts_with(b"HTTP/1.1 200"),
        "it was answered first"
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
    let still = read_until_closed(&mut follow, Instant::now() + Duration::from_millis(1500)).await;
    assert_eq!(still, None, "a follow in progress is not idle");
}

#[tokio::test]
async fn follows_are_capped_per_caller_and_freed_when_they_end() {
    let joch = Joch::builder()
        .args(&["--max-streams-per-principal", "2"])
        .start()
        .await;
    let url = |n: u32| {
        format!(
            "{}/v1/namespaces/{NS}/executions/run-{n}/events?follow=true",
            joch.base
        )
    };
    let first = joch.http.get(url(1)).send().await.unwrap();
    let second = joch.http.get(url(2)).send().await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(second.status(), StatusCode::OK);
    let refused = joch.http.get(url(3)).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["code"], "too_many_streams");
    drop(first);
    // The server notices the follow is gone when its next write fails, or
    // the connection closes: poll briefly.
    let mut status = StatusCode::TOO_MANY_REQUESTS;
    for _ in 0..50 {
        let again = joch.http.get(url(4)).send().await.unwrap();
        status = again.status();
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, StatusCode::OK, "a closed follow frees its place");
    drop(second);
}

fn hook_call(event: &str, tool: &str, id: &str) -> Value {
    json!({
        "session_id": format!("session-{id}"),
        "hook_event_name": event,
        "tool_name": tool,
        "tool_input": {"n": 1},
        "tool_response": {"ok": true},
        "tool_use_id": id,
    })
}

async fn metrics_text(joch: &Joch) -> String {
    reqwest::get(format!("{}/metrics", joch.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn hook_calls_with_random_tool_names_leave_metrics_flat() {
    let joch = Joch::start().await;
    let path = format!("/v1/namespaces/{NS}/hooks/claude");
    let send = |n: usize| {
        let (joch, path) = (&joch, &path);
        async move {
            let id = format!("hook-{n}");
            let tool = format!("tool-{}", uuid::Uuid::new_v4().simple());
            // Asked, then told: the call settles, and is counted.
            for event in ["PreToolUse", "PostToolUse"] {
                let body = hook_call(event, &tool, &id);
                let (status, answer) = joch.send(Method::POST, path, Some(body)).await;
                assert_eq!(status, StatusCode::OK, "{answer}");
            }
            (id, tool)
        }
    };
    for n in 0..5 {
        send(n).await;
    }
    let before = metrics_text(&joch).await;
    assert!(
        before.contains(r#"tool="unregistered""#),
        "counted under a fixed word: {before}"
    );
    let mut last = None;
    for chunk in (5..3005).collect::<Vec<_>>().chunks(32) {
        let sent = futures_util::future::join_all(chunk.iter().map(|&n| send(n))).await;
        last = sent.into_iter().last();
    }
    let (before, after) = (
        before.lines().count(),
        metrics_text(&joch).await.lines().count(),
    );
    assert!(
        after.abs_diff(before) <= 5,
        "/metrics went from {before} to {after} lines"
    );
    let (id, tool) = last.unwrap();
    let call = joch.get_call(&id).await;
    assert_eq!(
        call["spec"]["toolRef"]["name"],
        tool.as_str(),
        "kept on the record"
    );
}
