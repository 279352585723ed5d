//! The reads, and how a row becomes a [`Record`].

use sqlx_core::executor::Executor;
use sqlx_core::query::query;
use sqlx_core::query_builder::QueryBuilder;
use sqlx_core::row::Row;
use sqlx_postgres::{PgPool, PgRow, Postgres};

use super::unavailable;
use crate::keyset::After;
use crate::{
    AuditRecord, CostGroup, CostQuery, CostTotal, EventRecord, ListQuery, Page, Record, StoreError,
};

/// What [`record`] decodes, in its order.
pub(super) const COLUMNS: &str = "seq, kind, namespace, name, resource_version, labels::TEXT, tool, phase, execution, checksum, agent, cost_micros, cost_currency, cost_at, body, created_at";

/// Rows fetched per round trip while a label selector skips some: the
/// selector is matched here, so a page may take several.
const SCAN_CHUNK: usize = 256;

pub(super) async fn get<'c>(
    conn: impl Executor<'c, Database = Postgres>,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<Record, StoreError> {
    let sql =
        format!("SELECT {COLUMNS} FROM objects WHERE kind = $1 AND namespace = $2 AND name = $3");
    query(&sql)
        .bind(kind)
        .bind(namespace)
        .bind(name)
        .fetch_optional(conn)
        .await
        .map_err(unavailable)?
        .map(|row| record(&row).map(|(_, r)| r).map_err(unavailable))
        .transpose()?
        .ok_or_else(|| StoreError::NotFound {
            kind: kind.to_owned(),
            name: name.to_owned(),
        })
}

/// `{select} WHERE ...` for the query's kind, namespace, index columns and
/// creation-time range.
fn filtered<'a>(select: &str, q: &ListQuery) -> QueryBuilder<'a, Postgres> {
    let mut sql = QueryBuilder::new(select);
    sql.push(" WHERE kind = ").push_bind(q.kind.clone());
    if !q.namespace.is_empty() {
        sql.push(" AND namespace = ").push_bind(q.namespace.clone());
    }
    let filters = [
        ("tool", &q.index.tool),
        ("phase", &q.index.phase),
        ("execution", &q.index.execution),
        ("checksum", &q.index.checksum),
        ("agent", &q.index.agent),
    ];
    for (column, value) in filters {
        if let Some(value) = value {
            sql.push(format_args!(" AND {column} = "))
                .push_bind(value.clone());
        }
    }
    for (bound, value) in [(">=", q.created_since_ms), ("<", q.created_before_ms)] {
        if let Some(ms) = value {
            sql.push(format_args!(" AND created_at {bound} "))
                .push_bind(ms);
        }
    }
    if let Some(condition) = q.creation_condition() {
        sql.push(format_args!(" AND {condition}"));
    }
    sql
}

/// How many objects match the query's kind, namespace, index columns and
/// range; with a cap, at most that many (the rows past it are not visited).
pub(super) async fn count(
    pool: &PgPool,
    q: &ListQuery,
    cap: Option<u64>,
) -> Result<u64, StoreError> {
    let mut sql = match cap {
        Some(cap) => {
            let mut sql = filtered("SELECT COUNT(*) FROM (SELECT 1 FROM objects", q);
            sql.push(" LIMIT ")
                .push_bind(i64::try_from(cap).unwrap_or(i64::MAX))
                .push(") AS counted");
            sql
        }
        None => filtered("SELECT COUNT(*) FROM objects", q),
    };
    let n: i64 = sql
        .build()
        .fetch_one(pool)
        .await
        .and_then(|row| row.try_get(0))
        .map_err(unavailable)?;
    Ok(u64::try_from(n).unwrap_or_default())
}

/// Sums ToolCall costs, grouped as asked, largest first.
pub(super) async fn cost_totals(
    pool: &PgPool,
    q: &CostQuery,
) -> Result<Vec<CostTotal>, StoreError> {
    let group = match q.group_by {
        CostGroup::Tool => "tool",
        CostGroup::Agent => "agent",
        CostGroup::Execution => "execution",
        CostGroup::Namespace => "namespace",
        CostGroup::All => "''",
    };
    // SUM of BIGINT is NUMERIC in PostgreSQL; the cast keeps sums exact and
    // fails loudly (out of range) rather than rounding.
    let mut sql = QueryBuilder::<Postgres>::new(format!(
        "SELECT COALESCE({group}, ''), cost_currency, SUM(cost_micros)::BIGINT, COUNT(*) FROM objects
         WHERE kind = 'ToolCall' AND cost_micros IS NOT NULL"
    ));
    if !q.namespace.is_empty() {
        sql.push(" AND namespace = ").push_bind(q.namespace.clone());
    }
    if let Some(since) = q.since_ms {
        sql.push(" AND cost_at >= ").push_bind(since);
    }
    for (column, value) in [
        ("tool", &q.tool),
        ("agent", &q.agent),
        ("execution", &q.execution),
        ("cost_currency", &q.currency),
    ] {
        if let Some(value) = value {
            sql.push(format_args!(" AND {column} = "))
                .push_bind(value.clone());
        }
    }
    // Ties break by byte order, as in SQLite, whatever the database's collation.
    sql.push(format_args!(
        " GROUP BY 1, 2 ORDER BY 3 DESC, COALESCE({group}, '') COLLATE \"C\""
    ));
    let rows = sql.build().fetch_all(pool).await.map_err(unavailable)?;
    rows.iter()
        .map(|row| {
            Ok(CostTotal {
                key: row.try_get(0)?,
                currency: row.try_get(1)?,
                micros: row.try_get(2)?,
                calls: u64::try_from(row.try_get::<i64, _>(3)?).unwrap_or_default(),
            })
        })
        .collect::<Result<_, sqlx_core::Error>>()
        .map_err(unavailable)
}

/// Lists newest first. Label selectors are applied while stepping through the
/// rows, so a page is always full unless the list is exhausted. Each chunk is
/// its own statement: a row created meanwhile has a higher `seq` than the
/// chunks still to come and is left for a later list, as it would be had it
/// come a moment later.
pub(super) async fn list(pool: &PgPool, q: &ListQuery) -> Result<Page, StoreError> {
    let mut after = After::of(q)?;
    // One row beyond the page tells whether another page follows.
    let chunk = if q.selector.is_empty() {
        q.limit.saturating_add(1)
    } else {
        q.limit.saturating_add(1).max(SCAN_CHUNK)
    };
    let select = format!("SELECT {COLUMNS} FROM objects");
    let order = if q.by_creation() {
        " ORDER BY created_at DESC, seq DESC LIMIT "
    } else {
        " ORDER BY seq DESC LIMIT "
    };
    let mut page = Page::default();
    let mut last = None;
    loop {
        let mut sql = filtered(&select, &After::narrow(after, q));
        match after {
            None => {}
            Some(After::Seq(seq)) => {
                sql.push(" AND seq < ").push_bind(seq);
            }
            Some(After::Created { ms, seq }) => {
                sql.push(" AND (created_at < ").push_bind(ms);
                sql.push(" OR seq < ").push_bind(seq).push(")");
            }
        }
        sql.push(order)
            .push_bind(i64::try_from(chunk).unwrap_or(i64::MAX));
        let rows = sql.build().fetch_all(pool).await.map_err(unavailable)?;
        let exhausted = rows.len() < chunk;
        for row in &rows {
            let (seq, record) = record(row).map_err(unavailable)?;
            after = Some(match record.index.created_ms.filter(|_| q.by_creation()) {
                Some(ms) => After::Created { ms, seq },
                None => After::Seq(seq),
            });
            if !q.selector.matches(&record.labels) {
                continue;
            }
            if page.items.len() == q.limit {
                page.continue_token = last;
                return Ok(page);
            }
            last = Some(After::token(q, seq, record.index.created_ms));
            page.items.push(record);
        }
        if exhausted {
            return Ok(page);
        }
    }
}

/// A row of [`COLUMNS`] as its `seq` and record.
pub(super) fn record(row: &PgRow) -> Result<(i64, Record), sqlx_core::Error> {
    crate::rows::record(row)
}

impl crate::rows::Columns for PgRow {
    type Error = sqlx_core::Error;

    fn text(&self, at: usize) -> Result<String, Self::Error> {
        self.try_get(at)
    }

    fn maybe_text(&self, at: usize) -> Result<Option<String>, Self::Error> {
        self.try_get(at)
    }

    fn int(&self, at: usize) -> Result<i64, Self::Error> {
        self.try_get(at)
    }

    fn maybe_int(&self, at: usize) -> Result<Option<i64>, Self::Error> {
        self.try_get(at)
    }
}

pub(super) async fn list_audit(
    pool: &PgPool,
    namespace: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<AuditRecord>, StoreError> {
    let rows = query(
        "SELECT seq, prev, hash, body FROM audit WHERE namespace = $1 AND seq > $2
         ORDER BY seq LIMIT $3",
    )
    .bind(namespace)
    .bind(i64::try_from(after).unwrap_or(i64::MAX))
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .fetch_all(pool)
    .await
    .map_err(unavailable)?;
    audit_rows(namespace, &rows)
}

/// Served by `audit_by_record` (the same expression as the index).
pub(super) async fn audit_of(
    pool: &PgPool,
    namespace: &str,
    name: &str,
) -> Result<Vec<AuditRecord>, StoreError> {
    let rows = query(
        "SELECT seq, prev, hash, body FROM audit
         WHERE namespace = $1 AND substring(body from '\"name\":\"([^\"]*)\"') = $2
         ORDER BY seq",
    )
    .bind(namespace)
    .bind(name)
    .fetch_all(pool)
    .await
    .map_err(unavailable)?;
    audit_rows(namespace, &rows)
}

fn audit_rows(namespace: &str, rows: &[PgRow]) -> Result<Vec<AuditRecord>, StoreError> {
    rows.iter()
        .map(|r| crate::rows::audit(namespace, r))
        .collect::<Result<_, sqlx_core::Error>>()
        .map_err(unavailable)
}

pub(super) async fn audit_heads(pool: &PgPool) -> Result<Vec<AuditRecord>, StoreError> {
    // The entries themselves, not `audit_heads`' copy of their hash (a
    // verifier's view of the chain is its entries); `audit_heads` only
    // names the namespaces, so that this reads one entry per namespace
    // rather than walking them all.
    let rows = query(
        "SELECT a.namespace, a.seq, a.prev, a.hash, a.body FROM audit_heads AS h
         CROSS JOIN LATERAL (SELECT * FROM audit WHERE namespace = h.namespace
                             ORDER BY seq DESC LIMIT 1) AS a
         ORDER BY a.namespace",
    )
    .fetch_all(pool)
    .await
    .map_err(unavailable)?;
    rows.iter()
        .map(|r| {
            Ok(AuditRecord {
                namespace: r.try_get(0)?,
                seq: u64::try_from(r.try_get::<i64, _>(1)?).unwrap_or_default(),
                prev: r.try_get(2)?,
                hash: r.try_get(3)?,
                body: r.try_get(4)?,
            })
        })
        .collect::<Result<_, sqlx_core::Error>>()
        .map_err(unavailable)
}

pub(super) async fn list_events(
    pool: &PgPool,
    namespace: &str,
    execution: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<EventRecord>, StoreError> {
    let rows = query(
        "SELECT sequence, body FROM events WHERE namespace = $1 AND execution = $2 AND sequence > $3
         ORDER BY sequence LIMIT $4",
    )
    .bind(namespace)
    .bind(execution)
    .bind(i64::try_from(after).unwrap_or(i64::MAX))
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .fetch_all(pool)
    .await
    .map_err(unavailable)?;
    rows.iter()
        .map(|r| {
            Ok(EventRecord {
                namespace: namespace.to_owned(),
                execution: execution.to_owned(),
                sequence: u64::try_from(r.try_get::<i64, _>(0)?).unwrap_or_default(),
                body: r.try_get(1)?,
            })
        })
        .collect::<Result<_, sqlx_core::Error>>()
        .map_err(unavailable)
}

/// A round trip on a pooled connection: the server answers and the pool can
/// hand out connections.
/// How long a readiness check waits for the server: a probe that hangs
/// for the pool's whole acquire timeout while the server is gone would say
/// nothing until the prober gives up.
const PING_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

pub(super) async fn ping(pool: &PgPool) -> Result<(), StoreError> {
    match tokio::time::timeout(PING_WITHIN, query("SELECT 1").execute(pool)).await {
        Ok(answered) => answered.map(drop).map_err(unavailable),
        Err(_) => Err(StoreError::Unavailable(format!(
            "PostgreSQL did not answer within {PING_WITHIN:?}"
        ))),
    }
}
