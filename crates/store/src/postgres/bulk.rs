//! A round of a batch's writes in one statement: the creates, the
//! optimistic updates, and the audit entries of the writes not refused,
//! queued for their chains (`chain.rs`). One statement is one round trip
//! and one transaction of its own, committed when it ends: no `BEGIN` or
//! `COMMIT` to wait for, no statement per record. Each write's columns
//! travel as arrays (`UNNEST`).

use std::collections::HashSet;

use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_postgres::PgConnection;

use super::unavailable;
use super::writes::version_to_sql;
use crate::{Record, StoreError};

/// One write of a round.
pub(super) struct Write<'a> {
    pub(super) record: &'a Record,
    /// The version an update expects; `None` for a create.
    pub(super) expected: Option<u64>,
    /// The audit entry to queue if the write is not refused.
    pub(super) audit: Option<&'a str>,
}

/// The round's statement. Its writes are bound as arrays `$1..$17`, in the
/// order of `u(...)`: the record's columns, then `cr` (a create's
/// `created_at`), `ex` (an update's expected version, `NULL` for a
/// create) and `au` (the audit entry).
///
/// - `created` inserts the creates; one whose name is taken is skipped.
/// - `locked` locks the updates' rows one by one in the round's order,
///   which the batch sorted in the order every batch of every replica
///   takes its locks, so two rounds cannot deadlock. A row whose version
///   changed while it waited for the lock is left out.
/// - `updated` writes only the rows locked, each found by its `seq`: it
///   waits for none.
/// - `queued` queues the entries of the writes done, in the round's order.
///   It finds the creates done among the names `created` returns as keys
///   of a JSON object, looked up by key: joined to `u` instead, every pair
///   would be compared (no hash join on the batcher's connections), which
///   took 3 of 8 ms in a round of 256.
///
/// It returns the names created and the positions (from 1) of the
/// updates done. The parts of one statement see the table as it was when
/// the statement began, so an update never sees a create of the same
/// round: a round names each record once.
const WRITE: &str = "
WITH u AS MATERIALIZED (
  SELECT * FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[],
                       $6::TEXT[], $7::TEXT[], $8::TEXT[], $9::TEXT[], $10::TEXT[],
                       $11::BIGINT[], $12::TEXT[], $13::BIGINT[], $14::TEXT[], $15::BIGINT[],
                       $16::BIGINT[], $17::TEXT[])
  WITH ORDINALITY AS u(k, ns, n, v, l, t, p, e, c, a, cm, cc, ca, b, cr, ex, au, i)),
created AS (
  INSERT INTO objects (kind, namespace, name, resource_version, labels, tool, phase,
    execution, checksum, agent, cost_micros, cost_currency, cost_at, body, created_at)
  SELECT k, ns, n, v, l::jsonb, t, p, e, c, a, cm, cc, ca, b, cr FROM u WHERE ex IS NULL
  ON CONFLICT (kind, namespace, name) DO NOTHING
  RETURNING kind, namespace, name),
locked AS MATERIALIZED (
  SELECT l.seq, u.i, u.ns, u.au, u.v, u.l, u.t, u.p, u.e, u.c, u.a, u.cm, u.cc, u.ca, u.b
  FROM u, LATERAL (
    SELECT o.seq FROM objects o
    WHERE o.kind = u.k AND o.namespace = u.ns AND o.name = u.n AND o.resource_version = u.ex
    LIMIT 1 FOR UPDATE) l
  WHERE u.ex IS NOT NULL),
updated AS (
  UPDATE objects o SET resource_version = u.v, labels = u.l::jsonb, tool = u.t, phase = u.p,
    execution = u.e, checksum = u.c, agent = u.a, cost_micros = u.cm, cost_currency = u.cc,
    cost_at = u.ca, body = u.b
  FROM locked u WHERE o.seq = u.seq
  RETURNING u.i, u.ns, u.au),
queued AS (
  INSERT INTO audit_queue (namespace, body)
  SELECT ns, au FROM (
    SELECT u.i, u.ns, u.au FROM u
    WHERE u.ex IS NULL AND u.au IS NOT NULL AND (
      SELECT jsonb_object_agg(jsonb_build_array(kind, namespace, name)::TEXT, 0) FROM created
    ) ? jsonb_build_array(u.k, u.ns, u.n)::TEXT
    UNION ALL
    SELECT i, ns, au FROM updated WHERE au IS NOT NULL) done
  ORDER BY i)
SELECT kind, namespace, name, NULL::BIGINT FROM created
UNION ALL
SELECT NULL, NULL, NULL, i FROM updated";

/// Applies `writes` (each record named once) in one statement; whether
/// each was done. A create not done found its name taken; an update not
/// done found its record gone or at another version.
pub(super) async fn write_all(
    conn: &mut PgConnection,
    writes: &[Write<'_>],
) -> Result<Vec<bool>, StoreError> {
    if writes.is_empty() {
        return Ok(Vec::new());
    }
    let text = |f: fn(&Record) -> Option<&str>| -> Vec<Option<&str>> {
        writes.iter().map(|w| f(w.record)).collect()
    };
    let number = |f: fn(&Record) -> Option<i64>| -> Vec<Option<i64>> {
        writes.iter().map(|w| f(w.record)).collect()
    };
    let version = |v: Option<u64>| v.map(version_to_sql).transpose();
    let versions = writes
        .iter()
        .map(|w| version(Some(w.record.resource_version)))
        .collect::<Result<Vec<_>, _>>()?;
    let expected = writes
        .iter()
        .map(|w| version(w.expected))
        .collect::<Result<Vec<_>, _>>()?;
    let labels: Vec<String> = writes
        .iter()
        .map(|w| serde_json::to_string(&w.record.labels).unwrap_or_else(|_| "{}".to_owned()))
        .collect();
    // Prepared and planned once per connection, on the batcher's own
    // connections, whose settings keep the plan by key (`batches.rs`).
    let rows = query(WRITE)
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
        .bind(number(|r| r.created_at()))
        .bind(expected)
        .bind(writes.iter().map(|w| w.audit).collect::<Vec<_>>())
        .fetch_all(&mut *conn)
        .await
        .map_err(unavailable)?;
    let (mut created, mut updated) = (HashSet::new(), HashSet::new());
    for row in &rows {
        match row.try_get::<Option<i64>, _>(3).map_err(unavailable)? {
            Some(position) => updated.insert(position),
            None => created.insert((
                row.try_get::<&str, _>(0).map_err(unavailable)?,
                row.try_get::<&str, _>(1).map_err(unavailable)?,
                row.try_get::<&str, _>(2).map_err(unavailable)?,
            )),
        };
    }
    Ok(writes
        .iter()
        .zip(1..)
        .map(|(w, position)| match w.expected {
            Some(_) => updated.contains(&position),
            None => {
                let r = w.record;
                created.contains(&(r.kind.as_str(), r.namespace.as_str(), r.name.as_str()))
            }
        })
        .collect())
}
