//! Signed audit checkpoints, kept beside the chain they sign (as records of
//! kind `AuditCheckpoint`, one per namespace and entry). The copy that
//! matters is the auditor's, outside joch: one kept here can be deleted by
//! whoever can edit the chain, but while it is here, verify checks it too.

use std::collections::BTreeMap;

use joch_core::audit::Checkpoint;
use joch_core::object::IndexFields;

use crate::{Durability, ListQuery, Record, Store, StoreError};

/// The kind checkpoints are stored under; no API serves it as a resource.
pub const CHECKPOINT_KIND: &str = "AuditCheckpoint";

impl dyn Store {
    /// Keeps `checkpoint`; false when one for its entry was kept already
    /// (another replica signed the same head), which is kept instead.
    pub async fn put_checkpoint(&self, checkpoint: &Checkpoint) -> Result<bool, StoreError> {
        let body = serde_json::to_string(checkpoint)
            .map_err(|e| StoreError::Unavailable(format!("checkpoint cannot be encoded: {e}")))?;
        let record = Record {
            kind: CHECKPOINT_KIND.to_owned(),
            namespace: checkpoint.namespace.clone(),
            // Zero-padded, so that names sort as entry numbers do.
            name: format!("{:020}", checkpoint.seq),
            resource_version: 1,
            labels: BTreeMap::new(),
            index: IndexFields::default(),
            body,
        };
        match self.create(record, Durability::Sync).await {
            Ok(()) => Ok(true),
            Err(StoreError::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The namespace's checkpoints, oldest entry first.
    pub async fn list_checkpoints(&self, namespace: &str) -> Result<Vec<Checkpoint>, StoreError> {
        let mut checkpoints = Vec::new();
        let mut continue_from = None;
        loop {
            let page = self
                .list(ListQuery {
                    kind: CHECKPOINT_KIND.to_owned(),
                    namespace: namespace.to_owned(),
                    limit: 1000,
                    continue_from,
                    ..ListQuery::default()
                })
                .await?;
            for record in &page.items {
                checkpoints.push(serde_json::from_str::<Checkpoint>(&record.body).map_err(
                    |e| StoreError::Unavailable(format!("stored checkpoint cannot be read: {e}")),
                )?);
            }
            match page.continue_token {
                Some(token) if !page.items.is_empty() => continue_from = Some(token),
                _ => break,
            }
        }
        checkpoints.sort_by_key(|c| c.seq);
        Ok(checkpoints)
    }
}
