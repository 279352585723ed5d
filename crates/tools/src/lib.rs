//! joch as a library: the whole governed call path inside a Rust agent.
//!
//! An agent loop produces [`ToolCall`]s (the shape of seed 004) and hands
//! them to a [`ToolExecutor`]. joch offers two:
//!
//! - [`EmbeddedGateway`] runs the call path in this process on a SQLite
//!   file: every call is recorded before and after it runs, policies allow,
//!   deny, modify or defer it to a person, idempotency keys hold across
//!   retries and restarts. No server is needed.
//! - [`RemoteGateway`] sends the same calls to a running `joch serve` over
//!   HTTP, so an agent can move from one to the other without a change.
//!
//! ```
//! use joch_tools::{EmbeddedGateway, ToolCall, ToolExecutor};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), joch_tools::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("agent.db");
//! let gateway = EmbeddedGateway::open(path, "default").await?;
//! gateway.apply_manifest(serde_json::json!({
//!     "apiVersion": "joch.dev/v1alpha1", "kind": "Tool",
//!     "metadata": {"name": "echo"},
//!     "spec": {"inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
//! })).await?;
//! let call = ToolCall::new("echo").with_param("hello", "world").with_tool_call_id("call_1");
//! let output = gateway.execute_tool_call(&call).await?;
//! assert!(output.succeeded());
//! // The same model call again (a retried turn) does not run twice.
//! assert!(gateway.execute_tool_call(&call).await?.replayed);
//! # Ok(()) }
//! ```
//!
//! The crate holds no CLI, HTTP server or exporter: it is what the `joch`
//! binary builds on, and it sits in front of the call path
//! (`joch-engine`), turning seed 004's call into a recorded `ToolCall`
//! resource ([`resources::ToolCallRecord`]). Stores are features: `sqlite`
//! (default) and `postgres`.
#![warn(missing_docs)]

mod call;
#[cfg(feature = "sqlite")]
mod embedded;
mod error;
mod executor;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod open;
mod remote;

pub use call::{ExecutionContext, ToolCall, ToolDefinition, ToolOutput};
#[cfg(feature = "sqlite")]
pub use embedded::EmbeddedGateway;
pub use error::Error;
pub use executor::ToolExecutor;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use open::{StoreLocation, open_engine, start};
pub use remote::RemoteGateway;

/// The resources the gateways take and return. joch's record of a call is
/// [`ToolCallRecord`](resources::ToolCallRecord), apart from the model's
/// [`ToolCall`](crate::ToolCall).
pub mod resources {
    pub use joch_core::ToolCall as ToolCallRecord;
    pub use joch_core::{
        Approval, ApprovalPhase, CallError, Endpoint, Phase, Policy, Principal, Tool,
    };
}

/// The call path, for what the gateways do not wrap (replay, events,
/// costs, audit): [`EmbeddedGateway::engine`] hands it out.
pub mod engine {
    pub use joch_engine::{
        ApprovalDecision, Configurable, Engine, EngineConfig, EngineError, ListParams,
        RecoveryReport, Running, Workers,
    };
}
