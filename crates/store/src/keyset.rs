//! Where a list's next page starts: its `continue` token, parsed and made
//! by both stores alike. A list in `seq` order continues below a `seq`; a
//! list narrowed to a creation-time range runs by (creation time, `seq`)
//! and continues below that pair, written `{created_ms}.{seq}`.

use crate::{ListQuery, StoreError};

/// The last row of the previous page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// Rows with a lower `seq`.
    Seq(i64),
    /// Rows created earlier, or at the same millisecond with a lower `seq`.
    Created { ms: i64, seq: i64 },
}

impl After {
    /// The query's token, checked against the query's order.
    pub(crate) fn of(q: &ListQuery) -> Result<Option<After>, StoreError> {
        let Some(token) = &q.continue_from else {
            return Ok(None);
        };
        let invalid = || StoreError::InvalidArgument(format!("invalid continue token {token:?}"));
        let after = if q.by_creation() {
            let (ms, seq) = token.split_once('.').ok_or_else(invalid)?;
            After::Created {
                ms: ms.parse().map_err(|_| invalid())?,
                seq: seq.parse().map_err(|_| invalid())?,
            }
        } else {
            After::Seq(token.parse().map_err(|_| invalid())?)
        };
        Ok(Some(after))
    }

    /// The query narrowed to rows up to this one's creation time: the
    /// index's range then starts at the previous page's last row (one
    /// upper bound: given two, SQLite ranges over one and filters by the
    /// other, which would step through every earlier page again). The
    /// rows of that last millisecond still to come are then told apart by
    /// `(created_at < ms OR seq < seq)`.
    pub(crate) fn narrow(after: Option<After>, q: &ListQuery) -> ListQuery {
        let mut q = q.clone();
        if let Some(After::Created { ms, .. }) = after {
            let through = ms.saturating_add(1);
            q.created_before_ms = Some(q.created_before_ms.map_or(through, |b| b.min(through)));
        }
        q
    }

    /// The token that continues after a row, in the query's order.
    pub(crate) fn token(q: &ListQuery, seq: i64, created_ms: Option<i64>) -> String {
        match created_ms.filter(|_| q.by_creation()) {
            Some(ms) => format!("{ms}.{seq}"),
            None => seq.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_in_each_order() {
        let mut q = ListQuery::default();
        q.continue_from = Some(After::token(&q, 42, Some(7)));
        assert_eq!(After::of(&q).unwrap(), Some(After::Seq(42)));
        q.created_since_ms = Some(0);
        q.continue_from = Some(After::token(&q, 42, Some(-7)));
        assert_eq!(
            After::of(&q).unwrap(),
            Some(After::Created { ms: -7, seq: 42 })
        );
        // A token of the other order is refused, not misread.
        q.continue_from = Some("42".into());
        assert!(After::of(&q).is_err());
        q.created_since_ms = None;
        q.continue_from = Some("7.42".into());
        assert!(After::of(&q).is_err());
    }
}
