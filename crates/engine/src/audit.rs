//! The tamper-evident audit (see `joch_core::audit`): each settled ToolCall
//! and each Approval decision is written together with its audit entry, and
//! `verify_audit` walks a namespace's chain and checks the records against it.

use std::collections::HashMap;

use joch_core::audit::{AuditEntry, GENESIS, chain_hash, record_digest};
use joch_core::{Approval, Object, ToolCall};
use joch_store::{AuditRecord, Durability, StoreError};
use serde::Serialize;

use crate::engine::now;
use crate::{Engine, EngineError};

/// What walking a namespace's audit chain found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditReport {
    /// Entries checked.
    pub entries: u64,
    /// True when every link, hash and record matched.
    pub intact: bool,
    /// The first problem, when not intact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_problem: Option<AuditProblem>,
}

/// Where the chain or a record stopped matching.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditProblem {
    /// The entry at fault (for a record, its latest entry).
    pub seq: u64,
    /// `altered`, `removed_or_reordered`, or `record_altered`.
    pub kind: String,
    /// For people.
    pub message: String,
}

/// One page of the chain as served: the entry and its links.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditLine {
    /// Its number in the namespace.
    pub seq: u64,
    /// The previous entry's hash.
    pub prev: String,
    /// Its own hash.
    pub hash: String,
    /// What it says.
    pub entry: serde_json::Value,
}

fn body_of(kind: &str, name: &str, digest: String, phase: &str) -> String {
    AuditEntry {
        kind: kind.to_owned(),
        name: name.to_owned(),
        digest,
        phase: phase.to_owned(),
        at: now(),
    }
    .body()
}

fn call_body(call: &ToolCall) -> String {
    let digest = record_digest(
        ToolCall::KIND,
        &call.metadata.name,
        &call.spec,
        &call.status,
    );
    body_of(
        ToolCall::KIND,
        &call.metadata.name,
        digest,
        call.status.phase.as_str(),
    )
}

fn approval_body(approval: &Approval) -> String {
    let digest = record_digest(
        Approval::KIND,
        &approval.metadata.name,
        &approval.spec,
        &approval.status,
    );
    body_of(
        Approval::KIND,
        &approval.metadata.name,
        digest,
        approval.status.phase.as_str(),
    )
}

impl Engine {
    /// Stores a settled call with its audit entry, in one write: its first,
    /// for a call written only once it settled (see `admission::Intent`).
    pub(crate) async fn store_settled(&self, call: &mut ToolCall) -> Result<(), EngineError> {
        let body = call_body(call);
        let store = &self.inner.store;
        if call.metadata.resource_version.is_empty() {
            store
                .create_object_audited(call, body, Durability::Sync)
                .await?;
        } else {
            store
                .update_object_audited(call, body, Durability::Sync)
                .await?;
        }
        Ok(())
    }

    /// Stores an approval's decision with its audit entry, in one write.
    pub(crate) async fn store_decided(&self, approval: &mut Approval) -> Result<(), StoreError> {
        let body = approval_body(approval);
        self.inner
            .store
            .update_object_audited(approval, body, Durability::Sync)
            .await
            .map(drop)
    }

    /// The namespace's audit entries after `after`, in order.
    pub async fn audit_entries(
        &self,
        namespace: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<AuditLine>, EngineError> {
        crate::resources::valid_namespace(namespace)?;
        let records = self.inner.store.list_audit(namespace, after, limit).await?;
        Ok(records
            .into_iter()
            .map(|r| AuditLine {
                seq: r.seq,
                prev: r.prev,
                hash: r.hash,
                entry: serde_json::from_str(&r.body).unwrap_or(serde_json::Value::String(r.body)),
            })
            .collect())
    }

    /// Recomputes the namespace's chain, then checks each record against
    /// its latest entry. Names the first entry that was altered, removed or
    /// reordered, or whose record was altered.
    pub async fn verify_audit(&self, namespace: &str) -> Result<AuditReport, EngineError> {
        crate::resources::valid_namespace(namespace)?;
        let mut report = AuditReport {
            entries: 0,
            intact: true,
            first_problem: None,
        };
        let mut prev = GENESIS.to_owned();
        let mut expected_seq = 1;
        let mut latest: HashMap<(String, String), (u64, String)> = HashMap::new();
        loop {
            let page = self
                .inner
                .store
                .list_audit(namespace, expected_seq - 1, 1000)
                .await?;
            if page.is_empty() {
                break;
            }
            for record in page {
                report.entries += 1;
                if let Some(problem) = chain_problem(&record, &prev, expected_seq) {
                    report.intact = false;
                    report.first_problem = Some(problem);
                    return Ok(report);
                }
                if let Ok(entry) = serde_json::from_str::<AuditEntry>(&record.body) {
                    latest.insert((entry.kind, entry.name), (record.seq, entry.digest));
                }
                prev = record.hash;
                expected_seq = record.seq + 1;
            }
        }
        let mut by_seq: Vec<_> = latest.into_iter().collect();
        by_seq.sort_by_key(|(_, (seq, _))| *seq);
        for ((kind, name), (seq, digest)) in by_seq {
            let current = match kind.as_str() {
                "ToolCall" => self
                    .inner
                    .store
                    .get_object::<ToolCall>(namespace, &name)
                    .await
                    .map(|c| record_digest(&kind, &name, &c.spec, &c.status)),
                _ => self
                    .inner
                    .store
                    .get_object::<Approval>(namespace, &name)
                    .await
                    .map(|a| record_digest(&kind, &name, &a.spec, &a.status)),
            };
            let message = match current {
                Ok(current) if current == digest => continue,
                Ok(_) => format!("{kind} {name:?} no longer matches its entry"),
                Err(StoreError::NotFound { .. }) => format!("{kind} {name:?} was deleted"),
                Err(e) => return Err(e.into()),
            };
            report.intact = false;
            report.first_problem = Some(AuditProblem {
                seq,
                kind: "record_altered".to_owned(),
                message,
            });
            break;
        }
        Ok(report)
    }
}

/// What is wrong with `record` as the entry after `prev`, numbered `seq`.
fn chain_problem(record: &AuditRecord, prev: &str, seq: u64) -> Option<AuditProblem> {
    if record.seq != seq || record.prev != prev {
        return Some(AuditProblem {
            seq: record.seq,
            kind: "removed_or_reordered".to_owned(),
            message: format!(
                "entry {} does not follow entry {}: an entry before it was removed or the entries were reordered",
                record.seq,
                seq - 1
            ),
        });
    }
    if chain_hash(&record.prev, &record.body) != record.hash {
        return Some(AuditProblem {
            seq: record.seq,
            kind: "altered".to_owned(),
            message: format!(
                "entry {} was altered: its hash does not match its content",
                record.seq
            ),
        });
    }
    None
}
