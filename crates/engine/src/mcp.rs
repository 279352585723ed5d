//! The MCP part: upstream servers brought in line as Tools (`discovery.rs`),
//! the front's sessions kept in the store (`sessions.rs`), and the relay
//! between a running call's upstream and the client attached to it
//! (`surface.rs`).
//!
//! A part with walls: its state is its own, and `Mcp::new` names the parts
//! it uses (the store, the backends' MCP discovery and surface, the
//! catalog, resources and events).

mod discovery;
mod sessions;
mod surface;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use joch_core::ToolBackend;
use joch_store::Store;

use crate::catalog::Catalog;
use crate::events::Events;
use crate::identity::HostAccess;
use crate::resources::Resources;

pub use discovery::drift_timeline;
pub use sessions::{
    MAX_CLIENT_BYTES, MAX_SUBSCRIPTIONS, MCP_SESSION_KIND, McpSession, McpSessionLimits,
    StreamSigner, TOO_MANY_SESSIONS, principal_key,
};
pub use surface::{AttachedClient, UpstreamNotice};

pub(crate) use discovery::SCHEMA_DRIFT_POLICY;

/// The MCP part: upstream servers brought in line as Tools, the front's
/// sessions, and relays between running calls and attached clients.
/// Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Mcp {
    inner: Arc<Parts>,
}

/// What the MCP part uses and keeps.
struct Parts {
    store: Arc<dyn Store>,
    backends: HashMap<&'static str, Arc<dyn ToolBackend>>,
    catalog: Arc<Catalog>,
    resources: Arc<Resources>,
    events: Arc<Events>,
    sessions: McpSessionLimits,
    host_access: HostAccess,
    /// One lock per McpServer (`namespace/name`): its listings run one at a time.
    syncs: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Clients attached to running calls, and upstream notifications.
    relays: surface::Relays,
}

impl Mcp {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        backends: HashMap<&'static str, Arc<dyn ToolBackend>>,
        catalog: Arc<Catalog>,
        resources: Arc<Resources>,
        events: Arc<Events>,
        sessions: McpSessionLimits,
        host_access: HostAccess,
    ) -> Self {
        let inner = Parts {
            store,
            backends,
            catalog,
            resources,
            events,
            sessions,
            host_access,
            syncs: Mutex::default(),
            relays: surface::Relays::default(),
        };
        Self {
            inner: Arc::new(inner),
        }
    }
}
