//! `joch policy test -f CANDIDATE.yaml`: back-tests a candidate policy on
//! the ledger through `POST /v1/namespaces/{ns}/policies/test` and prints
//! the report as YAML.

use anyhow::Context;
use reqwest::Method;
use serde_json::json;

use crate::cli::{ClientArgs, PolicyAction, PolicyArgs};
use crate::client::Client;

pub async fn run(client_args: &ClientArgs, args: PolicyArgs) -> anyhow::Result<()> {
    let PolicyAction::Test {
        file,
        since,
        replace,
    } = args.action;
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    let policy: serde_json::Value = serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{} is not a YAML or JSON policy", file.display()))?;
    let body = json!({"policy": policy, "since": since, "replace": replace});
    let client = Client::new(client_args)?;
    let path = format!("/v1/namespaces/{}/policies/test", args.namespace);
    let report = client.expect_ok(Method::POST, &path, Some(&body)).await?;
    print!("{}", serde_yaml_ng::to_string(&report)?);
    Ok(())
}
