//! A call on its way through the admission checks ([`Admitting`]), and
//! what each check answers about it ([`Verdict`]).

use std::sync::Arc;

use joch_core::normalize::normalize_args;
use joch_core::{
    CallSideEffects, DecisionKind, Policy, Principal, Tool, ToolCall, ToolCallStatus, checksum,
};
use serde_json::{Map, Value};

use crate::EngineError;
use crate::calls::deferral::Deferral;
use crate::calls::idempotency;
use crate::calls::{Recorded, Rejection};
use crate::catalog::schema::Compiled;
use crate::policies::Facts;

/// What a check may answer.
pub(in crate::calls) enum Verdict {
    /// The call goes on to the next check.
    Continue,
    /// A person decides before it runs; later checks still apply.
    Defer(Deferral),
    /// The call will not run; no later check runs.
    Reject(Rejection),
}

/// A call on its way through the checks.
pub(in crate::calls) struct Admitting<'a> {
    /// Who makes the call; `None` for a call admitted before, resumed.
    pub(in crate::calls) by: Option<&'a Principal>,
    pub(in crate::calls) call: ToolCall,
    pub(in crate::calls) tool: Arc<Tool>,
    /// The arguments, normalised and possibly modified by policies.
    pub(in crate::calls) args: Map<String, Value>,
    /// The idempotency key the call claims, if any.
    pub(in crate::calls) key: Option<String>,
    /// Why the input is not an object, and what was sent instead.
    pub(in crate::calls) malformed: Option<(String, Value)>,
    /// Why the call's batch stopped before it.
    pub(in crate::calls) stopped: Option<&'a str>,
    /// The namespace's policies, once the request policies ran.
    pub(in crate::calls) policies: Arc<Vec<Policy>>,
    /// The tool's compiled schemas, once they compiled.
    pub(in crate::calls) schemas: Option<Arc<Compiled>>,
    /// What the request policies saw, for the result hook.
    pub(in crate::calls) facts: Option<Facts>,
    pub(in crate::calls) deferral: Option<Deferral>,
    /// What the request hook decided, for the `policy_decision` event.
    pub(in crate::calls) decided: Option<(DecisionKind, Option<String>)>,
    /// A person approved the call already: a policy's defer is satisfied.
    pub(in crate::calls) approved: bool,
}

impl<'a> Admitting<'a> {
    /// Normalises the input and fills in what the record says of the call
    /// before any check: its checksum, the tool version, the principal,
    /// its side effects and idempotency key.
    pub(in crate::calls) fn new(
        by: &'a Principal,
        mut call: ToolCall,
        tool: Arc<Tool>,
        stopped: Option<&'a str>,
    ) -> Result<Self, EngineError> {
        let mut malformed = None;
        let args = match std::mem::take(&mut call.spec.input) {
            Value::Object(args) => args,
            other => normalize_args(other.clone()).unwrap_or_else(|e| {
                malformed = Some((e.to_string(), other));
                Map::new()
            }),
        };
        let key = idempotency::key_of(&call, &tool, &args)?;
        call.status = ToolCallStatus {
            checksum: checksum(call.tool_name(), &args),
            // An unregistered tool (hook mode) has no version.
            tool_version: Some(tool.metadata.resource_version.clone()).filter(|v| !v.is_empty()),
            principal: Some(by.reference()),
            ..Default::default()
        };
        let effects = &tool.spec.side_effects;
        call.spec.side_effects = Some(CallSideEffects {
            level: effects.level,
            idempotent: effects.idempotent,
            idempotency_key: key.clone(),
        });
        Ok(Admitting {
            by: Some(by),
            call,
            tool,
            args,
            key,
            malformed,
            stopped,
            policies: Arc::default(),
            schemas: None,
            facts: None,
            deferral: None,
            decided: None,
            approved: false,
        })
    }
}

impl<'a> Admitting<'a> {
    /// An approved call, with its arguments as approved, edited or
    /// completed, on its way through [`RESUMPTION`]'s checks.
    pub(in crate::calls) fn resumed(
        call: ToolCall,
        tool: Arc<Tool>,
        args: Map<String, Value>,
        policies: Arc<Vec<Policy>>,
        schemas: Option<Arc<Compiled>>,
    ) -> Self {
        Admitting {
            by: None,
            call,
            tool,
            args,
            key: None,
            malformed: None,
            stopped: None,
            policies,
            schemas,
            facts: None,
            deferral: None,
            decided: None,
            approved: true,
        }
    }
}

impl Admitting<'_> {
    /// The `resourceVersion` of the tool called (none for an unregistered
    /// tool in hook mode).
    pub(in crate::calls) fn tool_version(&self) -> Option<&str> {
        Some(self.tool.metadata.resource_version.as_str()).filter(|v| !v.is_empty())
    }

    /// The digest of the call as it would run now (`status.runDigest`).
    pub(in crate::calls) fn run_digest(&self) -> String {
        joch_core::run_digest(
            self.call.tool_name(),
            self.tool_version(),
            &self.args,
            self.call.status.principal.as_ref(),
        )
    }

    /// The call as execution takes it, settling with `rejection` if set;
    /// one that will run records the digest of what runs.
    pub(in crate::calls) fn into_recorded(mut self, rejection: Option<Rejection>) -> Recorded {
        let deferred =
            !self.approved && self.call.status.phase == joch_core::Phase::AwaitingApproval;
        if rejection.is_none() && !deferred {
            self.call.status.run_digest = Some(self.run_digest());
            self.call.status.tool_version = self.tool_version().map(str::to_owned);
        }
        Recorded {
            call: self.call,
            tool: self.tool,
            args: self.args,
            schemas: self.schemas,
            rejection,
            policies: self.policies,
            facts: self.facts,
        }
    }
}
