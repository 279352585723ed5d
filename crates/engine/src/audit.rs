//! The tamper-evident audit (see `joch_core::audit`). Every settled
//! ToolCall and every Approval decision is written together with its audit
//! entry by the store's typed writes (`Object::audit_entry`), whichever path
//! settles it; `verify_audit` checks the chain and the records against each
//! other in both directions, and the checkpoint signer signs chain heads.

mod of_record;
mod signer;
mod verify;

use joch_core::audit::Checkpoint;
use joch_core::{Approval, Principal, ToolCall};
use joch_store::{Durability, StoreError};
use serde::Serialize;

use crate::Audit;
use crate::identity::rules::{Action, Collection, may_in};
use crate::{Engine, EngineError};

pub use of_record::{CheckedEntry, RecordAudit};
pub use signer::{CheckpointSigner, CheckpointSigning};
pub use verify::{AuditProblem, AuditReport};

/// One page of the chain as served: the entry and its links.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditLine {
    /// The chain's namespace, so that an exported chain says whose it is.
    pub namespace: String,
    /// Its number in the namespace.
    pub seq: u64,
    /// The previous entry's hash.
    pub prev: String,
    /// Its own hash.
    pub hash: String,
    /// What it says; its RFC 8785 JSON is the body the hash covers.
    pub entry: serde_json::Value,
}

impl Engine {
    /// Stores a settled call, durably; the store appends its audit entry in
    /// the same write. Its first write, for a call written only once it
    /// settled (see `admission::Intent`).
    pub(crate) async fn store_settled(&self, call: &mut ToolCall) -> Result<(), EngineError> {
        let store = &self.inner.store;
        if call.metadata.resource_version.is_empty() {
            store.create_object(call, Durability::Sync).await?;
        } else {
            store.update_object(call, Durability::Sync).await?;
        }
        Ok(())
    }

    /// Stores an approval's decision, durably; the store appends its audit
    /// entry in the same write.
    pub(crate) async fn store_decided(&self, approval: &mut Approval) -> Result<(), StoreError> {
        self.inner
            .store
            .update_object(approval, Durability::Sync)
            .await
    }
}

impl Audit<'_> {
    /// The namespace's audit entries after `after`, in order, if `by` may
    /// read the audit. An entry about a call `by` cannot see (or its
    /// approval) is left out, as if the call did not exist; the chain of
    /// what is left then no longer links, which only the operator's view
    /// (no tool selector) can verify.
    pub async fn entries(
        &self,
        by: &Principal,
        namespace: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<AuditLine>, EngineError> {
        may_in(by, namespace, &Action::Read(Collection::Audit))?;
        crate::catalog::valid_namespace(namespace)?;
        let records = self.inner.store.list_audit(namespace, after, limit).await?;
        let mut lines = Vec::with_capacity(records.len());
        for r in records {
            let entry: serde_json::Value =
                serde_json::from_str(&r.body).unwrap_or(serde_json::Value::String(r.body));
            if !self.sees_entry(by, namespace, &entry).await? {
                continue;
            }
            lines.push(AuditLine {
                namespace: r.namespace,
                seq: r.seq,
                prev: r.prev,
                hash: r.hash,
                entry,
            });
        }
        Ok(lines)
    }

    /// The namespace's signed checkpoints, oldest entry first, if `by` may
    /// read the audit.
    pub async fn checkpoints(
        &self,
        by: &Principal,
        namespace: &str,
    ) -> Result<Vec<Checkpoint>, EngineError> {
        may_in(by, namespace, &Action::Read(Collection::Audit))?;
        crate::catalog::valid_namespace(namespace)?;
        Ok(self.inner.store.list_checkpoints(namespace).await?)
    }

    /// True when the record an audit entry names exists for `by`.
    async fn sees_entry(
        &self,
        by: &Principal,
        namespace: &str,
        entry: &serde_json::Value,
    ) -> Result<bool, EngineError> {
        if by.tools.is_none() {
            return Ok(true);
        }
        let name = entry["name"].as_str().unwrap_or_default();
        match entry["kind"].as_str() {
            Some("ToolCall") => match self.inner.store.get_object(namespace, name).await {
                Ok(call) => self.sees_call(by, namespace, &call).await,
                Err(joch_store::StoreError::NotFound { .. }) => Ok(false),
                Err(e) => Err(e.into()),
            },
            Some("Approval") => match self.inner.store.get_object(namespace, name).await {
                Ok(approval) => self.sees_approval(by, &approval).await,
                Err(joch_store::StoreError::NotFound { .. }) => Ok(false),
                Err(e) => Err(e.into()),
            },
            _ => Ok(true),
        }
    }
}
