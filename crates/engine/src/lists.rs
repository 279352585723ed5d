//! Lists as clients ask for them: their parameters (a label selector, a
//! page size within bounds, a phase, creation-time bounds as RFC 3339 made
//! the store's unix milliseconds) checked and made the store's query.

use std::sync::Arc;

use chrono::DateTime;
use joch_core::LabelSelector;
use joch_core::names::validate_namespace;
use joch_core::object::IndexFields;
use joch_store::{ListQuery, Store};

use crate::EngineError;

/// Query parameters of a list, as the client gave them.
#[derive(Debug, Clone, Default)]
pub struct ListParams {
    /// `labelSelector`, e.g. `team=support,!canary`.
    pub label_selector: Option<String>,
    /// Page size.
    pub limit: Option<usize>,
    /// `continue` token from the previous page.
    pub continue_token: Option<String>,
    /// ToolCalls of this tool only.
    pub tool: Option<String>,
    /// ToolCalls in this phase only.
    pub phase: Option<String>,
    /// ToolCalls of this execution only.
    pub execution: Option<String>,
    /// ToolCalls made by this agent only.
    pub agent: Option<String>,
    /// `createdSince`: ToolCalls created at or after this RFC 3339 instant.
    /// With either bound the list runs by creation time (see
    /// [`joch_store::ListQuery::created_since_ms`]).
    pub created_since: Option<String>,
    /// `createdBefore`: ToolCalls created before this RFC 3339 instant.
    pub created_before: Option<String>,
}

/// Pages of the store's objects, within the configured page sizes.
#[derive(Clone)]
pub(crate) struct Lists {
    store: Arc<dyn Store>,
    default_limit: usize,
    max_limit: usize,
}

impl Lists {
    pub(crate) fn new(store: Arc<dyn Store>, default_limit: usize, max_limit: usize) -> Self {
        Self {
            store,
            default_limit,
            max_limit,
        }
    }

    /// A page of objects of `T`, as a client asked for it.
    pub(crate) async fn page<T: joch_core::Object>(
        &self,
        namespace: &str,
        params: ListParams,
    ) -> Result<joch_store::ObjectList<T>, EngineError> {
        valid_namespace(namespace)?;
        let query = self.query(namespace, params)?;
        Ok(self.store.list_objects(query).await?)
    }

    /// The store's query for a page a client asked for, its parameters
    /// checked.
    pub(crate) fn query(
        &self,
        namespace: &str,
        params: ListParams,
    ) -> Result<ListQuery, EngineError> {
        let selector = match &params.label_selector {
            Some(text) => LabelSelector::parse(text).map_err(|e| EngineError::InvalidQuery {
                parameter: "labelSelector",
                message: e.to_string(),
            })?,
            None => LabelSelector::default(),
        };
        if let Some(phase) = &params.phase {
            if joch_core::Phase::parse(phase).is_none() {
                return Err(EngineError::InvalidQuery {
                    parameter: "phase",
                    message: format!("unknown phase {phase:?}"),
                });
            }
        }
        let limit = params.limit.unwrap_or(self.default_limit);
        if limit == 0 || limit > self.max_limit {
            return Err(EngineError::InvalidQuery {
                parameter: "limit",
                message: format!("limit must be between 1 and {}", self.max_limit),
            });
        }
        let created_since_ms = bound("createdSince", &params.created_since)?;
        let created_before_ms = bound("createdBefore", &params.created_before)?;
        Ok(ListQuery {
            kind: String::new(),
            namespace: namespace.to_owned(),
            selector,
            index: IndexFields {
                tool: params.tool,
                phase: params.phase,
                execution: params.execution,
                agent: params.agent,
                checksum: None,
                ..IndexFields::default()
            },
            limit,
            continue_from: params.continue_token,
            created_since_ms,
            created_before_ms,
            every_row: false,
        })
    }
}

/// Refuses a namespace name that cannot be one, as a client's mistake.
pub(crate) fn valid_namespace(namespace: &str) -> Result<(), EngineError> {
    validate_namespace(namespace).map_err(|e| EngineError::InvalidQuery {
        parameter: "namespace",
        message: e.to_string(),
    })
}

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
