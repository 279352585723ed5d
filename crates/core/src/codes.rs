//! The closed sets of words joch writes: why a call failed, what a policy
//! decided, what happened in an execution. Each is an enum with one
//! `as_str()`, so the compiler lists them all; the strings on the wire are
//! the ones the seeds and the docs name.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Defines a fieldless enum with its wire strings: `as_str`, `parse`,
/// `ALL`, `Display`, and serde as the string.
macro_rules! words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The wire string.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// The value of a wire string.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)*
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
                $name::parse(&text).ok_or_else(|| {
                    let known: Vec<&str> = $name::ALL.iter().map(|v| v.as_str()).collect();
                    serde::de::Error::custom(format!(
                        "unknown {} {text:?}: expected one of {}",
                        stringify!($name),
                        known.join(", ")
                    ))
                })
            }
        }
    };
}

words! {
    /// Why joch failed, refused or ended a call: `status.error.code`. A
    /// tool's own executor may report codes of its own
    /// ([`crate::CallError::custom`]); these are joch's.
    ErrorCode {
        /// The input is not a JSON object (nor a string holding one).
        InvalidArguments = "invalid_arguments",
        /// The input does not match the tool's `inputSchema`.
        InputSchemaViolation = "input_schema_violation",
        /// The output does not match the tool's `outputSchema`.
        OutputSchemaViolation = "output_schema_violation",
        /// The tool's schemas do not compile.
        InvalidToolConfig = "invalid_tool_config",
        /// The tool does not exist (or the caller may not see it).
        ToolNotFound = "tool_not_found",
        /// A request policy denied the call.
        DeniedByPolicy = "denied_by_policy",
        /// A result policy denied the output.
        OutputDeniedByPolicy = "output_denied_by_policy",
        /// A person (or a standing decision) denied the call.
        DeniedByApprover = "denied_by_approver",
        /// Nobody decided before the approval's deadline.
        ApprovalTimedOut = "approval_timed_out",
        /// Approved, but its caller, who was to retry it to have it run
        /// (`spec.runsOn: retry`), did not retry before its deadline: it
        /// never ran.
        NotRetried = "not_retried",
        /// The tool's upstream definition drifted and is quarantined.
        ToolQuarantined = "tool_quarantined",
        /// A rate limit refused the call.
        RateLimited = "rate_limited",
        /// A budget refused the call.
        BudgetExceeded = "budget_exceeded",
        /// Its batch stopped before it ran.
        Skipped = "skipped",
        /// The input was not recorded, so an approved call cannot run.
        InputWithheld = "input_withheld",
        /// The backend did not answer in time.
        BackendTimeout = "backend_timeout",
        /// The backend could not be reached.
        BackendUnreachable = "backend_unreachable",
        /// The backend is not available (an upstream down, a pool closed).
        BackendUnavailable = "backend_unavailable",
        /// The backend answered a non-2xx status.
        BackendHttpStatus = "backend_http_status",
        /// The backend's answer is not what joch can read.
        BackendInvalidResponse = "backend_invalid_response",
        /// The backend's answer is larger than joch accepts.
        BackendResponseTooLarge = "backend_response_too_large",
        /// The backend request failed for another reason.
        BackendError = "backend_error",
        /// The backend's configuration cannot be used.
        BackendMisconfigured = "backend_misconfigured",
        /// The tool's Endpoint does not exist.
        EndpointNotFound = "endpoint_not_found",
        /// The call would reach a host the Endpoint's outbound rules refuse.
        OutboundNotAllowed = "outbound_not_allowed",
        /// The webhook's address is private (loopback, link-local...) and
        /// joch is not allowed to reach such addresses.
        OutboundForbidden = "outbound_forbidden",
        /// The tool's McpServer does not exist.
        McpServerMissing = "mcp_server_missing",
        /// The upstream MCP server is not connected.
        McpUnavailable = "mcp_unavailable",
        /// The upstream MCP server answered with a protocol error.
        McpError = "mcp_error",
        /// joch could not obtain a token for the upstream (`spec.auth`).
        UpstreamAuthFailed = "upstream_auth_failed",
        /// The upstream needs the end user's own token, which joch does not
        /// hold: the user has not consented (before the deadline), or the
        /// token was revoked or can no longer be refreshed.
        ConsentRequired = "consent_required",
        /// The call's `callerId` would name the end user whose upstream
        /// token it uses, and its namespace does not trust callers for that.
        CallerIdNotTrusted = "caller_id_not_trusted",
        /// The tool reported an error (MCP `isError`, a failed action).
        ToolError = "tool_error",
        /// A declarative tool's action failed.
        ActionFailed = "action_failed",
        /// The tool is run by the agent itself (hook mode), not by joch.
        RunByAgent = "run_by_agent",
        /// A hook-mode call's result was never reported.
        HookResultMissing = "hook_result_missing",
        /// The process stopped while the call ran (recovery's verdict), or
        /// the Approval of a call recorded waiting for one could not be opened.
        Interrupted = "interrupted",
        /// A person resolved an `Unknown` call as failed.
        ResolvedFailed = "resolved_failed",
        /// An artifact tool was asked about a call its caller cannot see.
        ArtifactCallNotVisible = "artifact_call_not_visible",
        /// The client that made the call cancelled it (MCP
        /// `notifications/cancelled`); the upstream server was told.
        Cancelled = "cancelled",
        /// An upstream's request during a call (sampling, elicitation) that
        /// the client of the call did not declare it can answer.
        ClientIncapable = "client_incapable",
        /// The upstream asked the call's client for input (SEP-2322
        /// `input_required`), which the client gives by retrying the call:
        /// a backend's answer, never a settled call's.
        InputRequired = "input_required",
        /// The call's client never answered its upstream's questions
        /// (`status.inputRequired`) within the deadline.
        InputAbandoned = "input_abandoned",
        /// The client of the call could not be reached with a request.
        ClientUnavailable = "client_unavailable",
        /// The client of the call answered a request with an error.
        ClientError = "client_error",
        /// The upstream withdrew its request before the client answered.
        Withdrawn = "withdrawn",
        /// An upstream's request that joch cannot match to a call.
        NoCall = "no_call",
        /// An MCP method joch does not pass on to upstream servers.
        MethodNotFound = "method_not_found",
        /// The caller may not use what it asked for (a server's resources or prompts).
        Forbidden = "forbidden",
    }
}

words! {
    /// What one policy (or joch on its behalf) decided about a call: a
    /// [`crate::toolcall::HookDecision`]'s `decision`.
    DecisionKind {
        /// The call goes on.
        Allow = "allow",
        /// The call is refused.
        Deny = "deny",
        /// The call goes on with modified arguments or output.
        Modify = "modify",
        /// A person decides.
        Defer = "defer",
        /// A person supplies a value the call needs.
        RequestUserInput = "request_user_input",
    }
}

words! {
    /// What happened in an execution's timeline (seed 003).
    EventKind {
        /// A batch of calls started.
        ToolBatchStarted = "tool_batch_started",
        /// The request hook decided.
        PolicyDecision = "policy_decision",
        /// A call waits for a person.
        RunPaused = "run_paused",
        /// A person (or a deadline) decided; the call goes on or ends.
        RunResumed = "run_resumed",
        /// A piece of a call's output, as it streams.
        OutputChunk = "output_chunk",
        /// An upstream MCP server's request during a call (sampling,
        /// elicitation) and what came of it: relayed to the client, or refused.
        McpExchange = "mcp_exchange",
        /// A call settled: always the last event of a call.
        ToolCompleted = "tool_completed",
        /// Something to know that changed nothing (a budget near its limit).
        Warning = "warning",
    }
}

words! {
    /// What an Approval asks of a person.
    ApprovalActionKind {
        /// Decide on a call: approve, reject, or edit its arguments.
        ToolCall = "tool_call",
        /// Provide a value the call needs, or reject it.
        UserInput = "user_input",
        /// The end user consents, at the upstream's authorization server,
        /// to joch acting for them there; the call then runs.
        Consent = "consent",
    }
}

words! {
    /// Why joch refused a request in the resource's current state, or
    /// beyond a cap (the `code` of a 409 or 429 answer).
    RefusalCode {
        /// The approval was decided already (by another, or a deadline).
        ApprovalDecided = "approval_decided",
        /// This joch keeps no artifacts.
        ArtifactsDisabled = "artifacts_disabled",
        /// The consent could not be completed.
        ConsentFailed = "consent_failed",
        /// A consent is given at the authorization server, not approved.
        ConsentNotApprovable = "consent_not_approvable",
        /// The execution is finished: it takes no more batches.
        ExecutionFinished = "execution_finished",
        /// Only an `Unknown` call can be resolved.
        NotUnknown = "not_unknown",
        /// The call is not a hook-mode call.
        NotHookMode = "not_hook_mode",
        /// The hook-mode call is not running.
        NotRunning = "not_running",
        /// The call cannot be replayed (not settled, or its tool is gone).
        ReplayNotPossible = "replay_not_possible",
        /// Replaying a write needs an override.
        ReplayNotAllowed = "replay_not_allowed",
        /// A retry of a deferred call asks another tool or other arguments
        /// than the call it names.
        ResumeMismatch = "resume_mismatch",
        /// A principal holds as many MCP sessions as it may.
        TooManyMcpSessions = "too_many_mcp_sessions",
        /// A client has as many sign-ins under way as it may.
        TooManySignIns = "too_many_sign_ins",
    }
}

words! {
    /// What joch answers a hook-mode agent (AOS, Claude Code hooks).
    HookAnswer {
        /// Run the tool (or keep its result).
        Allow = "allow",
        /// Run it with other arguments (or use another result).
        Modify = "modify",
        /// Do not run it (or withhold its result).
        Deny = "deny",
        /// Ask the agent's own user.
        Ask = "ask",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_parses_back_and_serializes_as_itself() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::json!(code.as_str())
            );
        }
        for kind in EventKind::ALL {
            assert_eq!(EventKind::parse(kind.as_str()), Some(*kind));
        }
        let decision: DecisionKind = serde_json::from_str("\"request_user_input\"").unwrap();
        assert_eq!(decision, DecisionKind::RequestUserInput);
    }

    #[test]
    fn the_errors_page_lists_every_code() {
        let page = include_str!("../../../docs/errors.md");
        for code in ErrorCode::ALL {
            let row = format!("| `{}` |", code.as_str());
            assert!(page.contains(&row), "docs/errors.md has no row for {code}");
        }
    }

    #[test]
    fn an_unknown_word_is_refused_naming_the_known_ones() {
        let err = serde_json::from_str::<DecisionKind>("\"maybe\"").unwrap_err();
        assert!(err.to_string().contains("allow, deny, modify"), "{err}");
    }
}
