//! The ledger's records as clients read them: a ToolCall, a page of them,
//! and the labels a client may change.

use joch_core::{ToolCall, ValidationError};
use joch_store::Durability;

use crate::catalog::{admit, valid_namespace};
use crate::{Calls, EngineError, ListParams, ObjectList};

impl Calls<'_> {
    /// Reads a ToolCall.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<ToolCall, EngineError> {
        valid_namespace(namespace)?;
        Ok(self.inner.store.get_object(namespace, name).await?)
    }

    /// Lists ToolCalls, newest first, optionally by tool, phase or execution.
    pub async fn list(
        &self,
        namespace: &str,
        params: ListParams,
    ) -> Result<ObjectList<ToolCall>, EngineError> {
        self.inner.list(namespace, params).await
    }

    /// Changes a ToolCall's labels and annotations. A record's spec and status
    /// are the ledger and cannot be changed through the API.
    pub async fn relabel(
        &self,
        namespace: &str,
        name: &str,
        mut call: ToolCall,
    ) -> Result<ToolCall, EngineError> {
        admit(namespace, &mut call, Some(name))?;
        let mut current: ToolCall = self.inner.store.get_object(namespace, name).await?;
        if call.spec != current.spec
            || (call.status != current.status && call.status != Default::default())
        {
            return Err(ValidationError::field("spec", "a ToolCall's spec and status cannot be changed; only metadata.labels and metadata.annotations").into());
        }
        if !call.metadata.resource_version.is_empty() {
            current.metadata.resource_version = call.metadata.resource_version;
        }
        current.metadata.labels = call.metadata.labels;
        current.metadata.annotations = call.metadata.annotations;
        self.inner
            .store
            .update_object(&mut current, Durability::Sync)
            .await?;
        Ok(current)
    }
}
