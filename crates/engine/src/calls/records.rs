//! The ledger's records as clients read them: a ToolCall, a page of them,
//! and the labels a client may change.

use joch_core::{Principal, ToolCall, ValidationError};
use joch_store::Durability;

use crate::resources::{admit, valid_namespace};
use crate::rules::{Action, Collection, may_in};
use crate::{Calls, EngineError, ListParams, ObjectList};

impl Calls {
    /// Reads a ToolCall as `by` may: a call of a tool that does not exist
    /// for `by` (its tool selector) answers as a call that does not exist.
    pub async fn get(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<ToolCall, EngineError> {
        may_in(by, namespace, &Action::Read(Collection::ToolCalls))?;
        let call = self.record(namespace, name).await?;
        self.inner.visibility.seen_call(by, namespace, call).await
    }

    /// Reads a ToolCall for the engine's own use, whoever asks: the rules
    /// that need it are asked by its caller.
    pub(in crate::calls) async fn record(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ToolCall, EngineError> {
        valid_namespace(namespace)?;
        Ok(self.inner.store.get_object(namespace, name).await?)
    }

    /// Lists ToolCalls, newest first, optionally by tool, phase or
    /// execution, leaving out the calls that do not exist for `by`
    /// ([`get`](Self::get)). The store's page is filtered after it is read:
    /// a page may then hold fewer than `limit` items, even none, while its
    /// `continue` token still leads on; a client pages until there is no
    /// token, never until a short page.
    pub async fn list(
        &self,
        by: &Principal,
        namespace: &str,
        params: ListParams,
    ) -> Result<ObjectList<ToolCall>, EngineError> {
        may_in(by, namespace, &Action::Read(Collection::ToolCalls))?;
        let mut page: ObjectList<ToolCall> = self.inner.lists.page(namespace, params).await?;
        page.items = self
            .inner
            .visibility
            .keep_seen_calls(by, namespace, page.items)
            .await?;
        Ok(page)
    }

    /// Changes a ToolCall's labels and annotations. A record's spec and status
    /// are the ledger and cannot be changed through the API. A call that
    /// does not exist for `by` ([`get`](Self::get)) answers as missing.
    pub async fn relabel(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        mut call: ToolCall,
    ) -> Result<ToolCall, EngineError> {
        may_in(by, namespace, &Action::RelabelCall)?;
        admit(namespace, &mut call, Some(name))?;
        let mut current = self.get(by, namespace, name).await?;
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
