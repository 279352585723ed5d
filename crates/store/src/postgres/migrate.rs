//! Versioned schema migrations, run by sqlx's migrator and recorded in its
//! `_sqlx_migrations` table.
//!
//! The migrator holds a session-level `pg_advisory_lock` (keyed by the
//! database's name) while it checks and applies migrations, so several
//! replicas starting at once against one database are safe: one applies the
//! missing migrations, the others wait, then find nothing left to do.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use sqlx_core::error::BoxDynError;
use sqlx_core::migrate::{MigrateError, Migration, MigrationSource, MigrationType, Migrator};
use sqlx_postgres::PgPool;

use crate::StoreError;

/// Every migration in order: (version, description, SQL). Compiled in, so a
/// binary carries its schema; an applied migration must never be edited
/// (the migrator compares checksums and refuses a changed one).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "objects",
        include_str!("../../migrations/postgres/0001_objects.sql"),
    ),
    (
        2,
        "idempotency keys",
        include_str!("../../migrations/postgres/0002_idempotency_keys.sql"),
    ),
    (
        3,
        "events",
        include_str!("../../migrations/postgres/0003_events.sql"),
    ),
    (
        4,
        "audit",
        include_str!("../../migrations/postgres/0004_audit.sql"),
    ),
    (
        5,
        "change notifications",
        include_str!("../../migrations/postgres/0005_notify.sql"),
    ),
    (
        6,
        "checksum index within executions",
        include_str!("../../migrations/postgres/0006_checksum_index_in_executions.sql"),
    ),
    (
        7,
        "artifact contents",
        include_str!("../../migrations/postgres/0007_blobs.sql"),
    ),
    (
        8,
        "rate limits shared by replicas",
        include_str!("../../migrations/postgres/0008_rate_cells.sql"),
    ),
    (
        9,
        "audit entries by record",
        include_str!("../../migrations/postgres/0009_audit_by_record.sql"),
    ),
    (
        10,
        "creation time of calls",
        include_str!("../../migrations/postgres/0010_created_at.sql"),
    ),
    (
        11,
        "change notifications after commit",
        include_str!("../../migrations/postgres/0011_notify_after_commit.sql"),
    ),
    (
        12,
        "audit entries queued for linking",
        include_str!("../../migrations/postgres/0012_audit_queue.sql"),
    ),
];

/// [`MIGRATIONS`] as a source for sqlx's migrator. (The `sqlx::migrate!`
/// macro would embed the same files, but it lives in the `sqlx` facade, which
/// cannot be a dependency beside rusqlite: see the workspace `Cargo.toml`.)
#[derive(Debug)]
struct Embedded;

impl MigrationSource<'static> for Embedded {
    fn resolve(
        self,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, BoxDynError>> + Send + 'static>> {
        let migrations = MIGRATIONS
            .iter()
            .map(|&(version, description, sql)| {
                Migration::new(
                    version,
                    Cow::Borrowed(description),
                    MigrationType::Simple,
                    Cow::Borrowed(sql),
                    false,
                )
            })
            .collect();
        Box::pin(std::future::ready(Ok(migrations)))
    }
}

/// Applies the migrations the database has not seen, each in its own
/// transaction, under the migrator's advisory lock.
pub(super) async fn run(pool: &PgPool) -> Result<(), StoreError> {
    let migrator = Migrator::new(Embedded).await.map_err(refused)?;
    migrator.run(pool).await.map_err(refused)
}

fn refused(e: MigrateError) -> StoreError {
    let known = MIGRATIONS.len();
    StoreError::Unavailable(match e {
        MigrateError::VersionMissing(version) => format!(
            "the database has schema migration {version}, newer than this joch knows ({known})"
        ),
        MigrateError::VersionMismatch(version) => format!(
            "schema migration {version} in the database differs from this joch's: \
             it was edited after being applied"
        ),
        MigrateError::Execute(e) => super::describe(&e),
        MigrateError::ExecuteMigration(e, version) => {
            format!(
                "applying schema migration {version}: {}",
                super::describe(&e)
            )
        }
        other => format!("cannot migrate the PostgreSQL schema: {other}"),
    })
}
