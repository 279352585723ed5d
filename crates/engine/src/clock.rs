//! The engine's clock, and the names it gives calls its callers did not
//! name.

use chrono::Utc;
use joch_core::Time;

/// The current time, the engine's only clock read.
pub(crate) fn now() -> Time {
    Time(Utc::now())
}

/// A name for a call the caller did not name: a UUIDv7, so names sort by
/// creation and new index entries land together at the end of the index
/// (random names would dirty a different page of it with every call).
pub(crate) fn new_call_name() -> String {
    uuid::Uuid::now_v7().to_string()
}
