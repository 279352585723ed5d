//! Why the engine could not serve a request.

use joch_core::{IllegalTransition, ValidationError};
use joch_store::{StoreError, StoreErrorKind};

/// What was not found: a kind the engine names itself, or any other kind
/// of record, as the store names it. `as_str` is the wire's word (the
/// `kind` of the error's details, and the `<kind>_not_found` code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFoundKind {
    /// A Tool (or a tool that does not exist for the caller).
    Tool,
    /// A ToolCall.
    ToolCall,
    /// An Approval.
    Approval,
    /// A StandingApproval.
    StandingApproval,
    /// An Artifact.
    Artifact,
    /// An execution's call context.
    CallContext,
    /// A namespace the caller does not act in.
    Namespace,
    /// A Policy.
    Policy,
    /// An Execution.
    Execution,
    /// An MCP session of the front.
    McpSession,
    /// A tool an upstream MCP server does not list.
    UpstreamTool,
    /// Another kind of record, as the store names it.
    Stored(String),
}

impl NotFoundKind {
    /// The kind as the wire names it.
    pub fn as_str(&self) -> &str {
        match self {
            NotFoundKind::Tool => "Tool",
            NotFoundKind::ToolCall => "ToolCall",
            NotFoundKind::Approval => "Approval",
            NotFoundKind::StandingApproval => "StandingApproval",
            NotFoundKind::Artifact => "Artifact",
            NotFoundKind::CallContext => "CallContext",
            NotFoundKind::Namespace => "Namespace",
            NotFoundKind::Policy => "Policy",
            NotFoundKind::Execution => "Execution",
            // `mcp::MCP_SESSION_KIND`, which a test holds equal to this.
            NotFoundKind::McpSession => "McpSession",
            NotFoundKind::UpstreamTool => "upstream tool",
            NotFoundKind::Stored(kind) => kind,
        }
    }

    /// The kind a store names: one of the engine's own when it is one.
    pub fn of(kind: &str) -> Self {
        [
            NotFoundKind::Tool,
            NotFoundKind::ToolCall,
            NotFoundKind::Approval,
            NotFoundKind::StandingApproval,
            NotFoundKind::Artifact,
            NotFoundKind::CallContext,
            NotFoundKind::Namespace,
            NotFoundKind::Policy,
            NotFoundKind::Execution,
            NotFoundKind::McpSession,
        ]
        .into_iter()
        .find(|known| known.as_str() == kind)
        .unwrap_or_else(|| NotFoundKind::Stored(kind.to_owned()))
    }
}

impl std::fmt::Display for NotFoundKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request the engine could not serve. A tool that ran and failed is not
/// one of these: it is a ToolCall in phase `Failed`.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The named resource does not exist.
    #[error("{kind} {name:?} not found")]
    NotFound {
        /// `Tool`, `ToolCall`, ...
        kind: NotFoundKind,
        /// Its name.
        name: String,
    },
    /// A resource with that name exists already.
    #[error("{kind} {name:?} already exists")]
    AlreadyExists {
        /// Kind of the resource.
        kind: String,
        /// Its name.
        name: String,
    },
    /// The resource changed since the client read it.
    #[error("{0}")]
    Conflict(String),
    /// The resource or request is invalid, field by field.
    #[error("{0}")]
    Invalid(#[from] ValidationError),
    /// An idempotency key is empty, too long, or its template cannot render.
    #[error("{0}")]
    InvalidIdempotencyKey(String),
    /// The idempotency key belongs to a call with different arguments.
    #[error("idempotency key was already used by call {call:?} with different arguments")]
    IdempotencyKeyReused {
        /// The call holding the key.
        call: String,
    },
    /// The idempotency key's call has not settled and the caller would not wait.
    #[error("idempotency key is held by call {call:?}, which has not settled yet")]
    IdempotencyKeyInUse {
        /// The call holding the key.
        call: String,
    },
    /// The request is understood but refused in the resource's current state
    /// (replaying a write without override, resolving a call that is not
    /// `Unknown`). `code` is the stable reason.
    #[error("{message}")]
    Refused {
        /// Stable reason, e.g. `replay_not_allowed`.
        code: joch_core::RefusalCode,
        /// For people.
        message: String,
    },
    /// The request is refused beyond a cap on what its client may have under
    /// way (sign-ins started, say); it may succeed after `retry_after`.
    #[error("{message}")]
    Throttled {
        /// Stable reason, e.g. `too_many_sign_ins`.
        code: joch_core::RefusalCode,
        /// For people: what to finish, or how long to wait.
        message: String,
        /// When trying again may succeed.
        retry_after: std::time::Duration,
    },
    /// The principal may not do this, whatever surface it came through
    /// (deciding a call it made, reporting another's result).
    #[error("{0}")]
    Forbidden(String),
    /// A list query's parameter is malformed (a label selector, a phase,
    /// a limit, a page token, the namespace).
    #[error("{message}")]
    InvalidQuery {
        /// The parameter, as the API names it.
        parameter: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// A decision cannot be taken as sent (an edit without arguments, a
    /// value missing, arguments that are no object, a resolution to a
    /// phase a call cannot be resolved to).
    #[error("{0}")]
    InvalidDecision(String),
    /// The body names another resource than the path it was sent to.
    #[error("{0}")]
    PathMismatch(String),
    /// The call was sent where it cannot run: a hook-mode call to the
    /// gateway, a batch's call naming another execution, an artifact tool
    /// outside an execution. The message says where to send it.
    #[error("{0}")]
    Misdirected(String),
    /// The store cannot serve; nothing was acknowledged.
    #[error("{0}")]
    Store(StoreError),
    /// A record kept changing under joch's retries (a hot execution context).
    #[error("{0}")]
    Contended(String),
    /// The artifact storage cannot read or write.
    #[error("{what}: {source}")]
    Artifacts {
        /// What joch was doing.
        what: String,
        /// Why it could not.
        source: std::io::Error,
    },
    /// A task joch started for the request failed (it panicked, or was
    /// cancelled at shutdown); nothing was acknowledged.
    #[error("{what} failed: {source}")]
    TaskFailed {
        /// The task.
        what: &'static str,
        /// Why.
        source: tokio::task::JoinError,
    },
}

impl EngineError {
    /// A failed task of the request's.
    pub fn task(what: &'static str) -> impl FnOnce(tokio::task::JoinError) -> Self {
        move |source| EngineError::TaskFailed { what, source }
    }

    /// An artifact storage failure while doing `what`.
    pub(crate) fn artifacts(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        move |source| EngineError::Artifacts {
            what: what.into(),
            source,
        }
    }
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { kind, name } => EngineError::NotFound {
                kind: NotFoundKind::of(&kind),
                name,
            },
            StoreError::AlreadyExists { kind, name } => EngineError::AlreadyExists { kind, name },
            e if e.kind() == StoreErrorKind::Conflict => EngineError::Conflict(e.to_string()),
            StoreError::InvalidArgument(message) => EngineError::InvalidQuery {
                parameter: "continue",
                message,
            },
            e => EngineError::Store(e),
        }
    }
}

impl From<IllegalTransition> for EngineError {
    // The engine only asks for moves its own path makes; a refusal means a
    // record changed under it, which is a conflict, not a client error.
    fn from(e: IllegalTransition) -> Self {
        EngineError::Conflict(e.to_string())
    }
}
