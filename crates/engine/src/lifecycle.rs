//! The lifecycle part: starting joch with every background worker
//! (`running.rs`), which first recovers the calls a crash interrupted
//! (`calls/recovery.rs`), and sharing one store with other replicas: their
//! leases, and the writes heard from them (`replicas.rs`).

mod replicas;
mod running;

pub use running::{Running, Workers};
