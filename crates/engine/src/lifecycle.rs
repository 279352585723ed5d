//! The lifecycle part: starting joch with every background worker
//! (`running.rs`), which first recovers the calls a crash interrupted
//! (`calls/recovery.rs`), and sharing one store with other replicas: their
//! leases, and the writes heard from them (`replicas.rs`).
//!
//! It sits on top of the other parts: it starts their workers and tells
//! them of other replicas' writes; no part reaches back to it.

mod replicas;
mod running;

use std::sync::Arc;

use joch_store::Store;

pub(crate) use running::Started;
pub use running::Workers;

use crate::approvals::Approvals;
use crate::artifacts::Artifacts;
use crate::audit::Audit;
use crate::calls::Calls;
use crate::catalog::Catalog;
use crate::events::Events;
use crate::identity::Identity;
use crate::mcp::Mcp;

/// The parts the lifecycle starts and keeps in step with other replicas,
/// handed to [`Lifecycle::new`] by the engine.
pub(crate) struct Needs {
    pub(crate) store: Arc<dyn Store>,
    /// This process's name among replicas (`EngineConfig::replica`).
    pub(crate) replica: Option<String>,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) events: Arc<Events>,
    pub(crate) calls: Calls,
    pub(crate) approvals: Approvals,
    pub(crate) mcp: Mcp,
    pub(crate) identity: Arc<Identity>,
    pub(crate) audit: Audit,
    pub(crate) artifacts: Arc<Artifacts>,
}

/// The lifecycle part: starts the workers beside the call path, and keeps
/// this replica in step with the others sharing its store. Cheap to
/// clone; clones share everything.
#[derive(Clone)]
pub(crate) struct Lifecycle {
    inner: Arc<Needs>,
}

impl Lifecycle {
    pub(crate) fn new(needs: Needs) -> Self {
        Self {
            inner: Arc::new(needs),
        }
    }
}
