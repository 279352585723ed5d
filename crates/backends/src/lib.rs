//! joch-backends: the things that actually run a tool.
//!
//! Each backend implements `joch_core::ToolBackend` for one
//! `spec.backend.type`. Backends only execute: they never record, decide
//! policy or retry a call that is not idempotent; the engine does all of that
//! around them, the same way for every backend. They depend on `joch-core`
//! alone.
#![warn(missing_docs)]

mod actions;
mod noop;
mod rest;

pub use actions::ActionsExecutor;
pub use noop::NoopBackend;
pub use rest::{RestConfig, WebhookBackend, install_crypto_provider};
