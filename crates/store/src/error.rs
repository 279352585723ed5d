//! Store errors, normalised so the engine never sees a driver error.

/// What went wrong, independent of the database underneath.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// No object with that kind, namespace and name.
    NotFound,
    /// An object with that kind, namespace and name already exists.
    AlreadyExists,
    /// The object changed since it was read (`resourceVersion` mismatch).
    Conflict,
    /// An idempotency key is held by another call.
    KeyClaimed,
    /// The request itself is malformed (e.g. a `continue` token this store never issued).
    InvalidArgument,
    /// The store cannot serve requests (I/O error, closed, corrupt data).
    Unavailable,
}

/// An error from a [`crate::Store`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// See [`StoreErrorKind::NotFound`].
    #[error("{kind} {name:?} not found")]
    NotFound {
        /// Kind of the object.
        kind: String,
        /// Its name.
        name: String,
    },
    /// See [`StoreErrorKind::AlreadyExists`].
    #[error("{kind} {name:?} already exists")]
    AlreadyExists {
        /// Kind of the object.
        kind: String,
        /// Its name.
        name: String,
    },
    /// See [`StoreErrorKind::Conflict`].
    #[error("{kind} {name:?} was modified: resourceVersion {expected} is not the current one")]
    Conflict {
        /// Kind of the object.
        kind: String,
        /// Its name.
        name: String,
        /// The version the writer expected.
        expected: u64,
    },
    /// See [`StoreErrorKind::KeyClaimed`].
    #[error("idempotency key is held by call {call:?}")]
    KeyClaimed {
        /// The call holding the key.
        call: String,
        /// That call's checksum.
        checksum: String,
    },
    /// See [`StoreErrorKind::InvalidArgument`].
    #[error("{0}")]
    InvalidArgument(String),
    /// See [`StoreErrorKind::Unavailable`].
    #[error("store unavailable: {0}")]
    Unavailable(String),
}

impl StoreError {
    /// The backend-independent kind of this error.
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            StoreError::NotFound { .. } => StoreErrorKind::NotFound,
            StoreError::AlreadyExists { .. } => StoreErrorKind::AlreadyExists,
            StoreError::Conflict { .. } => StoreErrorKind::Conflict,
            StoreError::KeyClaimed { .. } => StoreErrorKind::KeyClaimed,
            StoreError::InvalidArgument(_) => StoreErrorKind::InvalidArgument,
            StoreError::Unavailable(_) => StoreErrorKind::Unavailable,
        }
    }
}
