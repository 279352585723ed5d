//! The MCP part: upstream servers brought in line as Tools (`discovery.rs`),
//! the front's sessions kept in the store (`sessions.rs`), and the relay
//! between a running call's upstream and the client attached to it
//! (`surface.rs`).
//!
//! Its state is its own; the rest of the engine reaches it through the
//! names re-exported here.

mod discovery;
mod sessions;
mod surface;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use discovery::drift_timeline;
pub use sessions::{
    MAX_CLIENT_BYTES, MAX_SUBSCRIPTIONS, MCP_SESSION_KIND, McpSession, McpSessionLimits,
    StreamSigner, TOO_MANY_SESSIONS, principal_key,
};
pub use surface::{AttachedClient, UpstreamNotice};

pub(crate) use discovery::SCHEMA_DRIFT_POLICY;

/// What the MCP part keeps besides the store.
#[derive(Default)]
pub(crate) struct State {
    /// One lock per McpServer (`namespace/name`): its listings run one at a time.
    syncs: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Clients attached to running calls, and upstream notifications.
    relays: surface::Relays,
}
