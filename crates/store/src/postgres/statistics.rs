//! The planner's first statistics of a new database.
//!
//! PostgreSQL plans a lookup by name (`kind, namespace, name`, the unique
//! key) well only once `ANALYZE` has seen the table's columns. Without
//! column statistics it prefers the list index `(kind, namespace, seq)` and
//! filters by name, reading every record of the namespace for each record
//! it looks up: a batch's updates then cost more with every call stored
//! (0.4 ms a row at 15,000 calls, on the project's machine). Autovacuum
//! gives a table its statistics only after its first nap (a minute by
//! default), and a new database under load stores tens of thousands of
//! calls in that minute.
//!
//! So a store that has written [`AFTER_WRITES`] records analyzes the
//! tables it looks records up in, if they still have no statistics, once.
//! A sample of a few hundred rows is enough: it shows the names unique and
//! the kinds and namespaces few, and the planner scales what it learnt to
//! the table's size as it grows. Autovacuum keeps them fresh from then on.
//! Each store counts its own writes, so with N replicas the table holds
//! about N times as many before the first of them analyzes: every lookup
//! until then reads the namespace (with three replicas and a threshold of
//! 1,000, two thirds of the batch updates' buffer reads in a bench run).

use sqlx_core::executor::Executor;
use sqlx_core::query_scalar::query_scalar;
use sqlx_postgres::PgPool;

use super::describe;

/// Records written by one store before it checks the statistics.
pub(super) const AFTER_WRITES: usize = 200;

/// The tables whose rows are looked up by key on the call path.
const TABLES: [&str; 4] = ["objects", "audit", "events", "idempotency_keys"];

/// Counts a store's writes, and analyzes once when they reach
/// [`AFTER_WRITES`].
pub(super) struct FirstStatistics {
    pool: PgPool,
    written: usize,
}

impl FirstStatistics {
    pub(super) fn new(pool: PgPool) -> Self {
        Self { pool, written: 0 }
    }

    /// `count` more records were written: the check runs, in a task of its
    /// own, when they first reach the threshold.
    pub(super) fn written(&mut self, count: usize) {
        let before = self.written;
        self.written = self.written.saturating_add(count);
        if before < AFTER_WRITES && self.written >= AFTER_WRITES {
            tokio::spawn(analyze_if_missing(self.pool.clone()));
        }
    }
}

/// Analyzes those of [`TABLES`] that have no statistics yet.
pub(super) async fn analyze_if_missing(pool: PgPool) {
    match missing(&pool).await {
        Ok(tables) if tables.is_empty() => {}
        Ok(tables) => {
            // The names come from `TABLES`, never from a client.
            let statement = format!("ANALYZE {}", tables.join(", "));
            match pool.execute(statement.as_str()).await {
                Ok(_) => tracing::info!(?tables, "gave a new database its first statistics"),
                Err(e) => tracing::warn!(error = %describe(&e), "cannot analyze the new database"),
            }
        }
        Err(e) => tracing::warn!(error = %describe(&e), "cannot read the database's statistics"),
    }
}

/// Those of [`TABLES`] without a single column's statistics.
pub(super) async fn missing(pool: &PgPool) -> Result<Vec<String>, sqlx_core::Error> {
    query_scalar(
        "SELECT t FROM UNNEST($1::TEXT[]) AS t
         WHERE NOT EXISTS (SELECT 1 FROM pg_stats s
                           WHERE s.schemaname = current_schema() AND s.tablename = t)",
    )
    .bind(&TABLES[..])
    .fetch_all(pool)
    .await
}
