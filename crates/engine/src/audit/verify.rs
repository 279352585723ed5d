//! `verify_audit`: the chain against itself and its checkpoints, each entry
//! against its record, and each settled record against its latest entry.

use std::collections::{HashMap, HashSet};

use joch_core::audit::{AuditEntry, ChainWalk, Finding, FindingKind, WalkedChain};
use joch_core::{Approval, Object, Time, ToolCall};
use joch_store::{ListQuery, StoreError};
use serde::Serialize;

use super::Audit;
use crate::EngineError;
use crate::clock::now;

/// Records read per page while checking them.
const PAGE: usize = 500;

/// What verifying a namespace's audit found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditReport {
    /// Entries checked.
    pub entries: u64,
    /// Settled records (ToolCalls and decided Approvals) checked.
    pub records: u64,
    /// True when nothing was found.
    pub intact: bool,
    /// The first finding, as before `findings` existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_problem: Option<AuditProblem>,
    /// Every finding: entries in chain order, then records.
    pub findings: Vec<Finding>,
}

/// The first finding, in the shape `firstProblem` always had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditProblem {
    /// The entry at fault; 0 for a record no entry names.
    pub seq: u64,
    /// The kind under the name it had before `findings`: `altered` (an
    /// edited entry), `removed_or_reordered` (a gap) or `record_altered`
    /// (an edited or deleted record); newer kinds keep their own name.
    pub kind: String,
    /// For people.
    pub message: String,
}

impl AuditReport {
    fn of(entries: u64, records: u64, findings: Vec<Finding>) -> Self {
        let first_problem = findings.first().map(|f| AuditProblem {
            seq: f.seq.unwrap_or(0),
            kind: legacy_kind(f.kind).to_owned(),
            message: f.message.clone(),
        });
        Self {
            entries,
            records,
            intact: findings.is_empty(),
            first_problem,
            findings,
        }
    }
}

/// A finding's kind as `firstProblem` always named it.
fn legacy_kind(kind: FindingKind) -> &'static str {
    match kind {
        FindingKind::EntryEdited => "altered",
        FindingKind::Gap => "removed_or_reordered",
        FindingKind::Edited | FindingKind::Deleted => "record_altered",
        other => other.as_str(),
    }
}

impl Audit {
    /// Walks the namespace's chain (each entry must follow the one before,
    /// hash to its content and extend every stored checkpoint), then checks
    /// both ways between entries and records: each settled record must
    /// match its latest entry, and each record an entry names must exist.
    /// Reports every finding, but none naming a record that does not exist
    /// for `by` (see [`entries`](Self::entries)). Reads the whole
    /// namespace, a page at a time.
    pub async fn verify(
        &self,
        by: &joch_core::Principal,
        namespace: &str,
    ) -> Result<AuditReport, EngineError> {
        use crate::rules::{Action, Collection, may_in};
        may_in(by, namespace, &Action::Read(Collection::Audit))?;
        crate::resources::valid_namespace(namespace)?;
        let store = &self.store;
        let mut walk = ChainWalk::new();
        for checkpoint in store.list_checkpoints(namespace).await? {
            walk.expect(checkpoint.seq, &checkpoint.head);
        }
        let mut after = 0;
        loop {
            let page = store.list_audit(namespace, after, 1000).await?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            for entry in &page {
                walk.push(entry.seq, &entry.prev, &entry.hash, &entry.body);
            }
        }
        let mut walked = walk.finish();
        let mut suspects = Vec::new();
        let calls = self
            .check_records::<ToolCall>(namespace, &mut walked, &mut suspects, |c| {
                c.status.completed_at
            })
            .await?;
        let approvals = self
            .check_records::<Approval>(namespace, &mut walked, &mut suspects, |a| {
                a.status.decided_at
            })
            .await?;
        let settled_since = if suspects.is_empty() {
            HashMap::new()
        } else {
            self.entries_since(namespace, walked.last_seq).await?
        };
        for suspect in suspects {
            let key = (suspect.kind.to_owned(), suspect.name);
            if settled_since.get(&key) != Some(&suspect.digest) {
                walked.findings.push(suspect.finding);
            }
        }
        // What is left names records that are gone.
        let mut gone: Vec<_> = walked.latest.drain().collect();
        gone.sort_by_key(|(_, latest)| latest.seq);
        for ((kind, name), latest) in gone {
            walked.findings.push(Finding {
                kind: FindingKind::Deleted,
                seq: Some(latest.seq),
                message: format!(
                    "{kind} {name:?}, named by entry {}, was deleted",
                    latest.seq
                ),
                name: Some(name),
            });
        }
        let findings = self.seen_findings(by, namespace, walked.findings).await?;
        Ok(AuditReport::of(walked.entries, calls + approvals, findings))
    }

    /// Keeps of `findings` those `by` may see: one naming a record that
    /// does not exist for `by` (a call of a tool outside its selector, that
    /// call's approval, or a record gone) is left out, as the audit's
    /// entries are; one about the chain itself names no record and stays.
    async fn seen_findings(
        &self,
        by: &joch_core::Principal,
        namespace: &str,
        findings: Vec<Finding>,
    ) -> Result<Vec<Finding>, EngineError> {
        if by.tools.is_none() {
            return Ok(findings);
        }
        let mut seen = Vec::with_capacity(findings.len());
        for finding in findings {
            let visible = match &finding.name {
                // A call and its approval share their name.
                Some(name) => {
                    self.sees_record(by, namespace, ToolCall::KIND, name)
                        .await?
                }
                None => true,
            };
            if visible {
                seen.push(finding);
            }
        }
        Ok(seen)
    }

    /// Per record, the digest of the latest entry appended after `after`:
    /// what settled while verify was reading.
    async fn entries_since(
        &self,
        namespace: &str,
        mut after: u64,
    ) -> Result<HashMap<(String, String), String>, EngineError> {
        let mut latest = HashMap::new();
        loop {
            let page = self.store.list_audit(namespace, after, 1000).await?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            for entry in page {
                if let Ok(entry) = serde_json::from_str::<AuditEntry>(&entry.body) {
                    latest.insert((entry.kind, entry.name), entry.digest);
                }
            }
        }
        Ok(latest)
    }

    /// Checks every record of kind `T` against the chain, taking the entries
    /// naming them out of `walked.latest`; returns how many were settled.
    /// Reads raw rows, so that a row stored under one name whose body names
    /// another is seen as what it is. A record that does not match the
    /// chain as walked is a suspect: it may have settled since.
    async fn check_records<T: Object>(
        &self,
        namespace: &str,
        walked: &mut WalkedChain,
        suspects: &mut Vec<Suspect>,
        settled_at: fn(&T) -> Option<Time>,
    ) -> Result<u64, EngineError> {
        let (mut settled, mut continue_from) = (0, None);
        let mut seen = HashSet::new();
        loop {
            let page = self
                .store
                .list(ListQuery {
                    kind: T::KIND.to_owned(),
                    namespace: namespace.to_owned(),
                    limit: PAGE,
                    continue_from,
                    every_row: true,
                    ..ListQuery::default()
                })
                .await?;
            for row in &page.items {
                let record: T = serde_json::from_str(&row.body).map_err(|e| {
                    StoreError::Unavailable(format!(
                        "stored {} {:?} cannot be read: {e}",
                        row.kind, row.name
                    ))
                })?;
                let entry = record.audit_entry(now());
                settled += u64::from(entry.is_some());
                seen.insert(row.name.clone());
                let digest = entry.as_ref().map(|e| e.digest.clone());
                let Some(finding) = check_record(&row.name, &record, entry, walked, settled_at)
                else {
                    continue;
                };
                match digest {
                    // A copied row is what it is, however late it settled.
                    Some(digest) if record.metadata().name == row.name => {
                        suspects.push(Suspect {
                            kind: T::KIND,
                            name: row.name.clone(),
                            digest,
                            finding,
                        });
                    }
                    _ => walked.findings.push(finding),
                }
            }
            match page.continue_token {
                Some(token) if !page.items.is_empty() => continue_from = Some(token),
                _ => break,
            }
        }
        walked
            .latest
            .retain(|(kind, name), _| kind != T::KIND || !seen.contains(name));
        Ok(settled)
    }
}

/// A settled record that did not match the chain as walked: a finding,
/// unless an entry appended since names it as it is.
struct Suspect {
    kind: &'static str,
    name: String,
    digest: String,
    finding: Finding,
}

/// What is wrong between `record`, stored as `name`, and its latest entry.
fn check_record<T: Object>(
    name: &str,
    record: &T,
    entry: Option<AuditEntry>,
    walked: &WalkedChain,
    settled_at: fn(&T) -> Option<Time>,
) -> Option<Finding> {
    let kind = T::KIND;
    let finding = |kind, seq, message| {
        Some(Finding {
            kind,
            seq,
            name: Some(name.to_owned()),
            message,
        })
    };
    if record.metadata().name != name {
        return finding(
            FindingKind::ForgedRecord,
            None,
            format!(
                "{kind} {name:?} holds the record of {:?}: a copy joch did not write",
                record.metadata().name
            ),
        );
    }
    let latest = walked.latest.get(&(kind.to_owned(), name.to_owned()));
    match (entry, latest) {
        (None, None) => None,
        (None, Some(latest)) => finding(
            FindingKind::Edited,
            Some(latest.seq),
            format!(
                "{kind} {name:?} is no longer settled, but entry {} says it was",
                latest.seq
            ),
        ),
        (Some(entry), Some(latest)) if entry.digest == latest.digest => None,
        (Some(_), Some(latest)) => finding(
            FindingKind::Edited,
            Some(latest.seq),
            format!(
                "{kind} {name:?} was edited: it no longer matches entry {}",
                latest.seq
            ),
        ),
        // Joch appends the entry in the record's own write: a record settled
        // before the chain's newest entry would be named by it, so it was put
        // there behind joch's back; one settled after it is what cutting the
        // chain's newest entries leaves.
        (Some(_), None) => match (settled_at(record), walked.newest_at) {
            (Some(at), Some(newest)) if at < newest => finding(
                FindingKind::ForgedRecord,
                None,
                format!(
                    "{kind} {name:?} is settled but no entry names it, though later ones exist: joch did not write it, or its entry was removed"
                ),
            ),
            _ => finding(
                FindingKind::MissingEntry,
                None,
                format!(
                    "{kind} {name:?} is settled but has no entry: the chain's newest entries may have been cut"
                ),
            ),
        },
    }
}
