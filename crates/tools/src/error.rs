//! What can go wrong between an agent and joch.

/// A call could not be made: joch refused it as malformed, or could not be
/// reached. A call that was made and denied, failed or timed out is not an
/// error: it is a [`ToolOutput`](crate::ToolOutput) saying so.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The embedded engine refused the request.
    #[error(transparent)]
    Engine(#[from] joch_engine::EngineError),
    /// The remote joch answered with a structured error.
    #[error("joch answered {status} {code}: {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// joch's stable error code, e.g. `tool_not_found`.
        code: String,
        /// For people.
        message: String,
    },
    /// The remote joch could not be reached, or answered something else
    /// than joch would.
    #[error("cannot talk to joch: {0}")]
    Transport(String),
    /// The store could not be opened, or a manifest is not a resource.
    #[error("{0}")]
    Invalid(String),
}
