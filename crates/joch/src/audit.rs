//! `joch audit verify|export` and `joch token create|list|revoke`: the
//! namespace's tamper-evident audit chain, and who may act in it.

use anyhow::bail;
use reqwest::Method;
use serde_json::Value;

use crate::cli::{AuditAction, AuditArgs, ClientArgs, TokenAction, TokenArgs};
use crate::client::Client;

pub async fn run(client_args: &ClientArgs, args: AuditArgs) -> anyhow::Result<()> {
    let client = Client::new(client_args)?;
    let base = format!("/v1/namespaces/{}/audit", args.namespace);
    match args.action {
        AuditAction::Verify => {
            let report = client
                .expect_ok(Method::GET, &format!("{base}/verify"), None)
                .await?;
            let entries = report["entries"].as_u64().unwrap_or_default();
            if report["intact"] == Value::Bool(true) {
                println!("audit of {}: intact ({entries} entries)", args.namespace);
                return Ok(());
            }
            let problem = &report["firstProblem"];
            bail!(
                "audit of {}: broken at entry {} ({}): {}",
                args.namespace,
                problem["seq"],
                problem["kind"].as_str().unwrap_or("?"),
                problem["message"].as_str().unwrap_or("?")
            );
        }
        AuditAction::Export => {
            let mut after = 0;
            loop {
                let page = client
                    .expect_ok(
                        Method::GET,
                        &format!("{base}?after={after}&limit=1000"),
                        None,
                    )
                    .await?;
                let Some(lines) = page.as_array().filter(|l| !l.is_empty()) else {
                    return Ok(());
                };
                for line in lines {
                    println!("{line}");
                    after = line["seq"].as_u64().unwrap_or(after);
                }
            }
        }
    }
}

pub async fn tokens(client_args: &ClientArgs, args: TokenArgs) -> anyhow::Result<()> {
    let client = Client::new(client_args)?;
    let base = format!("/v1/namespaces/{}/tokens", args.namespace);
    match args.action {
        TokenAction::Create {
            holder,
            role,
            tools,
            tool_labels,
        } => {
            let mut body = serde_json::json!({"name": holder, "role": role});
            if !tools.is_empty() || tool_labels.is_some() {
                body["tools"] = serde_json::json!({"names": tools, "labels": tool_labels});
            }
            let created = client.expect_ok(Method::POST, &base, Some(&body)).await?;
            // The secret alone on stdout, so `$(joch token create ...)` captures it.
            println!("{}", created["token"].as_str().unwrap_or_default());
            eprintln!(
                "token {holder} ({role}) created in {}; it will not be shown again",
                args.namespace
            );
        }
        TokenAction::List => {
            let list = client.expect_ok(Method::GET, &base, None).await?;
            for token in list["items"].as_array().into_iter().flatten() {
                println!(
                    "{}\t{}",
                    token["metadata"]["name"].as_str().unwrap_or("?"),
                    token["spec"]["role"].as_str().unwrap_or("?")
                );
            }
        }
        TokenAction::Revoke { holder } => {
            client
                .expect_ok(Method::DELETE, &format!("{base}/{holder}"), None)
                .await?;
            println!("token {holder} revoked in {}", args.namespace);
        }
    }
    Ok(())
}
