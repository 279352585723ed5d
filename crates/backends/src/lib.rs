//! joch-backends: the things that actually run a tool.
//!
//! Each backend implements `joch_core::ToolBackend` for one
//! `spec.backend.type`. Backends only execute: they never record, decide
//! policy or retry a call that is not idempotent; the engine does all of that
//! around them, the same way for every backend. They depend on `joch-core`
//! alone.
#![warn(missing_docs)]

mod actions;
mod mcp;
mod noop;
mod oauth;
pub mod outbound;
mod rest;

pub use actions::ActionsExecutor;
pub use mcp::{MAX_USER_CONNECTIONS, McpClients};
pub use noop::NoopBackend;
pub use oauth::HttpTokenEndpoint;
pub use rest::{RestConfig, WebhookBackend, install_crypto_provider};

/// Reads a secret header's value; the value never leaves the request it is
/// sent with.
fn secret(source: &joch_core::endpoint::SecretSource) -> Result<String, String> {
    match (&source.env, &source.file) {
        // Refused when applied too; a record older than that rule is not
        // read either.
        (Some(var), _) if var.starts_with(joch_core::host::OWN_ENV_PREFIX) => Err(format!(
            "secret environment variable {var:?} is one of joch's own and is never read"
        )),
        (Some(var), _) => std::env::var(var)
            .map_err(|_| format!("secret environment variable {var:?} is not set")),
        (None, Some(path)) => std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .map_err(|e| format!("secret file {path:?} cannot be read: {e}")),
        (None, None) => Err("a secret header names no source".to_owned()),
    }
}
