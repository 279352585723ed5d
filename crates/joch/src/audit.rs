//! `joch audit verify|export`: the namespace's tamper-evident audit chain.

use anyhow::bail;
use reqwest::Method;
use serde_json::Value;

use crate::cli::{AuditAction, AuditArgs, ClientArgs};
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
