//! Versioned schema migrations, tracked in `PRAGMA user_version`.

use rusqlite::Connection;

use super::unavailable;
use crate::StoreError;

/// Every migration in order; the database's `user_version` counts how many ran.
pub(super) const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/sqlite/0001_objects.sql"),
    include_str!("../../migrations/sqlite/0002_idempotency_keys.sql"),
    include_str!("../../migrations/sqlite/0003_events.sql"),
    include_str!("../../migrations/sqlite/0004_checksum_index.sql"),
    include_str!("../../migrations/sqlite/0005_costs.sql"),
    include_str!("../../migrations/sqlite/0006_audit.sql"),
    include_str!("../../migrations/sqlite/0007_checksum_index_in_executions.sql"),
    include_str!("../../migrations/sqlite/0008_rate_cells.sql"),
    include_str!("../../migrations/sqlite/0009_audit_by_record.sql"),
    include_str!("../../migrations/sqlite/0010_created_at.sql"),
    include_str!("../../migrations/sqlite/0011_fewer_pages.sql"),
];

/// Applies the migrations the database has not seen, each in its own transaction.
pub(super) fn run(conn: &mut Connection) -> Result<(), StoreError> {
    let applied: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(unavailable)?;
    let applied = usize::try_from(applied).unwrap_or(usize::MAX);
    if applied > MIGRATIONS.len() {
        return Err(StoreError::Unavailable(format!(
            "the database has schema version {applied}, newer than this joch knows ({})",
            MIGRATIONS.len()
        )));
    }
    for (version, sql) in MIGRATIONS.iter().enumerate().skip(applied) {
        let tx = conn.transaction().map_err(unavailable)?;
        tx.execute_batch(sql).map_err(unavailable)?;
        tx.pragma_update(None, "user_version", (version + 1) as i64)
            .map_err(unavailable)?;
        tx.commit().map_err(unavailable)?;
        tracing::info!(version = version + 1, "applied store migration");
    }
    Ok(())
}
