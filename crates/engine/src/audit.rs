//! The tamper-evident audit (see `joch_core::audit`). Every settled
//! ToolCall and every Approval decision is written together with its audit
//! entry by the store's typed writes (`Object::audit_entry`), whichever path
//! settles it (`calls/settle.rs`, `approvals.rs`); `verify` checks the chain and the records against each
//! other in both directions, and the checkpoint signer signs chain heads.

mod of_record;
mod signer;
mod verify;

use std::sync::Arc;

use joch_core::audit::Checkpoint;
use joch_core::{Approval, Object, Principal, ToolCall};
use joch_store::Store;
use serde::Serialize;

use crate::EngineError;
use crate::rules::{Action, Collection, Visibility, may_in};

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

/// The audit part: reads the chain as a principal may, verifies it, and
/// signs its heads. It writes nothing of the chain itself: the store
/// appends each entry with the record it is about.
#[derive(Clone)]
pub struct Audit {
    store: Arc<dyn Store>,
    visibility: Visibility,
}

impl Audit {
    pub(crate) fn new(store: Arc<dyn Store>, visibility: Visibility) -> Self {
        Self { store, visibility }
    }

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
        crate::resources::valid_namespace(namespace)?;
        let records = self.store.list_audit(namespace, after, limit).await?;
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
        crate::resources::valid_namespace(namespace)?;
        Ok(self.store.list_checkpoints(namespace).await?)
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
            Some(kind @ ("ToolCall" | "Approval")) => {
                self.sees_record(by, namespace, kind, name).await
            }
            _ => Ok(true),
        }
    }

    /// True when the ToolCall or Approval `name` exists for `by`; one gone
    /// exists only for a principal without a tool selector.
    async fn sees_record(
        &self,
        by: &Principal,
        namespace: &str,
        kind: &str,
        name: &str,
    ) -> Result<bool, EngineError> {
        if by.tools.is_none() {
            return Ok(true);
        }
        let found = if kind == Approval::KIND {
            match self.store.get_object::<Approval>(namespace, name).await {
                Ok(approval) => return self.visibility.sees_approval(by, &approval).await,
                Err(e) => e,
            }
        } else {
            match self.store.get_object::<ToolCall>(namespace, name).await {
                Ok(call) => return self.visibility.sees_call(by, namespace, &call).await,
                Err(e) => e,
            }
        };
        match found {
            joch_store::StoreError::NotFound { .. } => Ok(false),
            e => Err(e.into()),
        }
    }
}
