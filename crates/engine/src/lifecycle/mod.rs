//! The lifecycle part: starting joch with every background worker
//! (`running.rs`), recovering calls that a crash interrupted
//! (`recovery.rs`), and sharing one store with other replicas: their
//! leases, and the writes heard from them (`replicas.rs`).

mod orphans;
mod recovery;
mod replicas;
mod running;

pub use recovery::{RecoveryReport, Resolve};
pub use running::{Running, Workers};
