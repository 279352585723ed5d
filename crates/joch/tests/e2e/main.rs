//! End-to-end tests: the real `joch` binary over HTTP, with real webhooks,
//! on real SQLite files. One test binary, a module per area.

#![allow(clippy::unwrap_used)]

mod harness;

mod calls;
mod cli;
mod crash;
mod errors;
mod faults;
mod idempotency;
mod load;
mod recovery;
mod replay;
mod resources;
