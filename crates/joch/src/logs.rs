//! `joch logs -e EXECUTION [-f]`: an execution's timeline, one event a line.

use anyhow::{Context, bail};
use reqwest::Method;
use serde_json::Value;

use crate::cli::{ClientArgs, LogsArgs};
use crate::client::{Client, describe_error};

pub async fn run(client_args: &ClientArgs, args: LogsArgs) -> anyhow::Result<()> {
    let client = Client::new(client_args)?;
    let path = format!(
        "/v1/namespaces/{}/executions/{}/events",
        args.namespace, args.execution
    );
    if !args.follow {
        let list = client.expect_ok(Method::GET, &path, None).await?;
        for event in list["items"].as_array().into_iter().flatten() {
            println!("{}", line(event));
        }
        return Ok(());
    }
    let mut response = client.stream(&format!("{path}?follow=true")).await?;
    if !response.status().is_success() {
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
        bail!(
            "{}",
            describe_error(&crate::client::Answer { status, body })
        );
    }
    // Server-Sent Events: `data: {...}` lines, events separated by blank lines.
    let mut pending = String::new();
    while let Some(chunk) = response.chunk().await.context("the event stream broke")? {
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find('\n') {
            let raw: String = pending.drain(..=end).collect();
            if let Some(data) = raw.trim_end().strip_prefix("data:") {
                if let Ok(event) = serde_json::from_str::<Value>(data.trim()) {
                    println!("{}", line(&event));
                }
            }
        }
    }
    Ok(())
}

/// `   3  2026-05-10T10:35:00.000Z  policy_decision     call-1  {"action":"allow",...}`
fn line(event: &Value) -> String {
    let text = |k: &str| event[k].as_str().unwrap_or("-").to_owned();
    let call = event
        .pointer("/data/tool_call_id")
        .and_then(Value::as_str)
        .unwrap_or("-");
    format!(
        "{:>4}  {}  {:<18}  {}  {}",
        event["sequence"],
        text("time"),
        text("type"),
        call,
        event["data"]
    )
}
