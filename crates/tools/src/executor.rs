//! The seam between an agent loop and whatever runs its tools.

use async_trait::async_trait;

use crate::{Error, ToolCall, ToolDefinition, ToolOutput};

/// Runs the tool calls an agent's model makes. Both gateways implement it,
/// so an agent holds a `dyn ToolExecutor` and need not know which it has.
#[async_trait]
pub trait ToolExecutor: Send + Sync {
    /// The tools the model may call.
    async fn tool_definitions(&self) -> Result<Vec<ToolDefinition>, Error>;

    /// Runs one call through the gateway: recorded, decided by policy (and
    /// by a person if it is deferred: this waits), executed once per
    /// `tool_call_id`, recorded again. A denial is an `Ok` output whose
    /// `error` tells the model why.
    async fn execute_tool_call(&self, call: &ToolCall) -> Result<ToolOutput, Error>;
}
