//! `joch get`, `joch describe` and `joch call`: read and show resources.

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::{Value, json};

use crate::cli::{
    CallArgs, ClientArgs, CostsArgs, DecideArgs, DescribeArgs, GetArgs, OutputFormat, RecordFormat,
    ReplayArgs, ResolveArgs, ResourceKind,
};
use crate::client::Client;

pub async fn get(client_args: &ClientArgs, args: GetArgs) -> anyhow::Result<()> {
    let client = Client::new(client_args)?;
    let collection = format!("/v1/namespaces/{}/{}", args.namespace, args.kind.plural());
    let items = match &args.name {
        Some(name) => vec![
            client
                .expect_ok(Method::GET, &format!("{collection}/{name}"), None)
                .await?,
        ],
        None => {
            let mut query = format!("?limit={}", args.limit);
            let filters = [
                ("labelSelector", &args.selector),
                ("phase", &args.phase),
                ("tool", &args.tool),
                ("execution", &args.execution),
            ];
            for (name, value) in filters {
                if let Some(value) = value {
                    query.push_str(&format!("&{name}={}", encode(value)));
                }
            }
            let list = client
                .expect_ok(Method::GET, &format!("{collection}{query}"), None)
                .await?;
            list["items"].as_array().cloned().unwrap_or_default()
        }
    };
    match args.output {
        Some(OutputFormat::Json) => println!(
            "{}",
            serde_json::to_string_pretty(&items_or_one(items, &args))?
        ),
        Some(OutputFormat::Yaml) => {
            print!("{}", serde_yaml_ng::to_string(&items_or_one(items, &args))?)
        }
        wide => print!(
            "{}",
            table(
                args.kind,
                &items,
                wide == Some(OutputFormat::Wide),
                Utc::now()
            )
        ),
    }
    Ok(())
}

pub async fn describe(client_args: &ClientArgs, args: DescribeArgs) -> anyhow::Result<()> {
    let client = Client::new(client_args)?;
    let path = format!(
        "/v1/namespaces/{}/{}/{}",
        args.namespace,
        args.kind.plural(),
        args.name
    );
    let resource = client.expect_ok(Method::GET, &path, None).await?;
    print!("{}", serde_yaml_ng::to_string(&resource)?);
    Ok(())
}

pub async fn call(client_args: &ClientArgs, args: CallArgs) -> anyhow::Result<()> {
    let client = Client::new(client_args)?;
    let input: Value = serde_json::from_str(&args.input).context("--input is not valid JSON")?;
    let mut call = json!({"apiVersion": joch_core::API_VERSION, "kind": "ToolCall", "spec": {"toolRef": {"name": args.tool}, "input": input}});
    if let Some(id) = &args.id {
        call["metadata"] = json!({"name": id});
    }
    if let Some(caller) = &args.caller {
        call["spec"]["callerId"] = json!(caller);
    }
    if let Some(execution) = &args.execution {
        call["spec"]["executionRef"] = json!({"name": execution});
    }
    if let Some(agent) = &args.agent {
        call["spec"]["agentRef"] = json!({"name": agent});
    }
    let path = format!("/v1/namespaces/{}/toolcalls", args.namespace);
    let record = client.expect_ok(Method::POST, &path, Some(&call)).await?;
    match args.output {
        RecordFormat::Json => println!("{}", serde_json::to_string_pretty(&record)?),
        RecordFormat::Yaml => print!("{}", serde_yaml_ng::to_string(&record)?),
    }
    let phase = record
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Unknown");
    if phase != "Succeeded" {
        let reason = record
            .pointer("/status/error/message")
            .and_then(Value::as_str)
            .unwrap_or("no reason recorded");
        bail!("the call ended {phase}: {reason}");
    }
    Ok(())
}

pub async fn replay(client_args: &ClientArgs, args: ReplayArgs) -> anyhow::Result<()> {
    let client = Client::new(client_args)?;
    let mode = if args.record { "record" } else { "execute" };
    let body = json!({"mode": mode, "override": args.override_writes});
    let path = format!(
        "/v1/namespaces/{}/toolcalls/{}/replay",
        args.namespace, args.name
    );
    let record = client.expect_ok(Method::POST, &path, Some(&body)).await?;
    print!("{}", serde_yaml_ng::to_string(&record)?);
    Ok(())
}

pub async fn resolve(client_args: &ClientArgs, args: ResolveArgs) -> anyhow::Result<()> {
    let client = Client::new(client_args)?;
    let phase = if args.succeeded {
        "Succeeded"
    } else {
        "Failed"
    };
    let mut body = json!({"phase": phase, "reason": args.reason});
    if let Some(output) = &args.output {
        body["output"] = serde_json::from_str(output).context("--output is not valid JSON")?;
    }
    let path = format!(
        "/v1/namespaces/{}/toolcalls/{}/resolve",
        args.namespace, args.name
    );
    let record = client.expect_ok(Method::POST, &path, Some(&body)).await?;
    println!(
        "toolcall/{} {}",
        args.name,
        record
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("?")
    );
    Ok(())
}

pub async fn decide(client_args: &ClientArgs, verb: &str, args: DecideArgs) -> anyhow::Result<()> {
    let client = Client::new(client_args)?;
    let mut body =
        json!({"approvedBy": args.by, "rationale": args.rationale, "message": args.message});
    // `approve` with `input` is an edit; `deny` refuses one (the engine's rule).
    if let Some(input) = &args.input {
        body["input"] = serde_json::from_str(input).context("--input is not valid JSON")?;
    }
    if let Some(value) = &args.value {
        body["value"] = serde_json::from_str(value).context("--value is not valid JSON")?;
    }
    let path = format!(
        "/v1/namespaces/{}/approvals/{}/{verb}",
        args.namespace, args.name
    );
    let approval = client.expect_ok(Method::POST, &path, Some(&body)).await?;
    println!(
        "approval/{} {}",
        args.name,
        approval
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("?")
    );
    Ok(())
}

pub async fn costs(client_args: &ClientArgs, args: CostsArgs) -> anyhow::Result<()> {
    let client = Client::new(client_args)?;
    let base = if args.all_namespaces {
        "/v1/costs".to_owned()
    } else {
        format!("/v1/namespaces/{}/costs", args.namespace)
    };
    let mut query = vec![format!("groupBy={}", args.group_by)];
    if let Some(since) = &args.since {
        query.push(format!("since={since}"));
    }
    let report = client
        .expect_ok(Method::GET, &format!("{base}?{}", query.join("&")), None)
        .await?;
    let mut rows = vec![vec![
        args.group_by.to_uppercase(),
        "CALLS".to_owned(),
        "AMOUNT".to_owned(),
        "CURRENCY".to_owned(),
    ]];
    for item in report["items"].as_array().into_iter().flatten() {
        let key = item["key"]
            .as_str()
            .filter(|k| !k.is_empty())
            .unwrap_or("-");
        rows.push(vec![
            key.to_owned(),
            display(&item["calls"]),
            format!("{:.6}", item["amount"].as_f64().unwrap_or_default()),
            display(&item["currency"]),
        ]);
    }
    print!("{}", align(&rows));
    Ok(())
}

fn items_or_one(mut items: Vec<Value>, args: &GetArgs) -> Value {
    if args.name.is_some() && items.len() == 1 {
        items.remove(0)
    } else {
        Value::Array(items)
    }
}

/// A kubectl-style table with aligned columns.
fn table(kind: ResourceKind, items: &[Value], wide: bool, now: DateTime<Utc>) -> String {
    let (mut header, wide_header, row): (Vec<&str>, &[&str], Row) = match kind {
        ResourceKind::Tools => (
            vec!["NAME", "BACKEND", "SIDE-EFFECTS", "AGE"],
            &["VERSION", "ENDPOINT"],
            tool_row,
        ),
        ResourceKind::Policies => (vec!["NAME", "VERSION", "RULES", "AGE"], &[], policy_row),
        ResourceKind::Mcpservers => (
            vec!["NAME", "TRANSPORT", "PHASE", "TOOLS", "HELD", "AGE"],
            &[],
            mcp_server_row,
        ),
        ResourceKind::Executions => (
            vec!["NAME", "PHASE", "BATCHES", "FAIL-SAFE", "AGE"],
            &[],
            execution_row,
        ),
        ResourceKind::Approvals => (
            vec!["NAME", "TOOL", "PHASE", "DECIDED-BY", "POLICY", "AGE"],
            &[],
            approval_row,
        ),
        ResourceKind::Toolcalls => (
            vec!["NAME", "TOOL", "PHASE", "LATENCY", "AGE"],
            &["EXECUTION", "AGENT", "CHECKSUM", "ERROR"],
            call_row,
        ),
    };
    if wide {
        header.extend(wide_header);
    }
    let mut rows = vec![header.into_iter().map(str::to_owned).collect()];
    rows.extend(items.iter().map(|item| row(item, wide, now)));
    align(&rows)
}

/// An item's cells, the wide ones too when asked.
type Row = fn(&Value, bool, DateTime<Utc>) -> Vec<String>;

/// The value at a JSON pointer, for a cell; `-` where there is none.
fn cell(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .map(display)
        .unwrap_or_else(|| "-".to_owned())
}

fn tool_row(t: &Value, wide: bool, now: DateTime<Utc>) -> Vec<String> {
    let mut row = vec![
        cell(t, "/metadata/name"),
        cell(t, "/spec/backend/type"),
        cell(t, "/spec/sideEffects/level"),
        age(t, now),
    ];
    if wide {
        row.extend([
            cell(t, "/metadata/resourceVersion"),
            cell(t, "/spec/backend/endpoint/url"),
        ]);
    }
    row
}

fn policy_row(p: &Value, _wide: bool, now: DateTime<Utc>) -> Vec<String> {
    let rules = p
        .pointer("/spec/rules")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let rules = if p.pointer("/spec/rego").is_some() {
        format!("{rules}+rego")
    } else {
        rules.to_string()
    };
    vec![
        cell(p, "/metadata/name"),
        cell(p, "/spec/version"),
        rules,
        age(p, now),
    ]
}

fn mcp_server_row(m: &Value, _wide: bool, now: DateTime<Utc>) -> Vec<String> {
    let tools = m.pointer("/status/tools").and_then(Value::as_object);
    let held = tools.map_or(0, |t| {
        t.values()
            .filter(|state| {
                state.get("quarantined") == Some(&Value::Bool(true))
                    || state.get("acceptedHash") != state.get("discoveredHash")
            })
            .count()
    });
    let transport = if m.pointer("/spec/stdio").is_some() {
        "stdio"
    } else {
        "http"
    };
    vec![
        cell(m, "/metadata/name"),
        transport.to_owned(),
        cell(m, "/status/phase"),
        tools.map_or(0, |t| t.len()).to_string(),
        held.to_string(),
        age(m, now),
    ]
}

fn execution_row(e: &Value, _wide: bool, now: DateTime<Utc>) -> Vec<String> {
    vec![
        cell(e, "/metadata/name"),
        cell(e, "/status/phase"),
        cell(e, "/status/batches"),
        e.pointer("/spec/failSafe/approvalDenialPolicy")
            .map(display)
            .unwrap_or_else(|| "continue".to_owned()),
        age(e, now),
    ]
}

fn approval_row(a: &Value, _wide: bool, now: DateTime<Utc>) -> Vec<String> {
    vec![
        cell(a, "/metadata/name"),
        cell(a, "/spec/payload/tool"),
        cell(a, "/status/phase"),
        cell(a, "/status/decidedBy"),
        cell(a, "/spec/policyRef/name"),
        age(a, now),
    ]
}

fn call_row(c: &Value, wide: bool, now: DateTime<Utc>) -> Vec<String> {
    let latency = c
        .pointer("/status/latencyMs")
        .map(|l| format!("{l}ms"))
        .unwrap_or_else(|| "-".to_owned());
    let mut row = vec![
        cell(c, "/metadata/name"),
        cell(c, "/spec/toolRef/name"),
        cell(c, "/status/phase"),
        latency,
        age(c, now),
    ];
    if wide {
        let checksum: String = cell(c, "/status/checksum").chars().take(12).collect();
        row.extend([
            cell(c, "/spec/executionRef/name"),
            cell(c, "/spec/agentRef/name"),
            checksum,
            cell(c, "/status/error/code"),
        ]);
    }
    row
}

fn align(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    out
}

fn display(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `5s`, `3m`, `2h`, `4d` since `metadata.creationTimestamp`.
fn age(v: &Value, now: DateTime<Utc>) -> String {
    let Some(created) = v
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
    else {
        return "-".to_owned();
    };
    let Ok(created) = DateTime::parse_from_rfc3339(created) else {
        return "-".to_owned();
    };
    let secs = (now - created.with_timezone(&Utc)).num_seconds().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7_200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

/// Percent-encodes a query value (label selectors contain `=`, `!` and `,`).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_show_age() {
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:10:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let call = json!({
            "metadata": {"name": "call-1", "creationTimestamp": "2026-01-01T00:00:00.000Z"},
            "spec": {"toolRef": {"name": "zendesk.create_ticket"}},
            "status": {"phase": "Succeeded", "latencyMs": 12}
        });
        let out = table(ResourceKind::Toolcalls, &[call], false, now);
        assert_eq!(
            out,
            "NAME     TOOL                    PHASE       LATENCY   AGE\ncall-1   zendesk.create_ticket   Succeeded   12ms      10m\n"
        );
    }

    #[test]
    fn selectors_are_encoded() {
        assert_eq!(encode("a=b,!c"), "a%3Db%2C%21c");
    }
}
