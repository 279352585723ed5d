//! Visibility: a tool outside a principal's tool selector does not exist
//! for it, nor do its calls, their approvals and what they left behind.
//! Every part that reads calls asks this one type.

use std::sync::Arc;

use joch_core::{Approval, LabelSelector, Principal, Tool, ToolCall};
use joch_store::Store;

use crate::EngineError;
use crate::catalog::Catalog;
use crate::glob::glob_matches;

/// True when `tool` exists for `principal`: it matches one of the
/// selector's name globs (if any) and its label selector (if any).
pub(crate) fn sees(principal: &Principal, tool: &Tool) -> bool {
    let Some(selector) = &principal.tools else {
        return true;
    };
    let named = selector.names.is_empty()
        || selector
            .names
            .iter()
            .any(|glob| glob_matches(glob, &tool.metadata.name));
    let labelled = selector.labels.as_deref().is_none_or(|text| {
        LabelSelector::parse(text).is_ok_and(|s| s.matches(&tool.metadata.labels))
    });
    named && labelled
}

/// What a principal may see of the ledger: reads the Tools (from the
/// catalog's snapshot) and the calls an artifact tool's call read.
#[derive(Clone)]
pub(crate) struct Visibility {
    store: Arc<dyn Store>,
    catalog: Arc<Catalog>,
}

impl Visibility {
    pub(crate) fn new(store: Arc<dyn Store>, catalog: Arc<Catalog>) -> Self {
        Self { store, catalog }
    }

    /// True when the namespace's tool `name` exists for `by`. A tool that
    /// does not exist is seen only by a principal without a selector (its
    /// answer is then the usual `tool_not_found`).
    pub(crate) async fn sees_tool(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<bool, EngineError> {
        if by.tools.is_none() {
            return Ok(true);
        }
        match self.catalog.tool(namespace, name).await {
            Ok(tool) => Ok(sees(by, &tool)),
            Err(joch_store::StoreError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// `call`, if `by` sees it ([`sees_call`](Self::sees_call)); else
    /// `NotFound`, as for no call at all.
    pub(crate) async fn seen_call(
        &self,
        by: &Principal,
        namespace: &str,
        call: ToolCall,
    ) -> Result<ToolCall, EngineError> {
        match self.sees_call(by, namespace, &call).await? {
            true => Ok(call),
            false => Err(EngineError::NotFound {
                kind: crate::NotFoundKind::ToolCall,
                name: call.metadata.name,
            }),
        }
    }

    /// True when the ToolCall `call` exists for `by`: when the tool it
    /// records (by name) exists for `by` ([`sees_tool`](Self::sees_tool),
    /// which reads the Tool for its labels). A call of a tool that no
    /// longer exists is seen only by a principal without a selector. A
    /// call of an artifact tool shows another call's content: it is seen
    /// when the call it read (`callId`) is; without one, as a missing
    /// tool's call.
    pub(crate) async fn sees_call(
        &self,
        by: &Principal,
        namespace: &str,
        call: &ToolCall,
    ) -> Result<bool, EngineError> {
        if by.tools.is_none() {
            return Ok(true);
        }
        if !call.spec.from_artifact_tool {
            return self.sees_tool(by, namespace, call.tool_name()).await;
        }
        let read = call
            .spec
            .input
            .as_object()
            .and_then(|args| joch_core::artifact_tools::call_id(args).ok());
        let Some(read) = read else {
            return Ok(false);
        };
        match self.store.get_object::<ToolCall>(namespace, read).await {
            Ok(target) if !target.spec.from_artifact_tool => {
                self.sees_tool(by, namespace, target.tool_name()).await
            }
            Ok(_) | Err(joch_store::StoreError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// True when `approval` exists for `by`: when the call it asks about
    /// does ([`sees_call`](Self::sees_call)); an approval whose call the
    /// ledger lost is seen only by a principal without a selector.
    pub(crate) async fn sees_approval(
        &self,
        by: &Principal,
        approval: &Approval,
    ) -> Result<bool, EngineError> {
        if by.tools.is_none() {
            return Ok(true);
        }
        let namespace = &approval.metadata.namespace;
        let name = &approval.spec.action.tool_call_ref.name;
        match self.store.get_object::<ToolCall>(namespace, name).await {
            Ok(call) => self.sees_call(by, namespace, &call).await,
            Err(joch_store::StoreError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Keeps of `calls` those that exist for `by` ([`sees_call`](Self::sees_call)),
    /// asking once per tool name.
    pub(crate) async fn keep_seen_calls(
        &self,
        by: &Principal,
        namespace: &str,
        calls: Vec<ToolCall>,
    ) -> Result<Vec<ToolCall>, EngineError> {
        if by.tools.is_none() {
            return Ok(calls);
        }
        let mut tools = std::collections::HashMap::<String, bool>::new();
        let mut seen = Vec::with_capacity(calls.len());
        for call in calls {
            let visible = match (call.spec.from_artifact_tool, tools.get(call.tool_name())) {
                (false, Some(known)) => *known,
                (false, None) => {
                    let known = self.sees_tool(by, namespace, call.tool_name()).await?;
                    tools.insert(call.tool_name().to_owned(), known);
                    known
                }
                (true, _) => self.sees_call(by, namespace, &call).await?,
            };
            if visible {
                seen.push(call);
            }
        }
        Ok(seen)
    }
}
