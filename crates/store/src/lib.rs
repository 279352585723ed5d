//! joch-store: where records live.
//!
//! It owns the [`Store`] trait (a namespaced object store with optimistic
//! concurrency and durable writes), its two implementations, and
//! `testsuite`, the behaviours both pass unchanged:
//! - [`SqliteStore`], embedded: one file, one writer thread that
//!   group-commits; for a single joch process.
//! - [`PostgresStore`], shared: one PostgreSQL database for several joch
//!   replicas, which keeps the store's guarantees (one winner per
//!   idempotency key, optimistic versions, gapless event numbers, an
//!   unforked audit chain) across processes.
//!
//! It knows nothing of policy or execution: the engine decides what to write
//! and when; the store guarantees that an acknowledged `Durability::Sync`
//! write survives a crash.
//!
//! Each store is a feature (`sqlite`, `postgres`; both by default), so
//! that an embedder builds only the driver it uses.
#![warn(missing_docs)]

pub mod blobs;
mod checkpoints;
mod error;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod keyset;
#[cfg(feature = "postgres")]
pub mod postgres;
mod record;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod rows;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod timing;
mod typed;

#[cfg(any(test, feature = "testsuite"))]
pub mod testsuite;

pub use blobs::{Blob, Blobs, FileBlobs};
pub use checkpoints::CHECKPOINT_KIND;
pub use error::{StoreError, StoreErrorKind};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresBlobs, PostgresOptions, PostgresStore};
pub use record::{
    AuditRecord, CREATION_INDEXED, Change, CostGroup, CostQuery, CostTotal, Durability,
    EventRecord, IdempotencyClaim, ListQuery, Page, RateCell, Record, Store,
};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use typed::ObjectList;
