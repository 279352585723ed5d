//! A list's creation-time bounds, as clients write them (RFC 3339), made
//! the store's unix milliseconds.

use chrono::DateTime;

use crate::EngineError;

/// `text` as unix milliseconds; `None` when not given. A value that is not
/// an RFC 3339 instant is the client's mistake, named by `parameter`.
pub(crate) fn bound(
    parameter: &'static str,
    text: &Option<String>,
) -> Result<Option<i64>, EngineError> {
    let Some(text) = text else {
        return Ok(None);
    };
    DateTime::parse_from_rfc3339(text.trim())
        .map(|t| Some(t.timestamp_millis()))
        .map_err(|e| EngineError::InvalidQuery {
            parameter,
            message: format!(
                "{parameter} {text:?} is not an RFC 3339 time (e.g. 2026-05-10T10:35:00Z): {e}"
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_rfc3339_instants_in_milliseconds() {
        let given = |t: &str| bound("createdSince", &Some(t.to_owned()));
        assert_eq!(bound("createdSince", &None).unwrap(), None);
        assert_eq!(given("1970-01-01T00:00:01.5Z").unwrap(), Some(1_500));
        assert_eq!(given("1970-01-01T01:00:00+01:00").unwrap(), Some(0));
        for bad in ["yesterday", "2026-05-10", "2026-05-10T10:35:00"] {
            assert!(matches!(
                given(bad),
                Err(EngineError::InvalidQuery {
                    parameter: "createdSince",
                    ..
                })
            ));
        }
    }
}
