//! `joch audit verify|export|checkpoints|keygen` and `joch token create|list|revoke`: the
//! namespace's tamper-evident audit chain, and who may act in it.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use joch_core::audit::{
    ChainWalk, Checkpoint, Finding, SigningKey, key_id, verifying_key_from_hex,
};
use reqwest::Method;
use serde_json::Value;

use crate::cli::{
    AuditAction, AuditArgs, CheckpointsAction, ClientArgs, TokenAction, TokenArgs, VerifyArgs,
};
use crate::client::Client;

pub async fn run(client_args: &ClientArgs, args: AuditArgs) -> anyhow::Result<()> {
    let namespace = args.namespace;
    match args.action {
        AuditAction::Verify(verify) => run_verify(client_args, &namespace, verify).await,
        AuditAction::Export => {
            let client = Client::new(client_args)?;
            each_line(&client, &namespace, |line| {
                println!("{line}");
                Ok(())
            })
            .await
        }
        AuditAction::Checkpoints {
            action: CheckpointsAction::Export,
        } => {
            let client = Client::new(client_args)?;
            let path = format!("/v1/namespaces/{namespace}/audit/checkpoints");
            let list = client.expect_ok(Method::GET, &path, None).await?;
            for checkpoint in list.as_array().into_iter().flatten() {
                println!("{checkpoint}");
            }
            Ok(())
        }
        AuditAction::Keygen { out } => keygen(&out),
    }
}

/// Calls `each` on every line of the namespace's chain, as served, oldest
/// first, a page at a time (a chain need not fit in memory).
async fn each_line(
    client: &Client,
    namespace: &str,
    mut each: impl FnMut(&Value) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut after = 0;
    loop {
        let path = format!("/v1/namespaces/{namespace}/audit?after={after}&limit=1000");
        let page = client.expect_ok(Method::GET, &path, None).await?;
        let Some(page) = page.as_array().filter(|l| !l.is_empty()) else {
            return Ok(());
        };
        for line in page {
            after = line["seq"].as_u64().unwrap_or(after);
            each(line)?;
        }
    }
}

async fn run_verify(
    client_args: &ClientArgs,
    namespace: &str,
    args: VerifyArgs,
) -> anyhow::Result<()> {
    if let Some(bundle) = &args.bundle {
        return verify_bundle(bundle, namespace, &args);
    }
    let client = Client::new(client_args)?;
    let path = format!("/v1/namespaces/{namespace}/audit/verify");
    let served = client.expect_ok(Method::GET, &path, None).await?;
    let mut report = Report {
        entries: served["entries"].as_u64().unwrap_or_default(),
        records: served["records"].as_u64(),
        findings: serde_json::from_value(served["findings"].clone())
            .context("the server's findings are not in the expected shape")?,
    };
    let checkpoints = signed_checkpoints(&args, namespace)?;
    if !checkpoints.is_empty() {
        // Walked here, against the auditor's checkpoints, not the server's.
        let mut walk = walk_expecting(&checkpoints);
        each_line(&client, namespace, |line| push_line(&mut walk, line)).await?;
        let walked = walk.finish();
        for finding in walked.findings {
            let known = report
                .findings
                .iter()
                .any(|f| f.kind == finding.kind && f.seq == finding.seq);
            if !known {
                report.findings.push(finding);
            }
        }
    }
    report.print(namespace, "")
}

/// Verifies an exported chain offline, a line at a time; its namespace is
/// the one its lines name (`namespace` for an empty bundle).
fn verify_bundle(bundle: &Path, namespace: &str, args: &VerifyArgs) -> anyhow::Result<()> {
    use std::io::BufRead;
    let file = std::fs::File::open(bundle)
        .with_context(|| format!("cannot read the bundle {}", bundle.display()))?;
    let mut lines = std::io::BufReader::new(file)
        .lines()
        .filter(|l| l.as_ref().map_or(true, |l| !l.trim().is_empty()))
        .enumerate()
        .map(|(n, line)| {
            let line = line.with_context(|| format!("cannot read {}", bundle.display()))?;
            serde_json::from_str::<Value>(&line)
                .with_context(|| format!("{} line {} is not JSON", bundle.display(), n + 1))
        });
    let first = lines.next().transpose()?;
    let namespace = first
        .as_ref()
        .and_then(|l| l["namespace"].as_str())
        .unwrap_or(namespace)
        .to_owned();
    let mut walk = walk_expecting(&signed_checkpoints(args, &namespace)?);
    for line in first.into_iter().map(Ok).chain(lines) {
        push_line(&mut walk, &line?)?;
    }
    let walked = walk.finish();
    let report = Report {
        entries: walked.entries,
        records: None,
        findings: walked.findings,
    };
    report.print(&namespace, "offline")
}

/// What `joch audit verify` found.
struct Report {
    entries: u64,
    records: Option<u64>,
    findings: Vec<Finding>,
}

impl Report {
    /// Prints the findings; an error (exit 1) when there are any.
    fn print(&self, namespace: &str, how: &str) -> anyhow::Result<()> {
        let mut counted = format!("{} entries", self.entries);
        if let Some(records) = self.records {
            counted.push_str(&format!(", {records} settled records"));
        }
        if !how.is_empty() {
            counted.push_str(&format!(", {how}"));
        }
        let Some(first) = self.findings.first() else {
            println!("audit of {namespace}: intact ({counted})");
            return Ok(());
        };
        for finding in &self.findings {
            println!("{}: {}", finding.kind.as_str(), finding.message);
        }
        let at = match (first.seq, &first.name) {
            (Some(seq), _) => format!("entry {seq}"),
            (None, Some(name)) => format!("record {name:?}"),
            (None, None) => "?".to_owned(),
        };
        bail!(
            "audit of {namespace}: broken at {at} ({}): {} ({} findings; {counted})",
            first.kind.as_str(),
            first.message,
            self.findings.len()
        )
    }
}

/// A walk that requires each checkpoint.
fn walk_expecting(checkpoints: &[Checkpoint]) -> ChainWalk {
    let mut walk = ChainWalk::new();
    for checkpoint in checkpoints {
        walk.expect(checkpoint.seq, &checkpoint.head);
    }
    walk
}

/// Feeds one exported chain line to `walk`.
fn push_line(walk: &mut ChainWalk, line: &Value) -> anyhow::Result<()> {
    let (Some(seq), Some(prev), Some(hash)) = (
        line["seq"].as_u64(),
        line["prev"].as_str(),
        line["hash"].as_str(),
    ) else {
        bail!("a chain line lacks seq, prev or hash: {line}");
    };
    // The body the hash covers is the entry's RFC 8785 JSON.
    let body = serde_jcs::to_string(&line["entry"])
        .with_context(|| format!("entry {seq} cannot be encoded"))?;
    walk.push(seq, prev, hash, &body);
    Ok(())
}

fn read_lines(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{} line {} is not JSON", path.display(), n + 1))
        })
        .collect()
}

/// The namespace's checkpoints from `--checkpoints`, each signature checked
/// with `--public-key`: one that does not verify refuses the whole file.
fn signed_checkpoints(args: &VerifyArgs, namespace: &str) -> anyhow::Result<Vec<Checkpoint>> {
    let (Some(file), Some(key_file)) = (&args.checkpoints, &args.public_key) else {
        return Ok(Vec::new());
    };
    let key_text = std::fs::read_to_string(key_file)
        .with_context(|| format!("cannot read the public key {}", key_file.display()))?;
    let key = verifying_key_from_hex(&key_text)
        .with_context(|| format!("{} is not a public key", key_file.display()))?;
    let mut checkpoints = Vec::new();
    for line in read_lines(file)? {
        let checkpoint: Checkpoint = serde_json::from_value(line).with_context(|| {
            format!("{} holds something other than checkpoints", file.display())
        })?;
        checkpoint
            .verify(&key)
            .with_context(|| format!("{} was refused", file.display()))?;
        if checkpoint.namespace == namespace {
            checkpoints.push(checkpoint);
        }
    }
    if checkpoints.is_empty() {
        bail!(
            "{} holds no checkpoint of namespace {namespace}",
            file.display()
        );
    }
    Ok(checkpoints)
}

/// `joch audit keygen`: a new key pair, the private half readable by its
/// owner only.
fn keygen(out: &Path) -> anyhow::Result<()> {
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let key = SigningKey::from_bytes(&seed);
    let public = hex(key.verifying_key().as_bytes());
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(out)
        .with_context(|| format!("cannot create {}", out.display()))?;
    std::io::Write::write_all(&mut file, format!("{}\n", hex(&seed)).as_bytes())
        .with_context(|| format!("cannot write {}", out.display()))?;
    let public_path = PathBuf::from(format!("{}.pub", out.display()));
    std::fs::write(&public_path, format!("{public}\n"))
        .with_context(|| format!("cannot write {}", public_path.display()))?;
    println!(
        "key {} written to {} (private) and {} (public)",
        key_id(&key.verifying_key()),
        out.display(),
        public_path.display()
    );
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
