//! Why the engine could not serve a request.

use joch_core::{IllegalTransition, ValidationError};
use joch_store::{StoreError, StoreErrorKind};

/// A request the engine could not serve. A tool that ran and failed is not
/// one of these: it is a ToolCall in phase `Failed`.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The named resource does not exist.
    #[error("{kind} {name:?} not found")]
    NotFound {
        /// `Tool`, `ToolCall`, ...
        kind: String,
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
        /// Stable snake_case reason, e.g. `replay_not_allowed`.
        code: &'static str,
        /// For people.
        message: String,
    },
    /// The principal may not do this, whatever surface it came through
    /// (deciding a call it made, reporting another's result).
    #[error("{0}")]
    Forbidden(String),
    /// A query parameter is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// The store cannot serve; nothing was acknowledged.
    #[error("{0}")]
    Unavailable(String),
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { kind, name } => EngineError::NotFound { kind, name },
            StoreError::AlreadyExists { kind, name } => EngineError::AlreadyExists { kind, name },
            e if e.kind() == StoreErrorKind::Conflict => EngineError::Conflict(e.to_string()),
            StoreError::InvalidArgument(message) => EngineError::BadRequest(message),
            e => EngineError::Unavailable(e.to_string()),
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
