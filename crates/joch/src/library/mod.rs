//! The pieces of the library API; `lib.rs` says what each is for.

pub(crate) mod call;
pub(crate) mod embedded;
pub(crate) mod error;
pub(crate) mod executor;
pub(crate) mod open;
pub(crate) mod remote;
