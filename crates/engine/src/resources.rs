//! The resources part: what clients configure (Tools, Policies, Endpoints,
//! McpServers, Budgets, Namespaces, tokens...), written through
//! `writes.rs` with each kind's own checks, read through `reads.rs` and
//! `namespaces.rs` as a principal may, and kept for the call path in the
//! catalog (`catalog.rs`): snapshots of the store, so that a call pays no
//! store read for each.

pub(crate) mod catalog;
mod limits;
mod namespaces;
mod reads;
pub(crate) mod schema;
mod snapshots;
mod writes;

use std::sync::Arc;

use joch_store::Store;

pub(crate) use crate::lists::valid_namespace;
pub use writes::Configurable;
pub(crate) use writes::admit;

use catalog::Catalog;

use crate::identity::host::HostAccess;
use crate::identity::rules::Visibility;
use crate::lists::Lists;

/// The resources part: writes each kind through its own checks, reads as
/// a principal may, and keeps the catalog the call path reads.
pub struct Resources {
    store: Arc<dyn Store>,
    catalog: Arc<Catalog>,
    visibility: Visibility,
    lists: Lists,
    host_access: HostAccess,
}

impl Resources {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        catalog: Arc<Catalog>,
        visibility: Visibility,
        lists: Lists,
        host_access: HostAccess,
    ) -> Self {
        Self {
            store,
            catalog,
            visibility,
            lists,
            host_access,
        }
    }
}
