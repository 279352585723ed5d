//! `joch apply -f FILE|DIR|-`: create or replace every resource in the files.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use crate::cli::{ApplyArgs, ClientArgs};
use crate::client::{Client, describe_error};

pub async fn run(client_args: &ClientArgs, args: ApplyArgs) -> anyhow::Result<()> {
    let client = Client::new(client_args)?;
    let mut failures = 0;
    for file in manifest_files(&args.files)? {
        let (label, text) = read(&file)?;
        for doc in
            parse_documents(&text).with_context(|| format!("{label} is not valid YAML or JSON"))?
        {
            match apply_one(&client, &args.namespace, doc).await {
                Ok(line) => println!("{line}"),
                Err(e) => {
                    eprintln!("{label}: {e:#}");
                    failures += 1;
                }
            }
        }
    }
    if failures > 0 {
        bail!("{failures} resource(s) could not be applied");
    }
    Ok(())
}

/// Expands directories into their `.yaml`, `.yml` and `.json` files, sorted.
fn manifest_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("cannot read directory {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    matches!(
                        p.extension().and_then(|e| e.to_str()),
                        Some("yaml" | "yml" | "json")
                    )
                })
                .collect();
            entries.sort();
            files.extend(entries);
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

fn read(path: &Path) -> anyhow::Result<(String, String)> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read stdin")?;
        return Ok(("stdin".to_owned(), text));
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok((path.display().to_string(), text))
}

/// Every resource in a YAML stream (`---`-separated) or JSON text. A JSON
/// array or a `...List` object contributes each of its items.
pub fn parse_documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Value::deserialize(doc)?;
        match value {
            Value::Null => {}
            Value::Array(items) => docs.extend(items),
            Value::Object(ref map)
                if map
                    .get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List")) =>
            {
                docs.extend(
                    map.get("items")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                );
            }
            other => docs.push(other),
        }
    }
    Ok(docs)
}

/// The collection path segment of a manifest's `kind`.
pub fn plural_of(doc: &Value) -> anyhow::Result<&'static str> {
    if joch_core::tool::is_seed_shape(doc) {
        return Ok("tools");
    }
    match doc.get("kind").and_then(Value::as_str) {
        Some("Tool") => Ok("tools"),
        Some("ToolCall") => Ok("toolcalls"),
        Some("Policy") => Ok("policies"),
        Some("Execution") => Ok("executions"),
        Some("Endpoint") => Ok("endpoints"),
        Some("Namespace") => Ok("namespaces"),
        Some(other) => {
            bail!(
                "unknown kind {other:?} (apply takes Tool, Endpoint, Policy, Execution, Namespace and ToolCall)"
            )
        }
        None => bail!("a manifest has no kind"),
    }
}

async fn apply_one(client: &Client, default_namespace: &str, doc: Value) -> anyhow::Result<String> {
    let plural = plural_of(&doc)?;
    let doc = <joch_core::Tool as joch_core::Object>::upgrade(doc);
    let meta = doc.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let namespace = meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or(default_namespace);
    if plural == "namespaces" {
        // Settings of a namespace: one object per namespace, written in place.
        client
            .expect_ok(Method::PUT, &format!("/v1/namespaces/{name}"), Some(&doc))
            .await?;
        return Ok(format!("namespace/{name} configured"));
    }
    let collection = format!("/v1/namespaces/{namespace}/{plural}");

    let created = client.send(Method::POST, &collection, Some(&doc)).await?;
    let singular = doc["kind"].as_str().unwrap_or("tool").to_lowercase();
    if created.status.is_success() {
        let name = created
            .body
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or(&name);
        return Ok(
            match created
                .body
                .pointer("/status/phase")
                .and_then(Value::as_str)
            {
                Some(phase) => format!("{singular}/{name} {phase}"),
                None => format!("{singular}/{name} created"),
            },
        );
    }
    // Already there: a Tool or Policy is replaced; a ToolCall is a ledger
    // entry, never rewritten.
    let exists = created.status == StatusCode::CONFLICT && created.body["code"] == "already_exists";
    if !(exists && plural != "toolcalls") {
        bail!("{singular}/{name}: {}", describe_error(&created));
    }
    let path = format!("{collection}/{name}");
    let before = client.send(Method::GET, &path, None).await?;
    let replaced = client.send(Method::PUT, &path, Some(&doc)).await?;
    if !replaced.status.is_success() {
        bail!("{singular}/{name}: {}", describe_error(&replaced));
    }
    // Compared as the server stores them (defaults filled in), so that a
    // manifest that only omits defaults is not reported as a change.
    let verdict = match before.body.get("spec") == replaced.body.get("spec") {
        true => "unchanged".to_owned(),
        false => format!(
            "replaced: its spec differed from the one in {namespace} (resourceVersion {})",
            before.body["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("?")
        ),
    };
    Ok(format!("{singular}/{name} {verdict}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_come_from_yaml_streams_json_and_lists() {
        let yaml = "kind: Tool\nmetadata: {name: a}\n---\n---\nkind: Tool\nmetadata: {name: b}\n";
        assert_eq!(parse_documents(yaml).unwrap().len(), 2);
        let json = r#"[{"kind":"Tool"},{"kind":"ToolCall"}]"#;
        assert_eq!(parse_documents(json).unwrap().len(), 2);
        let list = r#"{"kind":"ToolList","items":[{"kind":"Tool"}]}"#;
        assert_eq!(
            parse_documents(list).unwrap(),
            vec![serde_json::json!({"kind": "Tool"})]
        );
        assert!(parse_documents("a: [").is_err());
    }
}
