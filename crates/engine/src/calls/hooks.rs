//! Glue between the call path and the policy engine: which policies a
//! namespace has, the loop counter, and the answers a denial gives the model.

use joch_core::ToolCall;
use joch_store::ListQuery;
use serde_json::{Value, json};

use crate::{Calls, EngineError};

impl Calls {
    /// `toolCallCount`: calls with this checksum in the call's execution,
    /// this one included. Without an execution, every call counts once.
    /// An indexed count: a long run does not make each call slower.
    pub(in crate::calls) async fn tool_call_count(
        &self,
        call: &ToolCall,
    ) -> Result<usize, EngineError> {
        let Some(execution) = &call.spec.execution_ref else {
            return Ok(1);
        };
        let mut query = ListQuery {
            kind: "ToolCall".to_owned(),
            namespace: call.metadata.namespace.clone(),
            ..ListQuery::default()
        };
        query.index.execution = Some(execution.name.clone());
        query.index.checksum = Some(call.status.checksum.clone());
        let earlier = self.inner.store.count(query).await?;
        Ok(1 + usize::try_from(earlier).unwrap_or(usize::MAX))
    }
}

/// What the model receives for a call that did not run (seed 003): it can
/// see why and adapt.
pub(in crate::calls) fn refusal(call: &ToolCall, error: &str, reason: Option<&str>) -> Value {
    let mut answer = json!({"success": false, "error": error, "tool_call_id": call.metadata.name});
    if let Some(reason) = reason {
        answer["reason"] = json!(reason);
    }
    answer
}
