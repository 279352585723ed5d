//! A batch's records written in one statement each: the inserts, and the
//! optimistic updates. Each record's columns travel as arrays (`UNNEST`),
//! so a batch costs a round trip or two, not one per record.

use std::collections::HashMap;

use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_postgres::{PgConnection, PgRow};

use super::unavailable;
use super::writes::version_to_sql;
use crate::{Record, StoreError};

/// The columns `objects` keeps of each record, as arrays bound `$1..$15`
/// in the order of `u(k, ns, n, v, l, t, p, e, c, a, cm, cc, ca, b, x)`,
/// `x` being `extra`'s value for the record.
const UNNESTED: &str = "UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[],
                               $6::TEXT[], $7::TEXT[], $8::TEXT[], $9::TEXT[], $10::TEXT[],
                               $11::BIGINT[], $12::TEXT[], $13::BIGINT[], $14::TEXT[], $15::BIGINT[])
                        AS u(k, ns, n, v, l, t, p, e, c, a, cm, cc, ca, b, x)";

/// Runs `sql` (which reads the records from [`UNNESTED`]) over `records`,
/// `extra` giving each one's fifteenth column, and returns the rows it
/// returns (each starting with `kind, namespace, name`).
async fn unnested(
    conn: &mut PgConnection,
    sql: &str,
    records: &[&Record],
    extra: impl Fn(usize, &Record) -> Option<i64>,
) -> Result<Vec<PgRow>, StoreError> {
    let text = |f: fn(&Record) -> Option<&str>| -> Vec<Option<&str>> {
        records.iter().map(|r| f(r)).collect()
    };
    let number = |f: fn(&Record) -> Option<i64>| -> Vec<Option<i64>> {
        records.iter().map(|r| f(r)).collect()
    };
    let versions = records
        .iter()
        .map(|r| version_to_sql(r.resource_version))
        .collect::<Result<Vec<_>, _>>()?;
    let labels: Vec<String> = records
        .iter()
        .map(|r| serde_json::to_string(&r.labels).unwrap_or_else(|_| "{}".to_owned()))
        .collect();
    let extras: Vec<Option<i64>> = records
        .iter()
        .enumerate()
        .map(|(i, r)| extra(i, r))
        .collect();
    // Prepared and planned once per connection, on the batcher's own
    // connections, whose settings keep the plan by key (`batches.rs`).
    query(sql)
        .bind(text(|r| Some(&r.kind)))
        .bind(text(|r| Some(&r.namespace)))
        .bind(text(|r| Some(&r.name)))
        .bind(versions)
        .bind(labels)
        .bind(text(|r| r.index.tool.as_deref()))
        .bind(text(|r| r.index.phase.as_deref()))
        .bind(text(|r| r.index.execution.as_deref()))
        .bind(text(|r| r.index.checksum.as_deref()))
        .bind(text(|r| r.index.agent.as_deref()))
        .bind(number(|r| r.index.cost.as_ref().map(|c| c.micros)))
        .bind(text(|r| r.index.cost.as_ref().map(|c| c.currency.as_str())))
        .bind(number(|r| r.index.cost.as_ref().map(|c| c.at_ms)))
        .bind(text(|r| Some(&r.body)))
        .bind(extras)
        .fetch_all(&mut *conn)
        .await
        .map_err(unavailable)
}

/// For each of `records`, whether a returned row names it.
fn returned(records: &[&Record], rows: &[PgRow]) -> Result<Vec<bool>, StoreError> {
    let at: HashMap<_, _> = records
        .iter()
        .enumerate()
        .map(|(i, r)| ((r.kind.as_str(), r.namespace.as_str(), r.name.as_str()), i))
        .collect();
    let mut found = vec![false; records.len()];
    for row in rows {
        let kind: &str = row.try_get(0).map_err(unavailable)?;
        let namespace: &str = row.try_get(1).map_err(unavailable)?;
        let name: &str = row.try_get(2).map_err(unavailable)?;
        if let Some(&i) = at.get(&(kind, namespace, name)) {
            found[i] = true;
        }
    }
    Ok(found)
}

/// Inserts `records` (of distinct names) in one statement; whether each
/// was inserted (if not, its name was taken).
pub(super) async fn insert_all(
    conn: &mut PgConnection,
    records: &[&Record],
) -> Result<Vec<bool>, StoreError> {
    if records.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "INSERT INTO objects (kind, namespace, name, resource_version, labels, tool, phase,
         execution, checksum, agent, cost_micros, cost_currency, cost_at, body, created_at)
         SELECT k, ns, n, v, l::jsonb, t, p, e, c, a, cm, cc, ca, b, x FROM {UNNESTED}
         ON CONFLICT (kind, namespace, name) DO NOTHING
         RETURNING kind, namespace, name"
    );
    let rows = unnested(conn, &sql, records, |_, r| r.created_at()).await?;
    returned(records, &rows)
}

/// Replaces each of `records` (of distinct names) whose stored version is
/// the one paired with it, in one statement; whether each was replaced.
///
/// Its first part locks the rows one by one in the order of `records`,
/// which the batch sorted in the order every batch of every replica takes
/// its locks, so two batches cannot deadlock. A row whose version changed
/// while it waited for the lock is left out. The update then writes only
/// the rows locked, each found by its `seq`: it waits for none.
pub(super) async fn replace_all(
    conn: &mut PgConnection,
    records: &[(&Record, u64)],
) -> Result<Vec<bool>, StoreError> {
    if records.is_empty() {
        return Ok(Vec::new());
    }
    let (records, expected): (Vec<&Record>, Vec<u64>) = records.iter().copied().unzip();
    let expected = expected
        .into_iter()
        .map(version_to_sql)
        .collect::<Result<Vec<_>, _>>()?;
    let sql = format!(
        "WITH locked AS MATERIALIZED (
           SELECT l.seq, u.v, u.l, u.t, u.p, u.e, u.c, u.a, u.cm, u.cc, u.ca, u.b
           FROM {UNNESTED}, LATERAL (
             SELECT o.seq FROM objects o
             WHERE o.kind = u.k AND o.namespace = u.ns AND o.name = u.n
               AND o.resource_version = u.x
             LIMIT 1 FOR UPDATE) l)
         UPDATE objects o SET resource_version = u.v, labels = u.l::jsonb, tool = u.t,
         phase = u.p, execution = u.e, checksum = u.c, agent = u.a, cost_micros = u.cm,
         cost_currency = u.cc, cost_at = u.ca, body = u.b
         FROM locked u WHERE o.seq = u.seq
         RETURNING o.kind, o.namespace, o.name"
    );
    let rows = unnested(conn, &sql, &records, |i, _| Some(expected[i])).await?;
    returned(&records, &rows)
}
