//! The resources part: what clients configure (Tools, Policies, Endpoints,
//! McpServers, Budgets, Namespaces, tokens...), written through
//! `writes.rs` with each kind's own checks, read through `reads.rs` and
//! `namespaces.rs` as a principal may, and kept for the call path in the
//! catalog (`catalog.rs`, a part of its own): snapshots of the store, so that a call pays no
//! store read for each.

mod namespaces;
mod reads;
mod writes;

use std::sync::Arc;

use joch_store::Store;

pub(crate) use crate::lists::valid_namespace;
pub use writes::Configurable;
pub(crate) use writes::admit;

use crate::catalog::Catalog;

use crate::lists::Lists;
use crate::rules::Visibility;
use crate::rules::host::HostAccess;

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
