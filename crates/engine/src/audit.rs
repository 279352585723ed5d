//! The tamper-evident audit (see `joch_core::audit`). Every settled
//! ToolCall and every Approval decision is written together with its audit
//! entry by the store's typed writes (`Object::audit_entry`), whichever path
//! settles it; `verify_audit` checks the chain and the records against each
//! other in both directions, and the checkpoint signer signs chain heads.

mod of_record;
mod signer;
mod verify;

use joch_core::audit::Checkpoint;
use joch_core::{Approval, ToolCall};
use joch_store::{Durability, StoreError};
use serde::Serialize;

use crate::Audit;
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
    /// The namespace's audit entries after `after`, in order.
    pub async fn entries(
        &self,
        namespace: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<AuditLine>, EngineError> {
        crate::catalog::valid_namespace(namespace)?;
        let records = self.inner.store.list_audit(namespace, after, limit).await?;
        Ok(records
            .into_iter()
            .map(|r| AuditLine {
                namespace: r.namespace,
                seq: r.seq,
                prev: r.prev,
                hash: r.hash,
                entry: serde_json::from_str(&r.body).unwrap_or(serde_json::Value::String(r.body)),
            })
            .collect())
    }

    /// The namespace's signed checkpoints, oldest entry first.
    pub async fn checkpoints(&self, namespace: &str) -> Result<Vec<Checkpoint>, EngineError> {
        crate::catalog::valid_namespace(namespace)?;
        Ok(self.inner.store.list_checkpoints(namespace).await?)
    }
}
