//! The record and audit rows both SQL stores read, decoded once: each
//! store's row type only says how it reads one column ([`Columns`]), and
//! [`record`] and [`audit`] put the columns together the same way for both.

use std::collections::BTreeMap;

use joch_core::object::{IndexFields, IndexedCost};

use crate::{AuditRecord, Record};

/// One row of a driver, read column by column (by index).
pub(crate) trait Columns {
    /// The driver's error.
    type Error;

    /// A text column.
    fn text(&self, at: usize) -> Result<String, Self::Error>;
    /// A nullable text column.
    fn maybe_text(&self, at: usize) -> Result<Option<String>, Self::Error>;
    /// An integer column.
    fn int(&self, at: usize) -> Result<i64, Self::Error>;
    /// A nullable integer column.
    fn maybe_int(&self, at: usize) -> Result<Option<i64>, Self::Error>;
}

/// A row of the records' columns (`seq, kind, namespace, name, version,
/// labels, tool, phase, execution, checksum, agent, cost_micros,
/// cost_currency, cost_at, body, created_ms`) as its `seq` and record.
pub(crate) fn record<R: Columns>(row: &R) -> Result<(i64, Record), R::Error> {
    let labels = row.text(5)?;
    let version = row.int(4)?;
    let cost = match (row.maybe_int(11)?, row.maybe_text(12)?) {
        (Some(micros), Some(currency)) => Some(IndexedCost {
            micros,
            currency,
            at_ms: row.maybe_int(13)?.unwrap_or_default(),
        }),
        _ => None,
    };
    let record = Record {
        kind: row.text(1)?,
        namespace: row.text(2)?,
        name: row.text(3)?,
        resource_version: u64::try_from(version).unwrap_or_default(),
        labels: serde_json::from_str::<BTreeMap<String, String>>(&labels).unwrap_or_default(),
        index: IndexFields {
            tool: row.maybe_text(6)?,
            phase: row.maybe_text(7)?,
            execution: row.maybe_text(8)?,
            checksum: row.maybe_text(9)?,
            agent: row.maybe_text(10)?,
            cost,
            created_ms: row.maybe_int(15)?,
        },
        body: row.text(14)?,
    };
    Ok((row.int(0)?, record))
}

/// An entry of `namespace`'s audit chain from `SELECT seq, prev, hash, body`.
pub(crate) fn audit<R: Columns>(namespace: &str, row: &R) -> Result<AuditRecord, R::Error> {
    Ok(AuditRecord {
        namespace: namespace.to_owned(),
        seq: u64::try_from(row.int(0)?).unwrap_or_default(),
        prev: row.text(1)?,
        hash: row.text(2)?,
        body: row.text(3)?,
    })
}
