//! `type: noop`: a built-in tool that does nothing, so a benchmark can
//! measure joch's own cost (recording, policy, durability) without a backend's.

use async_trait::async_trait;
use joch_core::{Invocation, ToolBackend, ToolFailure};
use serde_json::{Value, json};

/// Returns `{}` for every call.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopBackend;

#[async_trait]
impl ToolBackend for NoopBackend {
    fn kind(&self) -> &'static str {
        "noop"
    }

    async fn invoke(&self, _call: Invocation<'_>) -> Result<Value, ToolFailure> {
        Ok(json!({}))
    }
}
