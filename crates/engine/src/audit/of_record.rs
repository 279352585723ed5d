//! One call's audit, as its page shows it: the entries naming the call and
//! its approval (found by the store's index by name, not a walk of the
//! chain), each checked on the spot: its hash covers its body and the hash
//! before it, it links to the entry before it in the chain, and the record
//! as stored now still has the digest of its latest entry. The whole
//! chain's verification stays `verify_audit`, namespace-wide.

use joch_core::audit::{AuditEntry, GENESIS, chain_hash};
use joch_core::{Approval, Object, Principal, ToolCall};
use serde::Serialize;

use super::{Audit, AuditLine};
use crate::EngineError;
use crate::clock::now;
use crate::rules::{Action, Collection, may_in};

/// One entry and what was checked of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckedEntry {
    /// The entry as served.
    pub line: AuditLine,
    /// Its hash is `sha256(prev + "\n" + body)`.
    pub hashes: bool,
    /// Its `prev` is the hash of the namespace's entry before it.
    pub linked: bool,
}

/// A call's audit: its entries, checked, and whether its records match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordAudit {
    /// The entries naming the call or its approval, in chain order.
    pub entries: Vec<CheckedEntry>,
    /// Per record kind with an entry (`ToolCall`, `Approval`): whether the
    /// record as stored now has its latest entry's digest.
    pub records: Vec<(String, bool)>,
}

impl RecordAudit {
    /// True when every entry hashes and links, and every record matches.
    pub fn intact(&self) -> bool {
        self.entries.iter().all(|e| e.hashes && e.linked) && self.records.iter().all(|r| r.1)
    }
}

impl Audit {
    /// The audit of call `name` (see the module), for a principal that may
    /// read the audit.
    pub async fn of_call(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<RecordAudit, EngineError> {
        may_in(by, namespace, &Action::Read(Collection::Audit))?;
        crate::resources::valid_namespace(namespace)?;
        let store = &self.store;
        let mut entries = Vec::new();
        for record in store.audit_of(namespace, name).await? {
            let hashes = chain_hash(&record.prev, &record.body) == record.hash;
            let before = match record.seq {
                0 | 1 => None,
                seq => store.list_audit(namespace, seq - 2, 1).await?.pop(),
            };
            let linked = match before {
                Some(before) => before.seq + 1 == record.seq && before.hash == record.prev,
                None => record.seq == 1 && record.prev == GENESIS,
            };
            let line = AuditLine {
                namespace: record.namespace,
                seq: record.seq,
                prev: record.prev,
                hash: record.hash,
                entry: serde_json::from_str(&record.body)
                    .unwrap_or(serde_json::Value::String(record.body)),
            };
            entries.push(CheckedEntry {
                line,
                hashes,
                linked,
            });
        }
        let mut records = Vec::new();
        let call: Option<ToolCall> = self.stored_record(namespace, name).await?;
        let approval: Option<Approval> = self.stored_record(namespace, name).await?;
        let current = [
            (ToolCall::KIND, call.and_then(|c| c.audit_entry(now()))),
            (Approval::KIND, approval.and_then(|a| a.audit_entry(now()))),
        ];
        for (kind, now_entry) in current {
            let latest = entries
                .iter()
                .rev()
                .filter_map(|e| serde_json::from_value::<AuditEntry>(e.line.entry.clone()).ok())
                .find(|e| e.kind == kind);
            if let Some(latest) = latest {
                let matches = now_entry.is_some_and(|e| e.digest == latest.digest);
                records.push((kind.to_owned(), matches));
            }
        }
        Ok(RecordAudit { entries, records })
    }

    async fn stored_record<T: Object>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<T>, EngineError> {
        match self.store.get_object(namespace, name).await {
            Ok(record) => Ok(Some(record)),
            Err(e) if e.kind() == joch_store::StoreErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}
