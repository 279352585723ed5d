//! The SQL: one function per statement, shared by the writer and the readers.

use std::collections::BTreeMap;

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, ErrorCode, OptionalExtension, Row, params};

use super::unavailable;
use crate::keyset::After;
use crate::{
    AuditRecord, CostGroup, CostQuery, CostTotal, EventRecord, IdempotencyClaim, ListQuery, Page,
    RateCell, Record, StoreError,
};

/// A text parameter in a `WHERE` that an index also uses for order (`ORDER
/// BY seq`, `MAX`). Written bare (`= ?`), SQLite cannot know the value's
/// type when it plans, marks the statement to be planned again for every
/// new binding, and so re-parses it on every use; cast, it is planned once.
/// Literal SQL in the queries below spells out the same cast.
const TEXT: &str = "CAST(? AS TEXT)";

const COLUMNS: &str = "seq, kind, namespace, name, resource_version, labels, tool, phase, execution, checksum, agent, cost_micros, cost_currency, cost_at, body, created_at";

/// A record's values in the order of `COLUMNS` after `seq`, bound as ?1..?14
/// by both the insert and the update (`created_at`, set once, is the
/// insert's ?15).
fn row_values(r: &Record) -> rusqlite::Result<Vec<SqlValue>> {
    let cost = r.index.cost.as_ref();
    Ok(vec![
        r.kind.clone().into(),
        r.namespace.clone().into(),
        r.name.clone().into(),
        version_to_sql(r.resource_version)?.into(),
        labels_to_sql(&r.labels).into(),
        r.index.tool.clone().into(),
        r.index.phase.clone().into(),
        r.index.execution.clone().into(),
        r.index.checksum.clone().into(),
        r.index.agent.clone().into(),
        cost.map(|c| c.micros).into(),
        cost.map(|c| c.currency.clone()).into(),
        cost.map(|c| c.at_ms).into(),
        r.body.clone().into(),
    ])
}

pub(super) fn insert(conn: &Connection, r: &Record) -> Result<(), StoreError> {
    let result = conn
        .prepare_cached(
            "INSERT INTO objects (kind, namespace, name, resource_version, labels, tool, phase, execution, checksum,
             agent, cost_micros, cost_currency, cost_at, body, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        )
        .and_then(|mut stmt| {
            let mut values = row_values(r)?;
            values.push(r.created_at().into());
            stmt.execute(rusqlite::params_from_iter(values))
        });
    match result {
        Ok(_) => Ok(()),
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
            Err(StoreError::AlreadyExists {
                kind: r.kind.clone(),
                name: r.name.clone(),
            })
        }
        Err(e) => Err(unavailable(e)),
    }
}

/// Claims a key for call `call`, replacing an expired claim. A live claim
/// is reported with the call that holds it.
pub(super) fn claim_key(
    conn: &Connection,
    namespace: &str,
    call: &str,
    c: &IdempotencyClaim,
) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM idempotency_keys WHERE namespace = ?1 AND tool = ?2 AND key = ?3 AND expires_at <= ?4")
        .and_then(|mut stmt| stmt.execute(params![namespace, c.tool, c.key, c.now_ms]))
        .map_err(unavailable)?;
    let inserted = conn
        .prepare_cached(
            "INSERT INTO idempotency_keys (namespace, tool, key, call, checksum, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                namespace,
                c.tool,
                c.key,
                call,
                c.checksum,
                c.expires_at_ms
            ])
        })
        .map_err(unavailable)?;
    if inserted == 1 {
        return Ok(());
    }
    let (call, checksum) = conn
        .prepare_cached("SELECT call, checksum FROM idempotency_keys WHERE namespace = ?1 AND tool = ?2 AND key = ?3")
        .and_then(|mut stmt| stmt.query_row(params![namespace, c.tool, c.key], |r| Ok((r.get(0)?, r.get(1)?))))
        .map_err(unavailable)?;
    Err(StoreError::KeyClaimed { call, checksum })
}

pub(super) fn purge_keys(conn: &Connection, now_ms: i64) -> Result<usize, StoreError> {
    let mut purged = 0;
    for sql in [
        "DELETE FROM idempotency_keys WHERE expires_at <= ?1",
        "DELETE FROM rate_cells WHERE tat <= ?1",
    ] {
        purged += conn
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute(params![now_ms]))
            .map_err(unavailable)?;
    }
    Ok(purged)
}

pub(super) fn update(
    conn: &Connection,
    r: &Record,
    expected_version: u64,
) -> Result<(), StoreError> {
    let changed = conn
        .prepare_cached(
            "UPDATE objects SET resource_version = ?4, labels = ?5, tool = ?6, phase = ?7, execution = ?8,
             checksum = ?9, agent = ?10, cost_micros = ?11, cost_currency = ?12, cost_at = ?13, body = ?14
             WHERE kind = ?1 AND namespace = ?2 AND name = ?3 AND resource_version = ?15",
        )
        .and_then(|mut stmt| {
            let mut values = row_values(r)?;
            values.push(version_to_sql(expected_version)?.into());
            stmt.execute(rusqlite::params_from_iter(values))
        })
        .map_err(unavailable)?;
    if changed == 1 {
        return Ok(());
    }
    // Nothing matched: tell a missing object from a stale version.
    get(conn, &r.kind, &r.namespace, &r.name)?;
    Err(StoreError::Conflict {
        kind: r.kind.clone(),
        name: r.name.clone(),
        expected: expected_version,
    })
}

pub(super) fn delete(
    conn: &Connection,
    kind: &str,
    namespace: &str,
    name: &str,
    expected_version: Option<u64>,
) -> Result<Record, StoreError> {
    let current = get(conn, kind, namespace, name)?;
    if let Some(expected) = expected_version.filter(|v| *v != current.resource_version) {
        return Err(StoreError::Conflict {
            kind: kind.to_owned(),
            name: name.to_owned(),
            expected,
        });
    }
    conn.prepare_cached("DELETE FROM objects WHERE kind = ?1 AND namespace = ?2 AND name = ?3")
        .and_then(|mut stmt| stmt.execute(params![kind, namespace, name]))
        .map_err(unavailable)?;
    Ok(current)
}

pub(super) fn get(
    conn: &Connection,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<Record, StoreError> {
    let sql =
        format!("SELECT {COLUMNS} FROM objects WHERE kind = ?1 AND namespace = ?2 AND name = ?3");
    conn.prepare_cached(&sql)
        .and_then(|mut stmt| {
            stmt.query_row(params![kind, namespace, name], record)
                .optional()
        })
        .map_err(unavailable)?
        .map(|(_, r)| r)
        .ok_or_else(|| StoreError::NotFound {
            kind: kind.to_owned(),
            name: name.to_owned(),
        })
}

/// `{select} WHERE ...` for the query's kind, namespace, index columns and
/// creation-time range.
fn filtered(select: &str, q: &ListQuery) -> (String, Vec<SqlValue>) {
    let mut sql = format!("{select} WHERE kind = {TEXT}");
    let mut args: Vec<SqlValue> = vec![q.kind.clone().into()];
    if !q.namespace.is_empty() {
        sql.push_str(&format!(" AND namespace = {TEXT}"));
        args.push(q.namespace.clone().into());
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
            sql.push_str(&format!(" AND {column} = {TEXT}"));
            args.push(value.clone().into());
        }
    }
    for (bound, value) in [(">=", q.created_since_ms), ("<", q.created_before_ms)] {
        if let Some(ms) = value {
            sql.push_str(&format!(" AND created_at {bound} ?"));
            args.push(ms.into());
        }
    }
    if let Some(condition) = q.creation_condition() {
        sql.push_str(&format!(" AND {condition}"));
    }
    (sql, args)
}

/// How many objects match the query's kind, namespace, index columns and
/// range; with a cap, at most that many (the rows past it are not visited).
pub(super) fn count(conn: &Connection, q: &ListQuery, cap: Option<u64>) -> Result<u64, StoreError> {
    let (mut sql, mut args) = filtered("SELECT COUNT(*) FROM objects", q);
    if let Some(cap) = cap {
        let (inner, inner_args) = filtered("SELECT 1 FROM objects", q);
        sql = format!("SELECT COUNT(*) FROM ({inner} LIMIT ?)");
        args = inner_args;
        args.push(i64::try_from(cap).unwrap_or(i64::MAX).into());
    }
    let n: i64 = conn
        .prepare_cached(&sql)
        .and_then(|mut stmt| stmt.query_row(rusqlite::params_from_iter(args), |r| r.get(0)))
        .map_err(unavailable)?;
    Ok(u64::try_from(n).unwrap_or_default())
}

/// Sums ToolCall costs, grouped as asked, largest first.
pub(super) fn cost_totals(conn: &Connection, q: &CostQuery) -> Result<Vec<CostTotal>, StoreError> {
    let group = match q.group_by {
        CostGroup::Tool => "tool",
        CostGroup::Agent => "agent",
        CostGroup::Execution => "execution",
        CostGroup::Namespace => "namespace",
        CostGroup::All => "''",
    };
    let mut sql = format!(
        "SELECT COALESCE({group}, ''), cost_currency, SUM(cost_micros), COUNT(*) FROM objects
         WHERE kind = 'ToolCall' AND cost_micros IS NOT NULL"
    );
    let mut args: Vec<SqlValue> = Vec::new();
    if !q.namespace.is_empty() {
        sql.push_str(" AND namespace = ?");
        args.push(q.namespace.clone().into());
    }
    if let Some(since) = q.since_ms {
        sql.push_str(" AND cost_at >= ?");
        args.push(since.into());
    }
    for (column, value) in [
        ("tool", &q.tool),
        ("agent", &q.agent),
        ("execution", &q.execution),
        ("cost_currency", &q.currency),
    ] {
        if let Some(value) = value {
            sql.push_str(&format!(" AND {column} = ?"));
            args.push(value.clone().into());
        }
    }
    sql.push_str(" GROUP BY 1, 2 ORDER BY 3 DESC, 1");
    let mut stmt = conn.prepare_cached(&sql).map_err(unavailable)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(args), |row| {
            Ok(CostTotal {
                key: row.get(0)?,
                currency: row.get(1)?,
                micros: row.get(2)?,
                calls: u64::try_from(row.get::<_, i64>(3)?).unwrap_or_default(),
            })
        })
        .map_err(unavailable)?;
    rows.collect::<Result<_, _>>().map_err(unavailable)
}

/// Lists newest first. Label selectors are applied while stepping through the
/// rows, so a page is always full unless the list is exhausted.
/// A query by creation (`ListQuery::by_creation`) runs on the
/// `objects_by_created` index; one of every row (`every_row`), on the table.
pub(super) fn list(conn: &Connection, q: &ListQuery) -> Result<Page, StoreError> {
    let after = After::of(q)?;
    let table = if q.every_row {
        "objects NOT INDEXED"
    } else {
        "objects"
    };
    let (mut sql, mut args) = filtered(
        &format!("SELECT {COLUMNS} FROM {table}"),
        &After::narrow(after, q),
    );
    match after {
        None => {}
        Some(After::Seq(seq)) => {
            sql.push_str(" AND seq < ?");
            args.push(seq.into());
        }
        Some(After::Created { ms, seq }) => {
            sql.push_str(" AND (created_at < ? OR seq < ?)");
            args.extend([ms.into(), seq.into()]);
        }
    }
    sql.push_str(if q.by_creation() {
        " ORDER BY created_at DESC, seq DESC"
    } else {
        " ORDER BY seq DESC"
    });

    let mut stmt = conn.prepare_cached(&sql).map_err(unavailable)?;
    let mut rows = stmt
        .query(rusqlite::params_from_iter(args))
        .map_err(unavailable)?;
    let mut page = Page::default();
    let mut last = None;
    while let Some(row) = rows.next().map_err(unavailable)? {
        let (seq, record) = record(row).map_err(unavailable)?;
        if !q.selector.matches(&record.labels) {
            continue;
        }
        if page.items.len() == q.limit {
            page.continue_token = last;
            break;
        }
        last = Some(After::token(q, seq, record.index.created_ms));
        page.items.push(record);
    }
    Ok(page)
}

fn record(row: &Row<'_>) -> rusqlite::Result<(i64, Record)> {
    crate::rows::record(row)
}

impl crate::rows::Columns for Row<'_> {
    type Error = rusqlite::Error;

    fn text(&self, at: usize) -> rusqlite::Result<String> {
        self.get(at)
    }

    fn maybe_text(&self, at: usize) -> rusqlite::Result<Option<String>> {
        self.get(at)
    }

    fn int(&self, at: usize) -> rusqlite::Result<i64> {
        self.get(at)
    }

    fn maybe_int(&self, at: usize) -> rusqlite::Result<Option<i64>> {
        self.get(at)
    }
}

fn labels_to_sql(labels: &BTreeMap<String, String>) -> String {
    serde_json::to_string(labels).unwrap_or_else(|_| "{}".to_owned())
}

fn version_to_sql(version: u64) -> rusqlite::Result<i64> {
    i64::try_from(version).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

/// Numbers the event after the execution's last one. The single writer makes
/// read-then-insert safe; the unique index guards it anyway.
pub(super) fn append_event(conn: &Connection, e: &EventRecord) -> Result<u64, StoreError> {
    let last: i64 = conn
        .prepare_cached(
            "SELECT COALESCE(MAX(sequence), 0) FROM events WHERE namespace = CAST(?1 AS TEXT) AND execution = CAST(?2 AS TEXT)",
        )
        .and_then(|mut stmt| stmt.query_row(params![e.namespace, e.execution], |r| r.get(0)))
        .map_err(unavailable)?;
    let sequence = last + 1;
    conn.prepare_cached(
        "INSERT INTO events (namespace, execution, sequence, body) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut stmt| stmt.execute(params![e.namespace, e.execution, sequence, e.body]))
    .map_err(unavailable)?;
    Ok(u64::try_from(sequence).unwrap_or_default())
}

/// Links the entry to the namespace's last one. The single writer makes
/// read-then-insert safe; the primary key guards it anyway.
pub(super) fn append_audit(
    conn: &Connection,
    namespace: &str,
    body: &str,
) -> Result<u64, StoreError> {
    let last: Option<(i64, String)> = conn
        .prepare_cached(
            "SELECT seq, hash FROM audit WHERE namespace = CAST(?1 AS TEXT) ORDER BY seq DESC LIMIT 1",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![namespace], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(unavailable)?;
    let (seq, prev) = match last {
        Some((seq, hash)) => (seq + 1, hash),
        None => (1, joch_core::audit::GENESIS.to_owned()),
    };
    let hash = joch_core::audit::chain_hash(&prev, body);
    conn.prepare_cached(
        "INSERT INTO audit (namespace, seq, prev, hash, body) VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut stmt| stmt.execute(params![namespace, seq, prev, hash, body]))
    .map_err(unavailable)?;
    Ok(u64::try_from(seq).unwrap_or_default())
}

pub(super) fn list_audit(
    conn: &Connection,
    namespace: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<AuditRecord>, StoreError> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, prev, hash, body FROM audit WHERE namespace = CAST(?1 AS TEXT) AND seq > ?2 ORDER BY seq LIMIT ?3",
        )
        .map_err(unavailable)?;
    let rows = stmt
        .query_map(params![namespace, after, limit], |r| {
            audit_row(namespace, r)
        })
        .map_err(unavailable)?;
    rows.collect::<Result<_, _>>().map_err(unavailable)
}

/// An entry of `namespace`'s chain from `SELECT seq, prev, hash, body`.
fn audit_row(namespace: &str, r: &rusqlite::Row<'_>) -> rusqlite::Result<AuditRecord> {
    crate::rows::audit(namespace, r)
}

/// Served by `audit_by_record` (the same expression as the index; named,
/// as without statistics the planner would walk the namespace's chain).
pub(super) fn audit_of(
    conn: &Connection,
    namespace: &str,
    name: &str,
) -> Result<Vec<AuditRecord>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, prev, hash, body FROM audit INDEXED BY audit_by_record
             WHERE namespace = CAST(?1 AS TEXT)
               AND (CASE WHEN json_valid(body) THEN json_extract(body, '$.name') END) = ?2
             ORDER BY seq",
        )
        .map_err(unavailable)?;
    let rows = stmt
        .query_map(params![namespace, name], |r| audit_row(namespace, r))
        .map_err(unavailable)?;
    rows.collect::<Result<_, _>>().map_err(unavailable)
}

pub(super) fn audit_heads(conn: &Connection) -> Result<Vec<AuditRecord>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            // Namespace by namespace down the primary key (a skip scan):
            // a read per namespace, not a walk of every entry.
            "WITH RECURSIVE ns(n) AS (
                 SELECT MIN(namespace) FROM audit
                 UNION ALL
                 SELECT (SELECT MIN(namespace) FROM audit WHERE namespace > n) FROM ns
                 WHERE n IS NOT NULL
             )
             SELECT a.namespace, a.seq, a.prev, a.hash, a.body FROM ns
             JOIN audit AS a ON a.namespace = ns.n
              AND a.seq = (SELECT MAX(seq) FROM audit WHERE namespace = ns.n)",
        )
        .map_err(unavailable)?;
    let rows = stmt
        .query_map([], |r| {
            Ok(AuditRecord {
                namespace: r.get(0)?,
                seq: u64::try_from(r.get::<_, i64>(1)?).unwrap_or_default(),
                prev: r.get(2)?,
                hash: r.get(3)?,
                body: r.get(4)?,
            })
        })
        .map_err(unavailable)?;
    rows.collect::<Result<_, _>>().map_err(unavailable)
}

pub(super) fn list_events(
    conn: &Connection,
    namespace: &str,
    execution: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<EventRecord>, StoreError> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn
        .prepare_cached(
            "SELECT sequence, body FROM events WHERE namespace = CAST(?1 AS TEXT) AND execution = CAST(?2 AS TEXT) AND sequence > ?3
             ORDER BY sequence LIMIT ?4",
        )
        .map_err(unavailable)?;
    let rows = stmt
        .query_map(params![namespace, execution, after, limit], |r| {
            let sequence: i64 = r.get(0)?;
            Ok(EventRecord {
                namespace: namespace.to_owned(),
                execution: execution.to_owned(),
                sequence: u64::try_from(sequence).unwrap_or_default(),
                body: r.get(1)?,
            })
        })
        .map_err(unavailable)?;
    rows.collect::<Result<_, _>>().map_err(unavailable)
}

/// One call from a rate cell (GCRA), in one statement: the upsert moves
/// the cell on only if the call fits, and returns nothing if it does not.
pub(super) fn take_rate(
    conn: &Connection,
    cell: &RateCell,
    now_ms: i64,
) -> Result<Option<u64>, StoreError> {
    let taken = conn
        .prepare_cached(
            "INSERT INTO rate_cells (namespace, rate_limit, key, tat) VALUES (?1, ?2, ?3, ?4 + ?5)
             ON CONFLICT (namespace, rate_limit, key) DO UPDATE SET tat = MAX(tat, ?4) + ?5
             WHERE MAX(tat, ?4) + ?5 - ?6 <= ?4
             RETURNING tat",
        )
        .and_then(|mut stmt| {
            stmt.query_row(
                params![
                    cell.namespace,
                    cell.limit,
                    cell.key,
                    now_ms,
                    cell.interval_ms,
                    cell.tolerance_ms
                ],
                |_| Ok(()),
            )
            .optional()
        })
        .map_err(unavailable)?;
    if taken.is_some() {
        return Ok(None);
    }
    let tat: i64 = conn
        .prepare_cached(
            "SELECT tat FROM rate_cells WHERE namespace = ?1 AND rate_limit = ?2 AND key = ?3",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![cell.namespace, cell.limit, cell.key], |row| {
                row.get(0)
            })
        })
        .map_err(unavailable)?;
    Ok(Some(cell.wait_ms(tat, now_ms)))
}
