//! Every manifest and JSON body that `README.md` and `docs/*.md` show,
//! applied to a real server or at least parsed, so the reference cannot
//! drift from what joch accepts.
//!
//! A fenced block is read by its info string:
//! - ` ```yaml ` or ` ```json ` alone: a manifest (with a `kind`, seed 002's
//!   tool JSON, or a policy's `rules:` shown alone), applied in namespace
//!   [`DOCS`]; joch must accept it;
//! - ` ```json POST /path `: a request body, sent to that path (`{ns}` is
//!   [`DOCS`]); joch must answer 2xx;
//! - ` ```yaml fragment ` or ` ```json fragment `: part of a manifest, the
//!   shape of an answer, or a file for another program: it must parse.
//!
//! In ` ```sh ` blocks, a `cat > FILE <<'YAML'` heredoc is a manifest as
//! above, and a curl's `-d '...'` body must be JSON.

use reqwest::Method;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Joch, workspace_root};

/// The namespace the documented manifests are applied in.
const DOCS: &str = "docs";

/// One fenced block of one page.
struct Block {
    page: String,
    lang: String,
    info: String,
    text: String,
}

/// The fenced blocks of the README and every page under `docs/`.
fn blocks() -> Vec<Block> {
    let root = workspace_root();
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    let mut blocks = Vec::new();
    for path in pages {
        let text = std::fs::read_to_string(&path).unwrap();
        let page = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let Some(fence) = line.strip_prefix("```") else {
                continue;
            };
            let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
            let (lang, info) = fence.split_once(' ').unwrap_or((fence, ""));
            blocks.push(Block {
                page: page.clone(),
                lang: lang.to_owned(),
                info: info.trim().to_owned(),
                text: body.join("\n"),
            });
        }
    }
    blocks
}

/// The manifests written by `cat > FILE <<'TAG'` heredocs in a shell block.
fn heredocs(sh: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut lines = sh.lines();
    while let Some(line) = lines.next() {
        let Some((_, tag)) = line.split_once("<<'") else {
            continue;
        };
        if !line.starts_with("cat > ") {
            continue;
        }
        let tag = tag.trim_end_matches('\'');
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != tag).collect();
        found.push(body.join("\n"));
    }
    found
}

/// The `-d '...'` bodies of the curls in a shell block.
fn curl_bodies(sh: &str) -> Vec<&str> {
    sh.split("-d '")
        .skip(1)
        .filter_map(|rest| rest.split('\'').next())
        .collect()
}

/// Applies a documented manifest as its kind says, replacing one of that
/// name; returns the answer.
async fn apply(joch: &Joch, mut manifest: Value, n: usize) -> (StatusCode, Value) {
    if manifest.get("kind").is_none() && manifest.get("rules").is_some() {
        // A policy's rules, shown alone: applied as a policy's.
        manifest = json!({"kind": "Policy", "metadata": {"name": format!("rules-{n}")},
                          "spec": {"version": "1", "rules": manifest["rules"]}});
    }
    let plural = match manifest["kind"].as_str() {
        // Seed 002's tool JSON has no kind.
        None | Some("Tool") => "tools",
        Some("Policy") => "policies",
        Some("Budget") => "budgets",
        Some("Endpoint") => "endpoints",
        Some("Execution") => "executions",
        Some("McpServer") => {
            // Accepting the manifest is what is checked here, not the
            // upstream server: `true` exits at once, leaving it Unavailable.
            // An http one is kept: its `auth` fails before any request (no
            // vault key, its secret unset), leaving it Unavailable too.
            if manifest["spec"].get("http").is_none() {
                manifest["spec"]["stdio"] = json!({"command": "true"});
            }
            "mcpservers"
        }
        Some("Namespace") => {
            manifest["metadata"] = json!({"name": DOCS});
            let path = format!("/v1/namespaces/{DOCS}");
            return joch.send(Method::PUT, &path, Some(manifest)).await;
        }
        Some(other) => panic!("the docs show a {other}, which this test cannot apply"),
    };
    let path = format!("/v1/namespaces/{DOCS}/{plural}");
    let created = joch.send(Method::POST, &path, Some(manifest.clone())).await;
    if created.1["code"] != "already_exists" {
        return created;
    }
    let name = manifest["metadata"]["name"]
        .as_str()
        .or(manifest["name"].as_str())
        .unwrap()
        .to_owned();
    let path = format!("{path}/{name}");
    joch.send(Method::PUT, &path, Some(manifest)).await
}

fn parse(block: &Block) -> Value {
    let parsed = match block.lang.as_str() {
        "json" => serde_json::from_str(&block.text).map_err(|e| e.to_string()),
        _ => serde_yaml_ng::from_str(&block.text).map_err(|e| e.to_string()),
    };
    parsed.unwrap_or_else(|e| {
        panic!(
            "a {} block of {} does not parse: {e}",
            block.lang, block.page
        )
    })
}

#[tokio::test]
async fn every_documented_manifest_applies_and_every_body_parses() {
    let joch = Joch::start().await;
    // The documented declarative tool calls the examples' Endpoint.
    let examples = workspace_root().join("examples");
    let out = joch.cli(&["apply", "-f", examples.to_str().unwrap(), "-n", DOCS]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (mut applied, mut sent, mut parsed) = (0, 0, 0);
    for block in blocks() {
        let (manifests, bodies) = match (block.lang.as_str(), block.info.as_str()) {
            ("sh", _) => (heredocs(&block.text), curl_bodies(&block.text)),
            ("yaml" | "json", "") => (vec![block.text.clone()], vec![]),
            ("yaml" | "json", "fragment") => {
                parse(&block);
                parsed += 1;
                continue;
            }
            ("json", info) if info.starts_with("POST ") => {
                let path = info["POST ".len()..].replace("{ns}", DOCS);
                let (status, answer) = joch.send(Method::POST, &path, Some(parse(&block))).await;
                assert!(status.is_success(), "{} POST {path}: {answer}", block.page);
                sent += 1;
                continue;
            }
            (lang @ ("yaml" | "json"), info) => {
                panic!(
                    "{}: ```{lang} {info}: an info string this test does not know",
                    block.page
                )
            }
            _ => continue,
        };
        for body in bodies {
            let body: Result<Value, _> = serde_json::from_str(body);
            assert!(
                body.is_ok(),
                "a curl body of {} is not JSON: {body:?}",
                block.page
            );
            parsed += 1;
        }
        for text in manifests {
            let manifest: Value = serde_yaml_ng::from_str(&text)
                .unwrap_or_else(|e| panic!("a manifest of {} does not parse: {e}", block.page));
            let (status, answer) = apply(&joch, manifest, applied).await;
            assert!(status.is_success(), "{}: {answer}", block.page);
            applied += 1;
        }
    }
    // Every kind the docs show, so that a parsing slip cannot skip them all.
    assert!(applied >= 10, "{applied} manifests applied");
    assert!(
        sent >= 1 && parsed >= 5,
        "{sent} bodies sent, {parsed} parsed"
    );
}
