//! The outcome of a call whose caller lost the answer on its way (MCP: a
//! `tools/call` stream that dropped, resumed with `Last-Event-ID` on any
//! replica). Nothing runs: the answer is read from the record, once the
//! call has settled.

use std::time::Duration;

use joch_core::{Principal, ToolCall};

use crate::Calls;
use crate::EngineError;
use crate::calls::CallOutcome;
use crate::calls::resumed::made_by;
use crate::rules::{Action, may_in};

impl Calls {
    /// Call `name` that `by` made, as the calling agent receives it, once
    /// settled; `None` if it has not settled within `wait`. Only the
    /// principal that made the call may read it so (another gets
    /// `NotFound`, as for no call at all). A call not recorded (yet) is
    /// `NotFound` after a few seconds. Its output is the record's: what a
    /// tool's `observability` settings keep of it.
    pub async fn outcome_within(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        wait: Duration,
    ) -> Result<Option<ToolCall>, EngineError> {
        // The answer of a call is the caller's: asked as the call was.
        may_in(by, namespace, &Action::CallTool)?;
        let call = made_by(by, self.key_holder(namespace, name).await?)?;
        let settled = if call.status.phase.is_terminal() {
            call
        } else {
            match tokio::time::timeout(wait, self.wait_settled(namespace, name)).await {
                Ok(settled) => settled?,
                Err(_) => return Ok(None),
            }
        };
        Ok(Some(CallOutcome::stored(settled, false).into_response()))
    }
}
