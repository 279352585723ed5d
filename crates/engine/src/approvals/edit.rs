//! An approver's edit, checked before it is accepted: the new arguments
//! must be an object that fits the tool's input schema. Checked in the
//! engine so that every surface (REST approve and edit, the CLI, the
//! console, the library) refuses the same edits the same way, before
//! anything is decided: a refused edit leaves the approval pending.

use joch_core::{Approval, ValidationError};
use serde_json::Value;

use super::Approvals;
use crate::EngineError;

impl Approvals {
    /// Refuses (422 `invalid_resource`, naming the violation) edited
    /// arguments that are not an object or break the tool's inputSchema.
    pub(super) async fn check_edit(
        &self,
        namespace: &str,
        approval: &Approval,
        input: &Value,
    ) -> Result<(), EngineError> {
        if !input.is_object() {
            return Err(
                ValidationError::field("input", "the arguments must be a JSON object").into(),
            );
        }
        let call = self
            .call(namespace, &approval.spec.action.tool_call_ref.name)
            .await?;
        let tool = self.inner.catalog.resolve_tool(namespace, &call).await?;
        // A tool whose schema does not compile is checked nowhere (the
        // call path runs it unchecked too); its admission reported it.
        let Ok(compiled) = self.inner.catalog.schemas(&tool) else {
            return Ok(());
        };
        compiled.check_input(input).map_err(|e| {
            let detail = e.details.map(|d| format!(" ({d})")).unwrap_or_default();
            ValidationError::field("input", format!("{}{detail}", e.message)).into()
        })
    }
}
