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
//! ```no_run
//! use joch::{EmbeddedGateway, ToolCall, ToolExecutor};
//! # async fn run() -> Result<(), joch::Error> {
//! let gateway = EmbeddedGateway::open("agent.db", "default").await?;
//! gateway.apply_manifest(serde_json::json!({
//!     "apiVersion": "joch.dev/v1alpha1", "kind": "Tool",
//!     "metadata": {"name": "echo"},
//!     "spec": {"inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
//! })).await?;
//! let output = gateway.execute_tool_call(&ToolCall::new("echo")).await?;
//! assert!(output.succeeded());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod library;

pub use library::call::{ExecutionContext, ToolCall, ToolDefinition, ToolOutput};
pub use library::embedded::EmbeddedGateway;
pub use library::error::Error;
pub use library::executor::ToolExecutor;
pub use library::open::{StoreLocation, open_engine, start};
pub use library::remote::RemoteGateway;

/// The resource types (`Tool`, `Policy`, `Approval`, ...).
pub use joch_core as resources;
/// The call path, for what the gateways do not wrap.
pub use joch_engine as engine;
