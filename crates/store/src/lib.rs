//! joch-store: where records live.
//!
//! It owns the [`Store`] trait (a namespaced object store with optimistic
//! concurrency and group-committed, durable writes), its embedded SQLite
//! implementation, and `testsuite`, the behaviours any implementation
//! (SQLite now, PostgreSQL later) must pass unchanged.
//!
//! It knows nothing of policy or execution: the engine decides what to write
//! and when; the store guarantees that an acknowledged `Durability::Sync`
//! write survives a crash.
#![warn(missing_docs)]

mod error;
mod record;
pub mod sqlite;
mod typed;

#[cfg(any(test, feature = "testsuite"))]
pub mod testsuite;

pub use error::{StoreError, StoreErrorKind};
pub use record::{
    AuditRecord, CostGroup, CostQuery, CostTotal, Durability, EventRecord, IdempotencyClaim,
    ListQuery, Page, Record, Store,
};
pub use sqlite::SqliteStore;
pub use typed::ObjectList;
