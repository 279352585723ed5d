//! Reads of configured resources as a principal may make them: each asks
//! the rulebook (`rules`) with the caller's principal first.

use joch_core::{Principal, Tool};
use tokio::sync::watch;

use super::Resources;
use crate::EngineError;
use crate::rules::{acts_in, may_touch, sees};

impl Resources {
    /// A namespace's resources of kind `T`, newest first, if `by` may read
    /// them (the gate's `Action::Read`) in that namespace.
    pub async fn read_all<T: joch_core::Object>(
        &self,
        by: &Principal,
        namespace: &str,
        params: crate::ListParams,
    ) -> Result<crate::ObjectList<T>, EngineError> {
        may_touch(by, namespace, T::PLURAL, false)?;
        self.list(namespace, params).await
    }

    /// One resource of kind `T`, if `by` may read that kind there.
    pub async fn read<T: joch_core::Object>(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<T, EngineError> {
        may_touch(by, namespace, T::PLURAL, false)?;
        self.get(namespace, name).await
    }

    /// The namespace's tool `name`, if it exists for `by`.
    pub async fn get_tool(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<Tool, EngineError> {
        acts_in(by, namespace)?;
        let tool: Tool = self.get(namespace, name).await?;
        if !sees(by, &tool) {
            return Err(EngineError::NotFound {
                kind: crate::NotFoundKind::Tool,
                name: name.to_owned(),
            });
        }
        Ok(tool)
    }

    /// [`get_tool`](Self::get_tool) from the snapshot the call path reads
    /// (dropped on every write of a Tool): what a surface needs of the
    /// called tool beside the call, without a store read per call.
    pub async fn cached_tool(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<std::sync::Arc<Tool>, EngineError> {
        acts_in(by, namespace)?;
        match self.catalog.tool(namespace, name).await {
            Ok(tool) if sees(by, &tool) => Ok(tool),
            Ok(_) | Err(joch_store::StoreError::NotFound { .. }) => Err(EngineError::NotFound {
                kind: crate::NotFoundKind::Tool,
                name: name.to_owned(),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// The tools of `namespace` that exist for `by`, in name order.
    pub async fn list_tools(
        &self,
        by: &Principal,
        namespace: &str,
        params: crate::ListParams,
    ) -> Result<crate::ObjectList<Tool>, EngineError> {
        acts_in(by, namespace)?;
        let mut page = self.list::<Tool>(namespace, params).await?;
        page.items.retain(|tool| sees(by, tool));
        Ok(page)
    }

    /// A receiver that changes whenever a Tool of any namespace is created,
    /// replaced or deleted.
    pub fn tool_changes(&self) -> watch::Receiver<u64> {
        self.catalog.tool_changes()
    }

    /// The call context of execution `name` (the state its declarative
    /// tools keep), if `by` may read contexts. Its content is what those
    /// tools' calls wrote: a principal with a tool selector sees it only
    /// when every call of the execution exists for it, else it answers as
    /// missing.
    pub async fn call_context(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<joch_core::actions::CallContext, EngineError> {
        let context = self.read(by, namespace, name).await?;
        if by.tools.is_none() {
            return Ok(context);
        }
        let params = crate::ListParams {
            execution: Some(name.to_owned()),
            limit: Some(1000),
            ..crate::ListParams::default()
        };
        let calls = self
            .lists
            .page::<joch_core::ToolCall>(namespace, params)
            .await?
            .items;
        let count = calls.len();
        if self
            .visibility
            .keep_seen_calls(by, namespace, calls)
            .await?
            .len()
            != count
        {
            return Err(EngineError::NotFound {
                kind: crate::NotFoundKind::CallContext,
                name: name.to_owned(),
            });
        }
        Ok(context)
    }
}
