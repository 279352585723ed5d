//! The writes: each commits before it returns, in one transaction when it
//! takes more than one statement.

use sqlx_core::executor::Executor;
use sqlx_core::query::{Query, query};
use sqlx_core::row::Row;
use sqlx_postgres::{PgArguments, PgConnection, PgPool, PgTransaction, Postgres};

use super::reads::{self, COLUMNS};
use super::unavailable;
use crate::{EventRecord, IdempotencyClaim, RateCell, Record, StoreError};

type PgQuery<'q> = Query<'q, Postgres, PgArguments>;

/// Binds a record's columns as `$1..$14`, in the order both the insert and
/// the update name them.
fn bind_record<'q>(q: PgQuery<'q>, r: &'q Record) -> Result<PgQuery<'q>, StoreError> {
    let cost = r.index.cost.as_ref();
    Ok(q.bind(r.kind.as_str())
        .bind(r.namespace.as_str())
        .bind(r.name.as_str())
        .bind(version_to_sql(r.resource_version)?)
        .bind(serde_json::to_string(&r.labels).unwrap_or_else(|_| "{}".to_owned()))
        .bind(r.index.tool.as_deref())
        .bind(r.index.phase.as_deref())
        .bind(r.index.execution.as_deref())
        .bind(r.index.checksum.as_deref())
        .bind(r.index.agent.as_deref())
        .bind(cost.map(|c| c.micros))
        .bind(cost.map(|c| c.currency.as_str()))
        .bind(cost.map(|c| c.at_ms))
        .bind(r.body.as_str()))
}

pub(super) fn version_to_sql(version: u64) -> Result<i64, StoreError> {
    i64::try_from(version)
        .map_err(|_| StoreError::InvalidArgument(format!("resourceVersion {version} is too large")))
}

/// Inserts `record`, first claiming `claim`'s key for it when given: both
/// commit, or neither does.
pub(super) async fn create(
    pool: &PgPool,
    record: &Record,
    claim: Option<&IdempotencyClaim>,
) -> Result<(), StoreError> {
    let Some(claim) = claim else {
        return insert(pool, record).await;
    };
    let mut tx = pool.begin().await.map_err(unavailable)?;
    let created = async {
        claim_key(&mut tx, &record.namespace, &record.name, claim).await?;
        insert(&mut *tx, record).await
    }
    .await;
    finish(tx, created).await
}

/// Commits `tx` if `result` is a success; otherwise rolls it back before
/// answering, so a refused write holds no lock (a claimed key, a chain's
/// head) once its caller hears of it. (Dropping a transaction also rolls it
/// back, but only when its connection is next used.)
async fn finish<T>(tx: PgTransaction<'_>, result: Result<T, StoreError>) -> Result<T, StoreError> {
    match result {
        Ok(value) => {
            tx.commit().await.map_err(unavailable)?;
            Ok(value)
        }
        Err(e) => {
            // A failed rollback means a broken connection, whose transaction
            // the server aborts anyway; the caller needs the first error.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

pub(super) async fn insert<'c>(
    conn: impl Executor<'c, Database = Postgres>,
    r: &Record,
) -> Result<(), StoreError> {
    // ON CONFLICT DO NOTHING rather than catching the unique violation: the
    // transaction stays usable and the server logs no error for a duplicate.
    let sql = "INSERT INTO objects (kind, namespace, name, resource_version, labels, tool, phase,
               execution, checksum, agent, cost_micros, cost_currency, cost_at, body, created_at)
               VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
               ON CONFLICT (kind, namespace, name) DO NOTHING";
    // `created_at` is bound here only: set once, an update leaves it alone.
    let inserted = bind_record(query(sql), r)?
        .bind(r.created_at())
        .execute(conn)
        .await
        .map_err(unavailable)?
        .rows_affected();
    if inserted == 1 {
        Ok(())
    } else {
        Err(StoreError::AlreadyExists {
            kind: r.kind.clone(),
            name: r.name.clone(),
        })
    }
}

/// Claims a key for call `call`, replacing an expired claim. A live claim is
/// reported with the call that holds it.
async fn claim_key(
    conn: &mut PgConnection,
    namespace: &str,
    call: &str,
    c: &IdempotencyClaim,
) -> Result<(), StoreError> {
    // One statement decides: a concurrent claimer of the same key waits on
    // the row until this transaction ends, then sees its outcome. When the
    // WHERE refuses the update, the conflicting row is still locked, so the
    // holder read below is the one that stays.
    let claimed = query(
        "INSERT INTO idempotency_keys AS held (namespace, tool, key, call, checksum, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (namespace, tool, key) DO UPDATE
             SET call = EXCLUDED.call, checksum = EXCLUDED.checksum, expires_at = EXCLUDED.expires_at
             WHERE held.expires_at <= $7",
    )
    .bind(namespace)
    .bind(c.tool.as_str())
    .bind(c.key.as_str())
    .bind(call)
    .bind(c.checksum.as_str())
    .bind(c.expires_at_ms)
    .bind(c.now_ms)
    .execute(&mut *conn)
    .await
    .map_err(unavailable)?
    .rows_affected();
    if claimed == 1 {
        return Ok(());
    }
    let holder = query(
        "SELECT call, checksum FROM idempotency_keys WHERE namespace = $1 AND tool = $2 AND key = $3",
    )
    .bind(namespace)
    .bind(c.tool.as_str())
    .bind(c.key.as_str())
    .fetch_one(&mut *conn)
    .await
    .map_err(unavailable)?;
    Err(StoreError::KeyClaimed {
        call: holder.try_get(0).map_err(unavailable)?,
        checksum: holder.try_get(1).map_err(unavailable)?,
    })
}

pub(super) async fn purge_keys(pool: &PgPool, now_ms: i64) -> Result<usize, StoreError> {
    let mut purged = 0;
    for sql in [
        "DELETE FROM idempotency_keys WHERE expires_at <= $1",
        "DELETE FROM rate_cells WHERE tat <= $1",
    ] {
        purged += query(sql)
            .bind(now_ms)
            .execute(pool)
            .await
            .map_err(unavailable)?
            .rows_affected();
    }
    Ok(usize::try_from(purged).unwrap_or(usize::MAX))
}

/// Why an update of `r` at `expected_version` matched nothing: the object
/// is missing, or its version is another.
pub(super) async fn not_replaced(
    conn: &mut PgConnection,
    r: &Record,
    expected_version: u64,
) -> StoreError {
    match reads::get(&mut *conn, &r.kind, &r.namespace, &r.name).await {
        Err(e) => e,
        Ok(_) => StoreError::Conflict {
            kind: r.kind.clone(),
            name: r.name.clone(),
            expected: expected_version,
        },
    }
}

pub(super) async fn delete(
    pool: &PgPool,
    kind: &str,
    namespace: &str,
    name: &str,
    expected_version: Option<u64>,
) -> Result<Record, StoreError> {
    let expected = expected_version.map(version_to_sql).transpose()?;
    let mut conn = pool.acquire().await.map_err(unavailable)?;
    let sql = format!(
        "DELETE FROM objects WHERE kind = $1 AND namespace = $2 AND name = $3
         AND ($4::BIGINT IS NULL OR resource_version = $4) RETURNING {COLUMNS}"
    );
    let removed = query(&sql)
        .bind(kind)
        .bind(namespace)
        .bind(name)
        .bind(expected)
        .fetch_optional(&mut *conn)
        .await
        .map_err(unavailable)?;
    if let Some(row) = removed {
        return reads::record(&row).map(|(_, r)| r).map_err(unavailable);
    }
    // Nothing matched: tell a missing object from a stale version.
    reads::get(&mut *conn, kind, namespace, name).await?;
    Err(StoreError::Conflict {
        kind: kind.to_owned(),
        name: name.to_owned(),
        expected: expected_version.unwrap_or_default(),
    })
}

/// Numbers the event after the execution's last one. One statement: the
/// upsert of the execution's head row locks it until the insert commits, so
/// concurrent appenders, in any process, take turns.
pub(super) async fn append_event(pool: &PgPool, e: &EventRecord) -> Result<u64, StoreError> {
    let sequence: i64 = query(
        "WITH head AS (
             INSERT INTO event_heads AS h (namespace, execution, sequence) VALUES ($1, $2, 1)
             ON CONFLICT (namespace, execution) DO UPDATE SET sequence = h.sequence + 1
             RETURNING sequence
         )
         INSERT INTO events (namespace, execution, sequence, body)
         SELECT $1, $2, sequence, $3 FROM head
         RETURNING sequence",
    )
    .bind(e.namespace.as_str())
    .bind(e.execution.as_str())
    .bind(e.body.as_str())
    .fetch_one(pool)
    .await
    .and_then(|row| row.try_get(0))
    .map_err(unavailable)?;
    Ok(u64::try_from(sequence).unwrap_or_default())
}

/// One call from a rate cell (GCRA), in one statement: the upsert moves
/// the cell on only if the call fits, and returns nothing if it does not.
/// Replicas racing for one cell take turns on its row.
pub(super) async fn take_rate(
    pool: &PgPool,
    cell: &RateCell,
    now_ms: i64,
) -> Result<Option<u64>, StoreError> {
    let taken = query(
        "INSERT INTO rate_cells AS c (namespace, rate_limit, key, tat) VALUES ($1, $2, $3, $4 + $5)
         ON CONFLICT (namespace, rate_limit, key) DO UPDATE SET tat = GREATEST(c.tat, $4) + $5
         WHERE GREATEST(c.tat, $4) + $5 - $6 <= $4
         RETURNING tat",
    )
    .bind(cell.namespace.as_str())
    .bind(cell.limit.as_str())
    .bind(cell.key.as_str())
    .bind(now_ms)
    .bind(cell.interval_ms)
    .bind(cell.tolerance_ms)
    .fetch_optional(pool)
    .await
    .map_err(unavailable)?;
    if taken.is_some() {
        return Ok(None);
    }
    let tat: i64 =
        query("SELECT tat FROM rate_cells WHERE namespace = $1 AND rate_limit = $2 AND key = $3")
            .bind(cell.namespace.as_str())
            .bind(cell.limit.as_str())
            .bind(cell.key.as_str())
            .fetch_one(pool)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(unavailable)?;
    Ok(Some(cell.wait_ms(tat, now_ms)))
}
